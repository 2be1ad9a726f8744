"""`lockrun timeline` over a busy week: 100 names, each run about once a minute (10,000 runs each).

    python bench/timeline_scale.py [--names 100] [--runs 10000] [--rounds 7] [--json out.json]

The ledger looks like a real one: rows in time order, durations of 1-30 s, a few per cent
failed, timed out or skipped as busy (during the previous run), and one name run with
--slots 2 so that its runs overlap. Measured, interleaved with `lockrun --version`:
`lockrun timeline --since 7d --width 120` into a pipe (plain text; the target: within 1 s), and
`--svg` once for its size and time (no target: an SVG is drawn once, to be attached somewhere).
Also printed: the CPU time of each chart (user + system, as the kernel counts it: on a machine
shared with other work it says what wall time cannot) and the load average before and after.
"""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from common import LOCKRUN, bench_env, interleaved, machine, median_ms, table, write_json

from lockrun.ledger.store import Ledger

ISO = "%Y-%m-%dT%H:%M:%S.%fZ"
OUTCOMES = ["succeeded"] * 93 + ["failed"] * 4 + ["timeout"] + ["busy"] * 2


def seed(path: Path, names: int, runs: int, end: datetime, seed_value: int = 15) -> int:
    """``runs`` runs of each of ``names`` names over the week before ``end``; returns rows written."""
    rng = random.Random(seed_value)
    start = end - timedelta(days=7)
    period = timedelta(days=7).total_seconds() / runs
    rows = []
    for n in range(names):
        name = f"job-{n:03d}"
        offset = rng.uniform(0, period)
        slots = n == names - 1  # one name runs with --slots 2: every other run overlaps the one before
        for i in range(runs):
            begin = start + timedelta(seconds=offset + i * period + rng.uniform(0, 2))
            status = rng.choice(OUTCOMES)
            duration = 0.0 if status == "busy" else (rng.uniform(0.5, 1.8) * period if slots else rng.uniform(1, 30))
            if status == "busy":
                begin += timedelta(seconds=0.5)  # while the previous run still held the lock
            ended = begin + timedelta(seconds=duration)
            rows.append((begin.strftime(ISO), uuid.UUID(int=rng.getrandbits(128)).hex, name, status,
                         {"succeeded": 0, "failed": 1}.get(status), "bench-host", 1000 + i % 30000,
                         json.dumps(["/opt/job", name]), "redis", ended.strftime(ISO), duration, i + 1))
    rows.sort()  # a ledger is written in time order
    ledger = Ledger(path).open()
    db = ledger._db  # bulk load: bypass the one-row-per-statement write path
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO runs (started_at, run_id, name, status, exit_code, host, pid, command, backend, ended_at,"
        " duration_s, fencing_token) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    db.execute("COMMIT")
    db.execute("ANALYZE")
    ledger.close()
    return len(rows)


def cpu_seconds(argv: list[str], env: dict) -> float:
    """The CPU time (user + system) of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str]) -> dict:
    names = int(argv[argv.index("--names") + 1]) if "--names" in argv else 100
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 10_000
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 7
    end = datetime.now(timezone.utc).replace(microsecond=0)
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        env = bench_env(state)
        env.pop("FORCE_COLOR", None)
        started = time.monotonic()
        rows = seed(state / "ledger.db", names, runs, end)
        print(f"seeded {rows} rows in {time.monotonic() - started:.1f}s")
        window = ["--since", "7d", "--until", end.strftime(ISO)]
        chart = [LOCKRUN, "timeline", *window, "--width", "120"]
        text = subprocess.run(chart, env=env, capture_output=True, text=True, check=True).stdout
        load_before = os.getloadavg()
        times = interleaved({"lockrun --version": ([LOCKRUN, "--version"], env), "timeline": (chart, env)}, rounds,
                            warmup=1)
        cpu = [cpu_seconds(chart, env) for _ in range(rounds)]
        load_after = os.getloadavg()
        svg_path = Path(tmp) / "week.svg"
        svg_started = time.perf_counter()
        subprocess.run([LOCKRUN, "timeline", *window, "--svg", str(svg_path)], env=env, check=True)
        svg_s = time.perf_counter() - svg_started
        svg_bytes = svg_path.stat().st_size
    lanes = sum(1 for line in text.splitlines() if line.startswith("job-"))
    overlap_rows = sum(1 for line in text.splitlines() if line.startswith("  overlap"))
    result = {
        "machine": machine(), "names": names, "runs_per_name": runs, "rows": rows, "rounds": rounds,
        "median_s": statistics.median(times["timeline"]),
        "median_ms": {name: median_ms(t) for name, t in times.items()},
        "lanes_drawn": lanes, "overlap_rows": overlap_rows, "svg_s": svg_s, "svg_bytes": svg_bytes,
        "cpu_median_s": statistics.median(cpu), "loadavg": [load_before, load_after],
    }
    print(table(["command", "median ms"], [[n, f"{v:.0f}"] for n, v in result["median_ms"].items()]))
    print(f"{lanes} lanes drawn ({overlap_rows} overlap rows); --svg: {svg_s:.2f} s, {svg_bytes / 1024:.0f} KiB")
    print(f"timeline CPU (user + system), median: {result['cpu_median_s'] * 1000:.0f} ms; load average "
          f"{' '.join(f'{x:.2f}' for x in load_before)} before, {' '.join(f'{x:.2f}' for x in load_after)} after")
    write_json(argv, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
