"""`history --fleet` over a big fleet record: 1,000 names with 1,000 runs each in Redis.

    python bench/fleet_scale.py [--names 1000] [--runs 1000] [--rounds 5] [--json out.json]

The record is written straight into Redis in lockrun's layout (one compact entry per run in
each name's stream, its `vals`, a `last` and a `counts` hash per name, the registry of names),
as if 40 hosts had run every name every ten minutes for a week. Target: `history --fleet --limit 50`
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
from lockrun.backends.redis.keys import registry_key
from lockrun.backends.redis.record_format import event_pairs

STEP_MS = 600_000  # each name runs every ten minutes


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}000Z"


def fill(server: RedisServer, names: int, runs: int) -> None:
    """The compact layout (backends/redis/record_format.py), as the release script writes it: one
    entry per run, host and command as numbers into the name's ``vals``, and the registry."""
    client = server.client()
    start = int(time.time() * 1000) - runs * STEP_MS
    pipe = client.pipeline(transaction=False)
    queued = 0
    for n in range(names):
        keys = lock_keys("lockrun:", f"job-{n:04d}")
        vals: dict[str, str] = {}
        for r in range(runs):
            at = start + r * STEP_MS + n * 500  # the names interleave in time
            run_id = f"{n:04d}{r:028x}"
            host = f"app-{(n + r) % 40}"
            status, code = ("failed", 1) if r % 50 == 7 else ("succeeded", 0)
            row = {"run_id": run_id, "host": host, "pid": 1000 + r, "command": ["/opt/job", str(n)],
                   "fencing_token": r + 1, "status": status, "exit_code": code, "started_at": iso(at),
                   "ended_at": iso(at + 30_000), "duration_s": 30.0, "exit_status": code}
            flat = event_pairs(row)
            fields = dict(zip(flat[0::2], flat[1::2], strict=True))
            for kind in ("h", "c"):
                fields[kind] = vals.setdefault(kind + fields[kind], str(len(vals) + 1))
            fields["k"] = "30000"
            pipe.xadd(keys.runs, fields, id=f"{at + 30_000}-0")
            queued += 1
            if queued >= 5000:
                pipe.execute()
                queued = 0
        pipe.hset(keys.vals, mapping=vals)
        last = row
        pipe.hset(keys.last, mapping={"run_id": last["run_id"], "row": json.dumps(last)})
        pipe.hset(keys.counts, mapping={"succeeded": runs - runs // 50, "failed": runs // 50})
        pipe.zadd(registry_key("lockrun:"), {f"job-{n:04d}": start + runs * STEP_MS})
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
    print(f"\n{names} names x {runs} runs ({names * runs:,} entries, {memory:.0f} MiB in Redis, "
          f"filled in {filled:.0f}s): history --fleet --limit 50 {headline:.3f}s: {'met' if met else 'MISSED'}")
    data = {"machine": {**machine(), "redis_server": version}, "names": names, "runs": runs,
            "redis_mib": memory, "cases": {name: {"median_s": m, "rows": c} for name, (m, c) in results.items()}}
    write_json(argv, data)
    return data


if __name__ == "__main__":
    main(sys.argv[1:])
