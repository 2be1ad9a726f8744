"""Ledger at scale: reads on a million-row ledger, and fifty runs recording at once.

    python bench/ledger_scale.py [--rows 1000000] [--rounds 15] [--json out.json]

- `history --limit 50 --json` and `status --json` (three held locks whose names
  have runs in the ledger) against `lockrun --version`, interleaved: the ledger
  must cost nothing a user can notice. Target: <= 1.2 x `lockrun --version`.
  status is measured on the local backend, which imports nothing more than
  --version; with Redis, status also pays for importing redis-py (shown apart).
- 50 concurrent `lockrun -- true` runs on the same big ledger: every row
  recorded, no "database is locked". Target: 0 lost, 0 locked.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import LOCKRUN, RedisServer, bench_env, interleaved, machine, median_ms, table, write_json
from seed_ledger import seed

from lockrun.ledger.store import Ledger


def main(argv: list[str]) -> dict:
    rows_wanted = int(argv[argv.index("--rows") + 1]) if "--rows" in argv else 1_000_000
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 15
    with tempfile.TemporaryDirectory() as tmp, RedisServer() as server:
        state = Path(tmp) / "state"
        env = bench_env(state)
        ledger = state / "ledger.db"
        started = time.monotonic()
        seed(str(ledger), rows_wanted)
        print(f"seeded {rows_wanted} rows in {time.monotonic() - started:.1f}s")
        holders = [subprocess.Popen([LOCKRUN, "-n", f"job-{i}", "--", "sleep", "600"], env=env) for i in (1, 2, 3)]
        redis_env = {**bench_env(state, server.url)}
        redis_holders = [subprocess.Popen([LOCKRUN, "-n", f"job-{i}", "--", "sleep", "600"], env=redis_env)
                         for i in (4, 5, 6)]
        time.sleep(2)  # let the holders take their locks (not part of any measurement)
        try:
            cases = {
                "lockrun --version": ([LOCKRUN, "--version"], env),
                "history --limit 50 --json": ([LOCKRUN, "history", "--limit", "50", "--json"], env),
                "history job-7 --limit 50 --json": ([LOCKRUN, "history", "job-7", "--limit", "50", "--json"], env),
                "history --status failed --limit 50 --json": (
                    [LOCKRUN, "history", "--status", "failed", "--limit", "50", "--json"], env),
                "history --status failed,timeout --limit 50 --json": (
                    [LOCKRUN, "history", "--status", "failed,timeout", "--limit", "50", "--json"], env),
                "history --status failures --limit 50 --json": (
                    [LOCKRUN, "history", "--status", "failures", "--limit", "50", "--json"], env),
                "status --json (local, 3 held)": ([LOCKRUN, "status", "--json"], env),
                "status --json (redis, 3 held)": ([LOCKRUN, "status", "--json"], redis_env),
            }
            times = interleaved(cases, rounds)
        finally:
            for proc in holders + redis_holders:
                proc.terminate()
                proc.wait(60)
        base = times["lockrun --version"]
        ratio = {name: statistics.median(a / b for a, b in zip(t, base, strict=True)) for name, t in times.items()}

        before = Ledger(ledger).open()
        count_before = before._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        before.close()
        procs = [subprocess.Popen([LOCKRUN, "-n", f"burst-{i}", "--", "true"], env=env, stderr=subprocess.PIPE,
                                  text=True) for i in range(50)]
        errors = [p.communicate(timeout=300)[1] for p in procs]
        codes = [p.returncode for p in procs]
        after = Ledger(ledger).open()
        burst_rows = after._db.execute(
            "SELECT COUNT(*) FROM runs WHERE name LIKE 'burst-%' AND status = 'succeeded'").fetchone()[0]
        count_after = after._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        after.close()
    locked = sum("locked" in e for e in errors)
    rows = [[name, f"{median_ms(t):.1f}", f"{ratio[name]:.2f}"] for name, t in times.items()]
    print(table(["command", "median ms", "x --version"], rows))
    print()
    print(table(["50 concurrent runs", "value", "target"], [
        ["exit codes all 0", codes == [0] * 50, "True"],
        ["rows recorded", burst_rows, 50],
        ["rows added to the ledger", count_after - count_before, 50],
        ['"database is locked" messages', locked, 0],
    ]))
    result = {"machine": machine(), "rows": rows_wanted, "rounds": rounds,
              "median_ms": {n: median_ms(t) for n, t in times.items()}, "ratio_to_version": ratio,
              "burst": {"codes_ok": codes == [0] * 50, "recorded": burst_rows, "locked_messages": locked}}
    write_json(argv, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
