"""A run that lost its lock says so (README "A run that lost its lock says so"): a release that finds
the lock no longer the run's marks the ledger row, the fleet record and the metrics, and prints one
line, so that every run that may have overlapped another can be found."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import history, run_lockrun, spawn_lockrun, wait_until

LINE = "was no longer this run's when it released it"


def hold_and_steal(env, tmp_path, steal, *args: str, seconds: float = 1.5):
    """Run a command under ``args`` and call ``steal()`` while it runs; the lockrun's result."""
    started = tmp_path / f"started-{len(list(tmp_path.glob('started-*')))}"
    proc = spawn_lockrun(env, *args, "--", "sh", "-c", f"touch {started}; sleep {seconds}",
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_until(started.exists, what="the command to start")
    steal()
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def metric(env, name: str, *args: str) -> str:
    result = run_lockrun(env, "metrics", *args)
    assert result.returncode == 0, result.stderr
    return next(line for line in result.stdout.splitlines()
                if line.startswith(f'lockrun_lock_lost_at_release_total{{name="{name}"}}'))


def test_a_lock_deleted_mid_run_is_marked_everywhere(env, redis_server, tmp_path):
    client = redis_server.client()
    assert run_lockrun(env, "-n", "ev", "--", "true").returncode == 0  # an ordinary run first
    code, out, err = hold_and_steal(env, tmp_path, lambda: client.delete("lockrun:{ev}:lock"), "-n", "ev",
                                    "--ttl", "60")
    assert code == 0 and out == ""
    assert err.count("\n") == 1 and LINE in err and err.startswith("lockrun: lock 'ev'"), err
    lost, fine = history(env, "ev")
    assert lost["lock_lost_at_release"] is True and fine["lock_lost_at_release"] is False
    assert lost["status"] == "succeeded" and "another run may have overlapped it" in lost["note"]
    # How the operator finds them (README): history --json | jq '.[] | select(.lock_lost_at_release)'
    assert [row["run_id"] for row in history(env) if row["lock_lost_at_release"]] == [lost["run_id"]]
    shown = json.loads(run_lockrun(env, "show", lost["run_id"], "--json").stdout)
    assert shown["lock_lost_at_release"] is True
    assert "lock_lost_at_release" in run_lockrun(env, "show", lost["run_id"]).stdout
    assert metric(env, "ev").endswith(" 1") and metric(env, "ev", "--fleet").endswith(" 1")
    # The fleet record: the end event, the last run and the count, with the exact fencing token.
    (fleet_row, _) = (json.loads(run_lockrun(env, "history", "--fleet", "ev", "--json").stdout))
    assert fleet_row["run_id"] == lost["run_id"] and fleet_row["lock_lost_at_release"] is True
    assert fleet_row["note"] == lost["note"] and fleet_row["fencing_token"] == lost["fencing_token"]
    last = json.loads(client.hget("lockrun:{ev}:last", "row"))
    assert last["lock_lost_at_release"] is True and last["fencing_token"] == lost["fencing_token"]
    assert client.hget("lockrun:{ev}:counts", "flag:lock_lost_at_release") == b"1"
    ends = [fields for _, fields in client.xrange("lockrun:{ev}:runs")]  # one entry per finished run
    assert [e[b"l"] for e in ends] == [b"0", b"1"]
    status = json.loads(run_lockrun(env, "status", "ev", "--json").stdout)
    assert status["locks"][0]["last_run"]["lock_lost_at_release"] is True
    # Statuses are not flags: lockrun_runs_total has no such status.
    assert "flag:" not in run_lockrun(env, "metrics", "--fleet").stdout


def test_an_ordinary_run_says_nothing_and_counts_zero(env):
    result = run_lockrun(env, "-n", "calm", "--", "true")
    assert (result.returncode, result.stderr) == (0, "")
    (row,) = history(env, "calm")
    assert row["lock_lost_at_release"] is False and row["note"] is None
    assert metric(env, "calm").endswith(" 0") and metric(env, "calm", "--fleet").endswith(" 0")


def test_a_skip_has_no_release_to_judge(env, tmp_path):
    started = tmp_path / "started"
    holder = spawn_lockrun(env, "-n", "skip", "--", "sh", "-c", f"touch {started}; sleep 2")
    wait_until(started.exists, what="the holder")
    assert run_lockrun(env, "-n", "skip", "--", "true").returncode == 75
    assert holder.wait(timeout=30) == 0
    busy = next(row for row in history(env, "skip") if row["status"] == "busy")
    assert busy["lock_lost_at_release"] is None


def test_a_lease_already_reported_lost_is_not_said_twice(env, redis_server, tmp_path):
    client = redis_server.client()
    # --on-lost continue: the keeper finds the lease gone and says so; the release finds it too.
    code, _, err = hold_and_steal(env, tmp_path, lambda: client.delete("lockrun:{cont}:lock"), "-n", "cont",
                                  "--ttl", "1", "--on-lost", "continue", seconds=2.0)
    assert code == 0 and err.count("\n") == 1 and "--on-lost continue" in err and LINE not in err, err
    (row,) = history(env, "cont")
    assert row["lock_lost_at_release"] is True and row["note"].startswith("lease lost at ")
    assert "overlapped" not in row["note"]
    code, _, err = hold_and_steal(env, tmp_path, lambda: client.delete("lockrun:{term}:lock"), "-n", "term",
                                  "--ttl", "1", seconds=5.0)
    assert code == 76 and LINE not in err
    assert history(env, "term")[0]["lock_lost_at_release"] is True
    assert metric(env, "cont").endswith(" 1") and metric(env, "term").endswith(" 1")


def test_a_slot_removed_mid_run_is_marked(env, redis_server, tmp_path):
    client = redis_server.client()

    def steal():
        (token,) = client.zrange("lockrun:{sl}:slots", 0, -1)
        client.zrem("lockrun:{sl}:slots", token)

    code, _, err = hold_and_steal(env, tmp_path, steal, "-n", "sl", "--slots", "3", "--ttl", "60")
    assert code == 0 and LINE in err
    assert history(env, "sl")[0]["lock_lost_at_release"] is True


def test_the_local_backend_marks_a_lock_cleared_by_unlock_force(local_env, tmp_path):
    def clear():
        cleared = run_lockrun(local_env, "unlock", "loc", "--force", "--yes")
        assert cleared.returncode == 0, cleared.stderr

    code, _, err = hold_and_steal(local_env, tmp_path, clear, "-n", "loc", "--ttl", "600")
    assert code == 0 and err.count("\n") == 1 and LINE in err, err
    run = next(row for row in history(local_env, "loc") if row["status"] != "unlocked")
    assert run["lock_lost_at_release"] is True
    assert metric(local_env, "loc").endswith(" 1")
    unlocked = next(row for row in history(local_env, "loc") if row["status"] == "unlocked")
    assert unlocked["lock_lost_at_release"] is None  # an unlock is not a run


def test_a_quiet_run_keeps_quiet(env, redis_server, tmp_path):
    client = redis_server.client()
    code, _, err = hold_and_steal(env, tmp_path, lambda: client.delete("lockrun:{q}:lock"), "-q", "-n", "q")
    assert (code, err) == (0, "")  # -q: only errors; the row and the metrics still say it
    assert history(env, "q")[0]["lock_lost_at_release"] is True


def test_a_version_6_ledger_gains_the_field_as_null(tmp_path, env):
    """Migration 7 adds lock_lost_at_release (NULL for old rows) and the flag counts."""
    import sqlite3

    from lockrun.ledger.file import MIGRATIONS

    path = tmp_path / "v6.db"
    db = sqlite3.connect(path)
    for version in range(1, 7):
        for statement in MIGRATIONS[version]:
            db.execute(statement)
    db.execute("PRAGMA user_version = 6")
    db.execute("INSERT INTO runs (run_id, name, status, host, pid, command, backend, started_at, ended_at,"
               " duration_s) VALUES ('old', 'v', 'succeeded', 'h', 1, '[]', 'redis', '2026-01-01T00:00:00.000000Z',"
               " '2026-01-01T00:00:01.000000Z', 1.0)")
    db.commit()
    db.close()
    env["LOCKRUN_LEDGER"] = str(path)
    assert run_lockrun(env, "-n", "v", "--", "true").returncode == 0
    new, old = history(env, "v")
    assert (old["run_id"], old["lock_lost_at_release"], new["lock_lost_at_release"]) == ("old", None, False)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] >= 7
    assert metric(env, "v").endswith(" 0")
