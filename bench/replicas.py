"""What --replicas 1 costs against a local replica: the acquire and renewal round trips, a whole run,
and the number of round trips (still two for an uncontended run).

    python bench/replicas.py [--rounds 300] [--json out.json]

A master (unix socket for lockrun, TCP for its replica) and one replica on this host, so the
replica's acknowledgement costs what replication costs on loopback, no network. Three measures:

* in-process: ``RedisBackend.acquire`` (+ release, not timed) and ``renew`` with ``replicas=0``
  and ``replicas=1``, interleaved, median and p99 in microseconds: the round trip that lockrun's
  acquire-to-exec and every renewal pay;
* end to end: ``lockrun -n b [--replicas 1] -- true`` wall time, interleaved, medians;
* round trips of an uncontended ``--replicas 1`` run: the commands the master saw (MONITOR) and
  the request bursts a counting proxy saw (EVAL and WAIT pipelined are one).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis
from common import LOCKRUN, ROOT, bench_env, interleaved, machine, median_ms, percentile, table, write_json

sys.path.insert(0, str(ROOT))
from lockrun.backends.redis.backend import RedisBackend  # noqa: E402
from lockrun.backends.values import Lease  # noqa: E402
from tests.soak.proxy import FaultyProxy  # noqa: E402 - the request-counting proxy of the tests


class Replicated:
    """A master and one replica in a private temp dir, stopped on exit."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="lr-bench-rep-"))
        self.socket = str(self.dir / "master.sock")
        self.url = f"unix://{self.socket}"
        common = ["--save", "", "--appendonly", "no", "--bind", "127.0.0.1", "--repl-diskless-sync-delay", "0"]
        self.port = _free_port()
        self.master = subprocess.Popen(["redis-server", "--port", str(self.port), "--unixsocket", self.socket,
                                        "--dir", str(self.dir), *common], stdout=subprocess.DEVNULL)
        replica_dir = self.dir / "replica"
        replica_dir.mkdir()
        self.replica = subprocess.Popen(["redis-server", "--port", str(_free_port()), "--dir", str(replica_dir),
                                         "--replicaof", "127.0.0.1", str(self.port), *common],
                                        stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                role = self.client().execute_command("ROLE")
                if len(role[2]) == 1:
                    break
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the replica did not sync (is the redis-server package installed?)")
            time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.socket, socket_timeout=30, protocol=2)

    def version(self) -> str:
        return self.client().info("server")["redis_version"]

    def __enter__(self) -> Replicated:
        return self

    def __exit__(self, *exc) -> None:
        for proc in (self.replica, self.master):
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_process(server: Replicated, rounds: int) -> dict:
    """Acquire and renew round trips, replicas 0 and 1 interleaved, in microseconds."""
    backends = {n: RedisBackend(server.url, "lockrun:", timeout=5.0, replicas=n) for n in (0, 1)}
    info = {"host": "bench", "pid": "0"}
    acquire: dict[int, list[float]] = {0: [], 1: []}
    renew: dict[int, list[float]] = {0: [], 1: []}
    leases = {n: backends[n].acquire(f"renew-{n}", f"holder-{n}", 60.0, info) for n in (0, 1)}
    for i in range(rounds):
        for n, backend in backends.items():
            started = time.perf_counter()
            lease = backend.acquire(f"acq-{n}", f"token-{n}-{i}", 60.0, info)
            acquire[n].append(time.perf_counter() - started)
            assert isinstance(lease, Lease), lease
            backend.release(lease)
            started = time.perf_counter()
            backend.renew(leases[n], "2026-01-01T00:00:00Z", None)
            renew[n].append(time.perf_counter() - started)
    for n, backend in backends.items():
        backend.release(leases[n])
        backend.close()

    def us(values: list[float]) -> dict:
        return {"median_us": statistics.median(values) * 1e6, "p99_us": percentile(values, 99) * 1e6}

    return {"acquire": {n: us(v) for n, v in acquire.items()}, "renew": {n: us(v) for n, v in renew.items()}}


def round_trips(server: Replicated, env_dir: Path) -> dict:
    """Commands (MONITOR) and request bursts (proxy) of one uncontended `--replicas 1` run."""
    proxy = FaultyProxy(server.port).start()
    seen: list[str] = []
    started, done = threading.Event(), threading.Event()

    def watch():
        with server.client().monitor() as monitor:
            started.set()
            for event in monitor.listen():
                if event["command"] == "PING stop-monitor":
                    break
                if "lua" not in str(event.get("client_address", "")) and event.get("client_type") != "lua":
                    seen.append(event["command"].split()[0].upper())
        done.set()

    threading.Thread(target=watch, daemon=True).start()
    started.wait(10)
    env = bench_env(env_dir, f"redis://127.0.0.1:{proxy.port}/0")
    subprocess.run([LOCKRUN, "-n", "rt", "--replicas", "1", "--", "true"], env=env, check=True)
    server.client().execute_command("PING", "stop-monitor")
    done.wait(10)
    proxy.close()
    commands = [c for c in seen if c not in ("PING",)]
    return {"commands": commands, "requests": proxy.requests, "connections": proxy.connections}


def main(argv: list[str]) -> dict:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 300
    with Replicated() as server, tempfile.TemporaryDirectory() as tmp:
        calls = in_process(server, rounds)
        env = bench_env(Path(tmp) / "e2e", server.url)
        walls = interleaved({
            "--replicas 0": ([LOCKRUN, "-n", "b", "--", "true"], env),
            "--replicas 1": ([LOCKRUN, "-n", "b", "--replicas", "1", "--", "true"], env),
        }, rounds=max(10, rounds // 10))
        trips = round_trips(server, Path(tmp) / "rt")
        version = server.version()
    rows = []
    for what in ("acquire", "renew"):
        zero, one = calls[what][0], calls[what][1]
        rows.append([f"{what} round trip (in-process)", f"{zero['median_us']:.0f} µs (p99 {zero['p99_us']:.0f})",
                     f"{one['median_us']:.0f} µs (p99 {one['p99_us']:.0f})",
                     f"{one['median_us'] - zero['median_us']:+.0f} µs"])
    zero_ms, one_ms = median_ms(walls["--replicas 0"]), median_ms(walls["--replicas 1"])
    rows.append(["`lockrun -n b -- true` (wall)", f"{zero_ms:.1f} ms", f"{one_ms:.1f} ms",
                 f"{one_ms - zero_ms:+.1f} ms"])
    print(table(["", "--replicas 0", "--replicas 1", "cost"], rows))
    print(f"\nuncontended --replicas 1 run: commands {trips['commands']}, {trips['requests']} round trips "
          f"on {trips['connections']} connection(s)")
    result = {"machine": {**machine(), "redis_server": version}, "rounds": rounds, "calls": calls,
              "wall_median_ms": {"0": zero_ms, "1": one_ms}, "round_trips": trips}
    write_json(argv, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
