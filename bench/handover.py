"""Hand-over latency: from the release of a lock to the start of the next waiter's command.

    python bench/handover.py [--rounds 50] [--waiters 4] [--baseline SRC] [--json out.json]

Each round: the benchmark itself holds the lock (a SET with its own token), N
lockruns wait on it with --wait, each running `date +%s.%N`. Once all of them
block in BLPOP, the benchmark notes the time and releases the lock with
lockrun's own release script; the sample is the first `date` printed minus that
time (same host, same clock). It includes the waiter's wake-up, its acquire
round trip, lockrun's hand-over of the prepared process to exec, and the exec
of `date`. Targets: p50 <= 5 ms, p99 <= 25 ms. (Polling lock libraries hand
over in 50-100 ms on average: they sleep between attempts.) With --baseline SRC (another
version's ``lockrun`` package, as in startup.py) its rounds alternate with this version's, both
run as `python -P -m lockrun`.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import RedisServer, bench_env, machine, percentile, table, versions, write_json

from lockrun.backends.redis.backend import RedisBackend, lock_keys
from lockrun.backends.values import Lease


def one_round(server: RedisServer, lockrun: list[str], env: dict, waiters: int) -> float:
    client = server.client()
    keys = lock_keys("lockrun:", "ho")
    client.set(keys.lock, "bench-holder", px=60000)
    procs = [subprocess.Popen([*lockrun, "-n", "ho", "-w", "120", "--", "date", "+%s.%N"], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(waiters)]
    deadline = time.monotonic() + 60
    while int(client.info("clients")["blocked_clients"]) < waiters:
        if time.monotonic() > deadline:
            raise SystemExit("the waiters never all blocked")
        time.sleep(0.01)
    time.sleep(0.05)  # let the last one settle into BLPOP; not part of the measurement
    holder = RedisBackend(server.url, "lockrun:", timeout=5.0)  # lockrun's own release, whatever its script takes
    released_at = time.time()
    holder.release(Lease(name="ho", token="bench-holder", fencing_token=0, ttl=60, sent_at=0.0))
    starts = [float(p.communicate(timeout=120)[0]) for p in procs]
    return min(starts) - released_at


def summary(samples: list[float]) -> dict:
    return {"samples": len(samples), "p50_ms": percentile(samples, 50) * 1000, "p99_ms": percentile(samples, 99) * 1000,
            "mean_ms": statistics.mean(samples) * 1000, "max_ms": max(samples) * 1000}


def main(argv: list[str]) -> dict:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 50
    waiters = int(argv[argv.index("--waiters") + 1]) if "--waiters" in argv else 4
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        cases = versions(argv, bench_env(Path(tmp), server.url))
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(rounds):
            for name, (lockrun, env) in cases.items():
                samples[name].append(one_round(server, lockrun, env, waiters))
        version = server.version()
    results = {name: summary(values) for name, values in samples.items()}
    rows = [[name, r["samples"], *(f"{r[k]:.2f}" for k in ("p50_ms", "p99_ms", "mean_ms", "max_ms"))]
            for name, r in results.items()]
    print(table(["version", "samples", "p50 ms", "p99 ms", "mean ms", "max ms"], rows))
    mine = results["this version"]
    p50, p99 = mine["p50_ms"], mine["p99_ms"]
    met = p50 <= 5 and p99 <= 25
    print(f"\nhand-over p50 {p50:.2f} ms, p99 {p99:.2f} ms (targets 5 and 25): {'met' if met else 'MISSED'}")
    result = {"machine": {**machine(), "redis_server": version}, "waiters": waiters, **mine}
    if "baseline" in results:
        result["baseline"] = results["baseline"]
    write_json(argv, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
