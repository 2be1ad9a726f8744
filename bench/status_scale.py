"""`status --json` with 10,000 held locks in Redis (the registry of names + one script call per
1,000 names), each with a last run.

    python bench/status_scale.py [--locks 10000] [--rounds 5] [--json out.json]

The locks are written straight into Redis in lockrun's key layout (a token with a
long PX and a full info hash each), as if 10,000 holders on other hosts held them,
and each name has a last run in the fleet record (its `last` hash), which status shows, and a
place in the registry of names, as the acquire script gives it.
Target: <= 1.5 s.
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

from lockrun.backends.redis.backend import lock_keys
from lockrun.backends.redis.keys import registry_key


def fill(server: RedisServer, count: int) -> None:
    client = server.client()
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        keys = lock_keys("lockrun:", f"job-{i:05d}")
        token = f"{i:032x}"
        pipe.set(keys.lock, token, px=3_600_000)
        pipe.hset(keys.info, mapping={
            "token": token, "run_id": f"{i:032x}", "host": f"host-{i % 40}", "boot_id": "elsewhere",
            "pid": str(1000 + i), "pid_start": "1", "child_pid": str(2000 + i),
            "command": json.dumps(["/opt/app/bin/job", str(i)]), "started_at": now, "heartbeat_at": now,
            "ttl_ms": "3600000", "fencing_token": str(i + 1),
        })
        pipe.pexpire(keys.info, 3_600_000)
        last = {"run_id": f"{i + 1:032x}", "status": "succeeded", "exit_code": 0, "host": f"host-{(i + 1) % 40}",
                "pid": 999 + i, "command": ["/opt/app/bin/job", str(i)], "started_at": now, "ended_at": now,
                "duration_s": 12.5, "fencing_token": i, "exit_status": 0}
        pipe.hset(keys.last, mapping={"run_id": last["run_id"], "row": json.dumps(last), "last_success_at": now})
        pipe.zadd(registry_key("lockrun:"), {f"job-{i:05d}": int(time.time() * 1000)})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


def main(argv: list[str]) -> dict:
    count = int(argv[argv.index("--locks") + 1]) if "--locks" in argv else 10_000
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 5
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        fill(server, count)
        env = bench_env(Path(tmp), server.url)
        samples, listed, with_last_run = [], 0, 0
        for _ in range(rounds):
            started = time.perf_counter()
            result = subprocess.run([LOCKRUN, "status", "--json"], env=env, capture_output=True, text=True,
                                    check=True)
            samples.append(time.perf_counter() - started)
            locks = json.loads(result.stdout)["locks"]
            listed = len(locks)
            with_last_run = sum(1 for lock in locks if lock["last_run"])
        version = server.version()
    median = statistics.median(samples)
    print(table(["status --json", "value", "target"], [
        ["locks held", count, ""],
        ["locks listed", listed, count],
        ["listed with their last run", with_last_run, count],
        ["median seconds", f"{median:.3f}", "<= 1.5"],
        ["max seconds", f"{max(samples):.3f}", ""],
    ]))
    met = median <= 1.5 and listed == count == with_last_run
    print(f"\nstatus --json with {count} locks: {median:.3f}s: {'met' if met else 'MISSED'}")
    data = {"machine": {**machine(), "redis_server": version}, "locks": count, "listed": listed,
            "with_last_run": with_last_run,
            "median_s": median, "max_s": max(samples)}
    write_json(argv, data)
    return data


if __name__ == "__main__":
    main(sys.argv[1:])
