"""The ledger: every outcome recorded, many writers at once, best effort when broken."""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
from datetime import datetime, timedelta, timezone

import pytest

from lockrun.ledger.file import FINISHED_RUN, MIGRATIONS, NOTABLE, SCHEMA_VERSION
from lockrun.ledger.store import Ledger, RunRecord
from tests.conftest import history, run_lockrun, spawn_lockrun, wait_until

PY = sys.executable
HISTORY_FIELDS = {
    "run_id", "name", "status", "exit_code", "signal", "host", "pid", "command", "backend", "started_at",
    "ended_at", "duration_s", "fencing_token", "once_key", "error", "note", "exit_status", "waited_s",
    "lock_lost_at_release", "attempt", "first_run_id",
}


def test_a_run_is_recorded_with_every_field(env, redis_server, tmp_path):
    result = run_lockrun(env, "-n", "rec", "--", "sh", "-c", "exit 3")
    assert result.returncode == 3
    (row,) = history(env, "rec")
    assert set(row) == HISTORY_FIELDS
    assert row["status"] == "failed" and row["exit_code"] == 3 and row["signal"] is None
    assert row["command"] == ["sh", "-c", "exit 3"] and row["backend"] == "redis"
    assert row["fencing_token"] == int(redis_server.client().get("lockrun:{rec}:fence"))
    assert row["ended_at"] >= row["started_at"]
    assert isinstance(row["duration_s"], float) and row["duration_s"] >= 0


def test_ledger_is_wal_and_versioned(env, tmp_path):
    run_lockrun(env, "-n", "v", "--", "true")
    db = sqlite3.connect(tmp_path / "state" / "ledger.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    indexes = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"runs_name_started", "runs_status"} <= indexes
    db.close()


def test_row_is_running_while_the_command_runs(env, tmp_path):
    flag = tmp_path / "started"
    proc = spawn_lockrun(env, "-n", "live", "--", "sh", "-c", f"touch {flag}; sleep 30")
    try:
        wait_until(flag.exists, what="the command")
        (row,) = history(env, "live")
        assert row["status"] == "running" and row["ended_at"] is None and row["pid"] == proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_sigkilled_lockrun_leaves_an_abandoned_row(env, redis_server, tmp_path):
    flag = tmp_path / "started"
    proc = spawn_lockrun(env, "-n", "crash", "--", "sh", "-c", f"touch {flag}; sleep 30")
    wait_until(flag.exists, what="the command")
    # The fencing token is on the row while the command runs, so a crash cannot lose it.
    token = int(redis_server.client().get("lockrun:{crash}:fence"))
    wait_until(lambda: history(env, "crash")[0]["fencing_token"] == token, what="the fencing token in the ledger")
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    (row,) = history(env, "crash")
    assert row["status"] == "abandoned"
    assert row["fencing_token"] == token
    assert history(env, "--status", "abandoned")[0]["run_id"] == row["run_id"]
    assert history(env, "--status", "running") == []
    # The run that died is the name's last run, and metrics count it, on every reader.
    redis_server.client().delete("lockrun:{crash}:last")  # what this host's ledger says, not the fleet's
    last = json.loads(run_lockrun(env, "status", "crash", "--json").stdout)["locks"][0]["last_run"]
    assert (last["run_id"], last["status"]) == (row["run_id"], "abandoned")
    exposition = run_lockrun(env, "metrics").stdout
    assert 'lockrun_runs_total{name="crash",status="abandoned"} 1' in exposition
    assert "lockrun_last_run_timestamp_seconds{name=\"crash\"}" in exposition
    textfile = tmp_path / "lockrun.prom"
    assert run_lockrun(env, "-n", "crash", "-E", "0", "--metrics-file", str(textfile), "--", "true").returncode == 0
    assert 'lockrun_runs_total{name="crash",status="abandoned"} 1' in textfile.read_text()


def test_unwritable_ledger_warns_once_and_the_command_still_runs(env, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    env["LOCKRUN_LEDGER"] = str(blocker / "ledger.db")
    result = run_lockrun(env, "-n", "noledger", "--", "sh", "-c", "echo ran; exit 4")
    assert result.returncode == 4 and result.stdout == "ran\n"
    assert result.stderr.count("\n") == 1 and "ledger" in result.stderr and "runs regardless" in result.stderr
    quiet = run_lockrun(env, "-q", "-n", "noledger", "--", "true")
    assert (quiet.returncode, quiet.stderr) == (0, "")


def test_corrupt_ledger_warns_and_the_command_still_runs(env, tmp_path):
    ledger = tmp_path / "corrupt.db"
    ledger.write_bytes(b"this is not a database" * 100)
    env["LOCKRUN_LEDGER"] = str(ledger)
    result = run_lockrun(env, "-n", "corrupt", "--", "echo", "ran")
    assert result.returncode == 0 and result.stdout == "ran\n" and "ledger" in result.stderr


def test_forty_concurrent_runs_are_all_recorded(env, tmp_path):
    # A fresh ledger: the forty also race to create it.
    procs = [spawn_lockrun(env, "-n", f"many-{i}", "--", "sleep", "0.2") for i in range(40)]
    assert [p.wait(120) for p in procs] == [0] * 40
    rows = history(env)
    assert len(rows) == 40
    assert {r["name"] for r in rows} == {f"many-{i}" for i in range(40)}
    assert {r["status"] for r in rows} == {"succeeded"}


def test_busy_and_unavailable_outcomes_are_recorded(env, tmp_path, redis_server):
    redis_server.client().set("lockrun:{b}:lock", "other", px=30000)
    assert run_lockrun(env, "-n", "b", "--", "true").returncode == 75
    redis_server.kill()
    assert run_lockrun(env, "-n", "b", "--", "true").returncode == 69
    statuses = [r["status"] for r in history(env, "b")]
    assert statuses == ["unavailable", "busy"]


def _insert(ledger: Ledger, run_id: str, name: str, status: str, started: datetime) -> None:
    stamp = started.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    ledger.start(RunRecord(run_id=run_id, name=name, command=["x"], backend="redis", started_at=stamp))
    ledger.finish(run_id, status=status, ended_at=stamp, duration_s=1.0, exit_code=0 if status == "succeeded" else 1)


def test_history_filters(env, tmp_path):
    ledger = Ledger(tmp_path / "state" / "ledger.db").open()
    now = datetime.now(timezone.utc)
    for i in range(30):
        _insert(ledger, f"r{i:02d}", "a" if i % 2 else "b", "succeeded" if i % 3 else "failed",
                now - timedelta(hours=30 - i - 0.5))
    ledger.close()
    assert len(history(env)) == 30
    default = json.loads(run_lockrun(env, "history", "--json").stdout)
    assert [r["run_id"] for r in default] == [f"r{i:02d}" for i in range(29, 9, -1)]  # 20, newest first
    assert [r["run_id"] for r in history(env, "--limit", "3")] == ["r29", "r28", "r27"]
    assert {r["name"] for r in history(env, "a")} == {"a"} and len(history(env, "a")) == 15
    assert {r["status"] for r in history(env, "--status", "failed")} == {"failed"}
    assert len(history(env, "--status", "failed")) == 10
    recent = history(env, "--since", "12h")
    assert len(recent) == 12 and all(r["run_id"] >= "r18" for r in recent)
    assert len(history(env, "b", "--since", "1d", "--status", "failed")) == 4


def test_history_without_a_ledger_is_empty(env):
    result = run_lockrun(env, "history", "--json")
    assert (result.returncode, json.loads(result.stdout)) == (0, [])
    human = run_lockrun(env, "history")
    assert human.returncode == 0 and "no runs" in human.stdout


def test_a_version_1_ledger_is_migrated_in_place(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    for statement in MIGRATIONS[1]:
        db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    for i, status in enumerate(["succeeded", "succeeded", "failed", "running"]):
        db.execute("INSERT INTO runs (run_id, name, status, host, pid, command, backend, started_at)"
                   " VALUES (?, 'old', ?, 'h', 1, '[]', 'redis', '2026-01-01T00:00:00.000000Z')", (f"r{i}", status))
    db.commit()
    db.close()
    ledger = Ledger(path).open()
    assert ledger.run_counts() == [("old", "failed", 1), ("old", "succeeded", 2)]
    assert len(ledger.history("old")) == 4
    ledger.close()


def test_a_version_3_ledger_gains_exit_status_and_waited_s_as_null(tmp_path, env):
    path = tmp_path / "v3.db"
    db = sqlite3.connect(path)
    for version in (1, 2, 3):
        for statement in MIGRATIONS[version]:
            db.execute(statement)
    db.execute("PRAGMA user_version = 3")
    db.execute("INSERT INTO runs (run_id, name, status, exit_code, signal, host, pid, command, backend, started_at,"
               " ended_at, duration_s) VALUES ('old', 'v', 'timeout', NULL, 15, 'h', 1, '[\"x\"]', 'redis',"
               " '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:09.000000Z', 9.0)")
    db.commit()
    db.close()
    env["LOCKRUN_LEDGER"] = str(path)
    assert run_lockrun(env, "-n", "v", "--", "sh", "-c", "exit 4").returncode == 4
    new, old = history(env, "v")
    assert (old["run_id"], old["exit_status"], old["waited_s"], old["signal"]) == ("old", None, None, 15)
    assert (new["exit_status"], new["exit_code"]) == (4, 4) and new["waited_s"] is not None
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    table = run_lockrun(env, "history", "v").stdout.splitlines()
    assert table[1].split()[4] == "4" and table[2].split()[4] == "sig"  # an old row shows what it knew


def test_a_version_5_ledger_gains_the_timelines_indexes(tmp_path):
    """Migration 6 adds two partial indexes (a running row is in neither) and nothing else."""
    path = tmp_path / "v5.db"
    db = sqlite3.connect(path)
    for version in range(1, 6):
        for statement in MIGRATIONS[version]:
            db.execute(statement)
    db.execute("PRAGMA user_version = 5")
    for i, (status, ended) in enumerate([("succeeded", "2026-01-01T00:01:00.000000Z"), ("busy", None),
                                         ("failed", "2026-01-01T00:03:00.000000Z"), ("running", None)]):
        db.execute("INSERT INTO runs (run_id, name, status, host, pid, command, backend, started_at, ended_at,"
                   " duration_s) VALUES (?, 'n', ?, 'h', 1, '[]', 'redis', '2026-01-01T00:00:00.000000Z', ?, 1.0)",
                   (f"r{i}", status, ended))
    db.commit()
    db.close()
    Ledger(path).open().close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    entries = {name: db.execute(f"SELECT count(*) FROM runs INDEXED BY {name} WHERE name = 'n' AND {where}")
               .fetchone()[0] for name, where in (("runs_notable", NOTABLE), ("runs_durations", FINISHED_RUN))}
    assert entries == {"runs_notable": 2, "runs_durations": 2}  # busy and failed; succeeded and failed


@pytest.mark.parametrize("column,value", [
    ("exit_status", "abc"), ("exit_status", 1.5), ("waited_s", "x"), ("waited_s", float("inf")),
    ("duration_s", "zz"), ("exit_code", b"\x00\xff"), ("signal", "9"), ("status", b"\xffA"),
    ("command", "5"), ("command", '{"a": [1]}'), ("command", b"\xff"), ("started_at", 12),
    ("fencing_token", "big"), ("note", b"\x1b[31m"),
])
def test_a_malformed_row_is_shown_as_well_as_it_can_be(env, column, value):
    assert run_lockrun(env, "-n", "m", "--", "true").returncode == 0
    db = sqlite3.connect(env["LOCKRUN_STATE_DIR"] + "/ledger.db")
    db.execute(f"UPDATE runs SET {column} = ?", (value,))
    db.commit()
    db.close()
    (row,) = history(env, "m")
    run_id = row["run_id"]
    for args in (["history"], ["status", "m"], ["status", "m", "--json"], ["show", run_id], ["show", run_id, "--json"],
                 ["metrics"]):
        result = run_lockrun(env, *args)
        assert result.returncode == 0 and result.stderr == "", (args, result.stderr)
    assert all(isinstance(row[key], int) or row[key] is None for key in ("exit_code", "signal", "exit_status"))
    assert all(isinstance(row[key], float) or row[key] is None for key in ("duration_s", "waited_s"))
    assert all(isinstance(word, str) for word in row["command"])
