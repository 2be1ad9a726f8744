"""`status --all --json` and `lockrun check` over 10,000 names in Redis (issue 26): every name
known, half of them held, half with a declared cadence, some paused, each with a last run.

    python bench/health_scale.py [--names 10000] [--rounds 5] [--json out.json]

The names are written straight into Redis in lockrun's key layout as bench/status_scale.py
writes them (a holder and a fleet ``last`` per name, the registry), then every other name is
freed (its lock deleted), every other one gets a ``cadence`` key and every hundredth a pause.
Target: <= 1.5 s each, with no per-name round trip (one script call per 1,000 names for the
holders, one for the pauses and cadences).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import LOCKRUN, RedisServer, bench_env, machine, table, write_json
from status_scale import fill

from lockrun.backends.redis.backend import lock_keys


def declare(server: RedisServer, count: int) -> None:
    client = server.client()
    now_ms = int(time.time() * 1000)
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        keys = lock_keys("lockrun:", f"job-{i:05d}")
        if i % 2:
            pipe.delete(keys.lock, keys.info)  # free: status --all lists it all the same
        else:
            pipe.set(keys.cadence, json.dumps({"every": 3600.0, "grace": 300.0}, separators=(",", ":")),
                     px=86_400_000)
        if i % 100 == 0:
            until = now_ms + 3_600_000
            pipe.hset(keys.paused, mapping={"who": "ops", "where": "bench", "reason": "bench",
                                            "until": "2099-01-01T00:00:00.000000Z", "until_ms": str(until)})
            pipe.pexpireat(keys.paused, until)
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


def timed(env: dict, argv: list[str], rounds: int) -> tuple[list[float], str]:
    samples, out = [], ""
    for _ in range(rounds):
        started = time.perf_counter()
        result = subprocess.run([LOCKRUN, *argv], env=env, capture_output=True, text=True)
        samples.append(time.perf_counter() - started)
        out = result.stdout
    return samples, out


def main(argv: list[str]) -> dict:
    count = int(argv[argv.index("--names") + 1]) if "--names" in argv else 10_000
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 5
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        fill(server, count)
        declare(server, count)
        env = bench_env(Path(tmp), server.url)
        status_samples, status_out = timed(env, ["status", "--all", "--json"], rounds)
        check_samples, check_out = timed(env, ["check", "--json"], rounds)
        version = server.version()
    locks = json.loads(status_out)["locks"]
    listed = len({lock["name"] for lock in locks})
    declared = sum(1 for lock in locks if lock["cadence"])
    paused = sum(1 for lock in locks if lock["paused"])
    checked = len(json.loads(check_out)["names"])
    status_median, check_median = statistics.median(status_samples), statistics.median(check_samples)
    print(table(["status --all / check", "value", "target"], [
        ["names", count, ""],
        ["listed by status --all", listed, count],
        ["with a cadence / paused", f"{declared} / {paused}", f"{count // 2} / {count // 100}"],
        ["judged by check", checked, count],
        ["status --all --json, median seconds", f"{status_median:.3f}", "<= 1.5"],
        ["check --json, median seconds", f"{check_median:.3f}", "<= 1.5"],
    ]))
    met = status_median <= 1.5 and check_median <= 1.5 and listed == count == checked
    print(f"\nstatus --all and check over {count} names: {status_median:.3f}s, {check_median:.3f}s:"
          f" {'met' if met else 'MISSED'}")
    data = {"machine": {**machine(), "redis_server": version}, "names": count, "listed": listed,
            "declared": declared, "paused": paused, "checked": checked,
            "status_all_median_s": status_median, "check_median_s": check_median}
    write_json(argv, data)
    return data


if __name__ == "__main__":
    main(sys.argv[1:])
