"""Fill a ledger with N synthetic finished runs (fast: one transaction, executemany).

    python bench/seed_ledger.py /tmp/big.db 1000000
"""

from __future__ import annotations

import json
import random
import sys
import uuid
from datetime import datetime, timedelta, timezone

from lockrun.ledger.store import Ledger

STATUSES = ["succeeded"] * 90 + ["failed"] * 6 + ["busy"] * 3 + ["timeout"]


def seed(path: str, count: int, names: int = 200, seed_value: int = 7) -> None:
    rng = random.Random(seed_value)
    ledger = Ledger(path).open()
    db = ledger._db  # bulk load: bypass the one-row-per-statement write path
    start = datetime.now(timezone.utc) - timedelta(days=365)
    step = timedelta(days=365) / count
    db.execute("BEGIN")
    batch = []
    for i in range(count):
        started = start + step * i
        status = rng.choice(STATUSES)
        stamp = started.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        ended = (started + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        batch.append((
            uuid.UUID(int=rng.getrandbits(128)).hex, f"job-{i % names}", status,
            0 if status == "succeeded" else 1, "bench-host", 1000 + i % 30000, json.dumps(["/opt/job", str(i % names)]),
            "redis", stamp, ended, 2.0, i + 1,
        ))
        if len(batch) == 50000:
            db.executemany(
                "INSERT INTO runs (run_id, name, status, exit_code, host, pid, command, backend, started_at,"
                " ended_at, duration_s, fencing_token) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", batch)
            batch.clear()
    if batch:
        db.executemany(
            "INSERT INTO runs (run_id, name, status, exit_code, host, pid, command, backend, started_at,"
            " ended_at, duration_s, fencing_token) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", batch)
    db.execute("COMMIT")
    db.execute("ANALYZE")
    ledger.close()


if __name__ == "__main__":
    seed(sys.argv[1], int(sys.argv[2]))
