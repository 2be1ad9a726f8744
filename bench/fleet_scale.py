"""`history --fleet` over a big fleet record: 1,000 names with 1,000 runs each in Redis.

    python bench/fleet_scale.py [--names 1000] [--runs 1000] [--rounds 5] [--json out.json]

The record is written straight into Redis in lockrun's layout (a start and an end event
per run in each name's stream, a `last` and a `counts` hash per name), as if 40 hosts
had run every name every ten minutes for a week. Target: `history --fleet --limit 50`
<= 1.5 s. Filtered forms are measured too, for the record (a selective filter has to
read further back).
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

STEP_MS = 600_000  # each name runs every ten minutes


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}000Z"


def fill(server: RedisServer, names: int, runs: int) -> None:
    client = server.client()
    start = int(time.time() * 1000) - runs * STEP_MS
    pipe = client.pipeline(transaction=False)
    queued = 0
    for n in range(names):
        keys = lock_keys("lockrun:", f"job-{n:04d}")
        for r in range(runs):
            at = start + r * STEP_MS + n * 500  # the names interleave in time
            run_id = f"{n:04d}{r:028x}"
            host = f"app-{(n + r) % 40}"
            status, code = ("failed", 1) if r % 50 == 7 else ("succeeded", 0)
            common = {"run_id": run_id, "host": host, "pid": str(1000 + r), "command": json.dumps(["/opt/job", str(n)]),
                      "fencing_token": str(r + 1)}
            pipe.xadd(keys.runs, {"event": "start", **common, "started_at": iso(at), "ttl_ms": "60000"},
                      id=f"{at}-0")
            end = {"event": "end", **common, "status": status, "exit_code": str(code), "started_at": iso(at),
                   "ended_at": iso(at + 30_000), "duration_s": "30.0", "exit_status": str(code)}
            pipe.xadd(keys.runs, end, id=f"{at + 30_000}-0")
            queued += 2
            if queued >= 5000:
                pipe.execute()
                queued = 0
        last = {k: v for k, v in end.items() if k != "event"}
        pipe.hset(keys.last, mapping={"run_id": last["run_id"], "row": json.dumps(last)})
        pipe.hset(keys.counts, mapping={"succeeded": runs - runs // 50, "failed": runs // 50})
    pipe.execute()


def timed(env: dict, args: list[str], rounds: int) -> tuple[float, int]:
    samples, count = [], 0
    for _ in range(rounds):
        started = time.perf_counter()
        result = subprocess.run([LOCKRUN, *args], env=env, capture_output=True, text=True, check=True)
        samples.append(time.perf_counter() - started)
        count = len(json.loads(result.stdout))
    return statistics.median(samples), count


def main(argv: list[str]) -> dict:
    names = int(argv[argv.index("--names") + 1]) if "--names" in argv else 1000
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 1000
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 5
    cases = {
        "history --fleet --limit 50": ["history", "--fleet", "--limit", "50", "--json"],
        "history --fleet NAME --limit 50": ["history", "--fleet", "job-0500", "--limit", "50", "--json"],
        "history --fleet --host app-7 --limit 50": ["history", "--fleet", "--host", "app-7", "--limit", "50",
                                                    "--json"],
        "history --fleet --status failed --limit 50": ["history", "--fleet", "--status", "failed", "--limit",
                                                       "50", "--json"],
    }
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        filled = time.perf_counter()
        fill(server, names, runs)
        filled = time.perf_counter() - filled
        memory = server.client().info("memory")["used_memory"] / 2**20
        env = bench_env(Path(tmp), server.url)
        results = {name: timed(env, args, rounds) for name, args in cases.items()}
        version = server.version()
    rows = [[name, f"{median:.3f}", count, "<= 1.5" if name == "history --fleet --limit 50" else ""]
            for name, (median, count) in results.items()]
    print(table(["command", "median s", "rows", "target"], rows))
    headline, listed = results["history --fleet --limit 50"]
    met = headline <= 1.5 and listed == 50
    print(f"\n{names} names x {runs} runs ({2 * names * runs:,} events, {memory:.0f} MiB in Redis, "
          f"filled in {filled:.0f}s): history --fleet --limit 50 {headline:.3f}s: {'met' if met else 'MISSED'}")
    data = {"machine": {**machine(), "redis_server": version}, "names": names, "runs": runs,
            "redis_mib": memory, "cases": {name: {"median_s": m, "rows": c} for name, (m, c) in results.items()}}
    write_json(argv, data)
    return data


if __name__ == "__main__":
    main(sys.argv[1:])
