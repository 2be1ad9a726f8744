"""The read commands on a Redis shared with an application: with 1,000,000 unrelated keys, each
within 1.2x of its time with none (issue 23), this version beside another, in one run.

    python bench/keyspace_scale.py [--names 200] [--keys 1000000] [--rounds 5] [--baseline DIR] [--json out.json]

DIR holds another version's ``lockrun`` package (``git archive move lockrun | tar -x -C DIR``).
For each version, two fresh redis-servers (bench-only: DEBUG is enabled to make the keys) get
``--names`` names with 20 runs each and 10 held locks, written by that version's own scripts
(so each reads its own layout); ``DEBUG POPULATE`` adds the unrelated keys to one of them, and
every command is timed on both, interleaved round by round (median of ``--rounds``). The first
``status`` on each server is reported on its own (``first_status_s``), not in the medians: a
version may do more on its first read (one before the registry of names walked the keyspace).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import redis
from common import LOCKRUN, ROOT, bench_env, machine, table, write_json

COMMANDS = {
    "status --json": ["status", "--json"],
    "history --fleet --limit 50": ["history", "--fleet", "--limit", "50", "--json"],
    "metrics --fleet": ["metrics", "--fleet"],
    "timeline --fleet": ["timeline", "--fleet", "--since", "1h"],
}
TARGET = 1.2

FILL = textwrap.dedent('''
    import json, sys, time, uuid
    from lockrun.backends.redis.backend import RedisBackend
    from lockrun.backends.values import FleetRecord, Lease

    url, names = sys.argv[1], int(sys.argv[2])
    backend = RedisBackend(url, "lockrun:", 5.0)
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int(t % 1 * 1e6)
    for n in range(names):
        name = f"job-{n:04d}"
        for r in range(21):
            run_id, token, now = uuid.uuid4().hex, uuid.uuid4().hex, time.time()
            info = {"token": token, "run_id": run_id, "host": f"app-{r % 7}", "pid": "4242", "boot_id": "elsewhere",
                    "pid_start": "1", "command": json.dumps(["/opt/job", name]), "started_at": iso(now),
                    "ttl_ms": "3600000"}
            lease = backend.acquire(name, token, 3600.0, info)
            assert isinstance(lease, Lease), lease
            if r == 20 and n % (names // 10 or 1) == 0:
                continue  # held: status lists it
            row = {"run_id": run_id, "status": "succeeded", "exit_code": 0, "host": f"app-{r % 7}", "pid": 4242,
                   "command": ["/opt/job", name], "started_at": iso(now), "ended_at": iso(now + 1),
                   "duration_s": 1.0, "fencing_token": lease.fencing_token, "exit_status": 0}
            assert backend.release(lease, record=FleetRecord(row))
    backend.close()
''')


class DebugRedis:
    """A bench-only redis-server with DEBUG enabled (DEBUG POPULATE makes the unrelated keys)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="lr-bench-ks-"))
        self.socket = str(self.dir / "redis.sock")
        self.url = f"unix://{self.socket}"
        self.proc = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", self.socket, "--save", "", "--appendonly", "no",
             "--dir", str(self.dir), "--enable-debug-command", "local"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while True:
            try:
                self.client().ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise SystemExit("redis-server did not start") from None
                time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.socket, socket_timeout=120)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def measure(package_dir: str, names: int, keys: int, rounds: int) -> dict:
    """Two servers filled alike, one of them crowded; each command timed on both, interleaved
    round by round (this machine is noisy: a slow moment hits both alike)."""
    servers = {"bare": DebugRedis(), "crowded": DebugRedis()}
    try:
        env_py = {**os.environ, "PYTHONPATH": package_dir}
        for server in servers.values():
            subprocess.run([sys.executable, "-c", FILL, server.url, str(names)], env=env_py, check=True)
        with tempfile.TemporaryDirectory() as tmp:
            envs = {kind: {**bench_env(Path(tmp) / kind, server.url), "PYTHONPATH": package_dir}
                    for kind, server in servers.items()}
            servers["crowded"].client().execute_command("DEBUG", "POPULATE", keys, "app:cache")
            first = {}
            for kind in servers:  # the first read, apart
                started = time.perf_counter()
                subprocess.run([LOCKRUN, "status", "--json"], env=envs[kind], capture_output=True, check=True)
                first[kind] = time.perf_counter() - started
            stats = servers["crowded"].client().info("commandstats")
            scans = stats.get("cmdstat_scan", {}).get("calls", 0)
            samples: dict[str, dict[str, list[float]]] = {kind: {c: [] for c in COMMANDS} for kind in servers}
            for _ in range(rounds):
                for command, args in COMMANDS.items():
                    for kind in servers:
                        started = time.perf_counter()
                        subprocess.run([LOCKRUN, *args], env=envs[kind], capture_output=True, check=True)
                        samples[kind][command].append(time.perf_counter() - started)
            stats = servers["crowded"].client().info("commandstats")
            scans = stats.get("cmdstat_scan", {}).get("calls", 0) - scans
            version = servers["bare"].client().info("server")["redis_version"]
    finally:
        for server in servers.values():
            server.stop()
    median = {kind: {c: statistics.median(v) for c, v in per.items()} for kind, per in samples.items()}
    return {"bare_s": median["bare"], "crowded_s": median["crowded"], "scan_calls_crowded": scans,
            "first_status_s": first, "redis_server": version}


def main(argv: list[str]) -> dict:
    names = int(argv[argv.index("--names") + 1]) if "--names" in argv else 200
    keys = int(argv[argv.index("--keys") + 1]) if "--keys" in argv else 1_000_000
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 5
    baseline = argv[argv.index("--baseline") + 1] if "--baseline" in argv else None
    versions = {"this version": str(ROOT)}
    if baseline:
        versions = {"before (baseline)": os.path.abspath(baseline), **versions}
    results = {label: measure(path, names, keys, rounds) for label, path in versions.items()}
    rows = []
    for label, r in results.items():
        for command in COMMANDS:
            ratio = r["crowded_s"][command] / r["bare_s"][command]
            rows.append([label, command, f"{r['bare_s'][command]:.3f}", f"{r['crowded_s'][command]:.3f}",
                         f"{ratio:.2f}", f"<= {TARGET}" if label == "this version" else ""])
    print(table(["version", "command", "s, 0 other keys", f"s, {keys:,} other keys", "ratio", "target"], rows))
    mine = results["this version"]
    met = all(mine["crowded_s"][c] / mine["bare_s"][c] <= TARGET for c in COMMANDS)
    print(f"\n{names} names; SCAN calls with {keys:,} other keys: "
          + ", ".join(f"{label} {r['scan_calls_crowded']}" for label, r in results.items())
          + f"; within {TARGET}x: {'met' if met else 'MISSED'}")
    data = {"machine": machine(), "names": names, "keys": keys, "rounds": rounds, "versions": results}
    write_json(argv, data)
    return data


if __name__ == "__main__":
    main(sys.argv[1:])
