"""Operator commands: status of zombies, unlock (safe by default), prune, the busy line, completion."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from lockrun.cli.main import cli
from lockrun.ledger.store import Ledger, RunRecord
from tests.conftest import history, in_pty, lockrun_argv, read_until, run_lockrun, spawn_lockrun, wait_until


def status_json(env, *names):
    result = run_lockrun(env, "status", "--json", *names)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["locks"]


def start_holder(env, tmp_path, name, *extra, ttl="600"):
    flag = tmp_path / f"{name}.started"
    proc = spawn_lockrun(env, "-n", name, "--ttl", ttl, *extra, "--", "sh", "-c", f"touch {flag}; exec sleep 300",
                         stderr=subprocess.PIPE)
    wait_until(flag.exists, what=f"the holder of {name}")
    return proc


def make_zombie(env, tmp_path, name):
    """A holder whose lockrun was SIGKILLed: its lock stays in Redis for the (long) TTL."""
    proc = start_holder(env, tmp_path, name)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    proc.stderr.close()
    return proc.pid


# --- zombies ----------------------------------------------------------------------------------------


def test_sigkilled_holder_is_a_zombie_and_unlock_clears_it(env, tmp_path, redis_server):
    pid = make_zombie(env, tmp_path, "z")
    (lock,) = status_json(env)
    assert (lock["name"], lock["state"], lock["pid"]) == ("z", "zombie", pid)
    assert history(env, "z")[0]["status"] == "abandoned"

    result = run_lockrun(env, "unlock", "z", "--yes")
    assert result.returncode == 0, result.stderr
    assert "zombie" in result.stdout and "cleared 'z'" in result.stdout
    assert redis_server.client().exists("lockrun:{z}:lock") == 0
    unlocked = history(env, "z", "--status", "unlocked")[0]
    assert str(pid) in unlocked["note"] and "zombie" in unlocked["note"] and unlocked["pid"] != pid
    assert status_json(env) == []
    # The next run takes the lock at once.
    assert run_lockrun(env, "-n", "z", "--", "true").returncode == 0


def test_stale_heartbeat_from_another_host_is_a_zombie(env, redis_server):
    client = redis_server.client()
    old = (datetime.now(timezone.utc) - timedelta(seconds=50)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    client.set("lockrun:{far}:lock", "tok-far", px=60000)
    client.hset("lockrun:{far}:info", mapping={
        "token": "tok-far", "host": "elsewhere", "pid": "1", "ttl_ms": "60000", "heartbeat_at": old,
        "started_at": old, "command": '["x"]',
    })
    (lock,) = status_json(env, "far")  # named: no lockrun run registered it (docs/fleet.md "Which names")
    assert lock["state"] == "zombie" and lock["heartbeat_age_s"] >= 50
    client.hset("lockrun:{far}:info", "heartbeat_at", datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    assert status_json(env, "far")[0]["state"] == "held"  # another host with a fresh heartbeat: alive


def test_reused_pid_is_still_a_zombie(env, redis_server):
    client = redis_server.client()
    from lockrun.system import host

    # Our own pid, but with another start time: the recorded process is gone, the pid was reused.
    client.set("lockrun:{reuse}:lock", "tok", px=60000)
    client.hset("lockrun:{reuse}:info", mapping={
        "token": "tok", "host": host.hostname(), "boot_id": host.boot_id(), "pid": str(os.getpid()),
        "pid_start": "1", "ttl_ms": "60000", "machine_id": host.machine_id(), "pid_ns": str(host.pid_ns() or ""),
    })
    assert status_json(env, "reuse")[0]["state"] == "zombie"


# --- unlock refuses what it should -------------------------------------------------------------------


def test_unlock_refuses_a_live_holder_and_force_stops_it(env, tmp_path, redis_server):
    proc = start_holder(env, tmp_path, "live", ttl="3")
    try:
        refused = run_lockrun(env, "unlock", "live", "--yes")
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1 and "--force" in refused.stderr
        assert redis_server.client().exists("lockrun:{live}:lock") == 1
        forced = run_lockrun(env, "unlock", "live", "--force", "--yes")
        assert forced.returncode == 0, forced.stderr
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 76 and "taken over or cleared" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "live (forced)" in history(env, "live", "--status", "unlocked")[0]["note"]
    assert history(env, "live", "--status", "lost")


def test_unlock_without_a_terminal_needs_yes(env, tmp_path, redis_server):
    make_zombie(env, tmp_path, "ask")
    result = run_lockrun(env, "unlock", "ask", stdin=subprocess.DEVNULL)
    assert result.returncode == 1 and "--yes" in result.stderr
    assert redis_server.client().exists("lockrun:{ask}:lock") == 1


def test_unlock_of_a_free_lock_and_bad_names(env):
    result = run_lockrun(env, "unlock", "never-held", "--yes")
    assert (result.returncode, result.stdout) == (0, "'never-held' is not held\n")
    assert run_lockrun(env, "unlock", "bad name").returncode == 2
    assert run_lockrun(env, "unlock").returncode == 2


def test_unlock_leaves_a_lock_taken_again_after_inspection_alone(env, tmp_path, redis_server):
    make_zombie(env, tmp_path, "race")
    client = redis_server.client()
    proc, master = in_pty(env, "unlock", "race")
    try:
        read_until(master, b"Clear it?")
        # While the operator reads the prompt, the zombie's lease is replaced by a new holder.
        client.set("lockrun:{race}:lock", "new-holder-token", px=60000)
        client.hset("lockrun:{race}:info", mapping={"token": "new-holder-token", "host": "other", "pid": "7"})
        os.write(master, b"y\n")
        output = read_until(master, b"nothing was cleared")
        assert proc.wait(30) == 1, output
    finally:
        os.close(master)
    assert client.get("lockrun:{race}:lock") == b"new-holder-token"
    assert history(env, "race", "--status", "unlocked") == []


def test_unlock_on_a_terminal_asks_and_no_means_no(env, tmp_path, redis_server):
    make_zombie(env, tmp_path, "ask2")
    proc, master = in_pty(env, "unlock", "ask2")
    try:
        read_until(master, b"Clear it?")
        os.write(master, b"n\n")
        read_until(master, b"not cleared")
        assert proc.wait(30) == 1
    finally:
        os.close(master)
    assert redis_server.client().exists("lockrun:{ask2}:lock") == 1


def test_unlock_wakes_waiters(env, tmp_path):
    make_zombie(env, tmp_path, "wake")
    done = tmp_path / "waiter-ran"
    waiter = spawn_lockrun(env, "-n", "wake", "-w", "120", "--", "touch", str(done))
    wait_until(lambda: history(env, "wake", "--status", "running"), what="the waiter to be waiting")
    assert run_lockrun(env, "unlock", "wake", "--yes").returncode == 0
    assert waiter.wait(30) == 0 and done.exists()


# --- the busy line -------------------------------------------------------------------------------------


def test_verbose_busy_line_names_holder_age_expiry_and_unlock_command(env, tmp_path):
    proc = start_holder(env, tmp_path, "held")
    try:
        result = run_lockrun(env, "-v", "-n", "held", "--", "true")
        assert result.returncode == 75
        line = result.stderr.strip()
        assert result.stderr.count("\n") == 1
        assert f":{proc.pid}" in line and "lease expires in" in line and "lockrun unlock held" in line
        assert " for " in line
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


# --- backend down -------------------------------------------------------------------------------------


def test_status_with_backend_down_prints_what_the_ledger_knows(env, tmp_path, redis_server):
    run_lockrun(env, "-n", "past", "--", "sh", "-c", "exit 5")
    proc = start_holder(env, tmp_path, "now-running")
    try:
        redis_server.pause()
        result = run_lockrun(env, "status", "--json", timeout=60)
        assert result.returncode == 69 and result.stderr.count("\n") == 1
        locks = json.loads(result.stdout)["locks"]
        assert [(lock["name"], lock["state"], lock["pid"]) for lock in locks] == [("now-running", "unknown", proc.pid)]
        named = json.loads(run_lockrun(env, "status", "--json", "past").stdout)["locks"]
        assert named[0]["last_run"]["exit_code"] == 5
        human = run_lockrun(env, "status")
        assert human.returncode == 69 and "unreachable" in human.stdout and "now-running" in human.stdout
        assert run_lockrun(env, "history", "--json").returncode == 0  # needs no backend
    finally:
        redis_server.resume()
        proc.terminate()
        proc.communicate(timeout=30)


# --- retention -----------------------------------------------------------------------------------------


def _seed(path, ages_days, status="succeeded", first=0):
    ledger = Ledger(path).open()
    for i, age in enumerate(ages_days, first):
        stamp = (datetime.now(timezone.utc) - timedelta(days=age)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        record = RunRecord(run_id=f"{status}-{i}", name="old", command=["x"], backend="redis", started_at=stamp,
                           pid=999999999)
        ledger.start(record)
        if status != "running":
            ledger.finish(record.run_id, status=status, ended_at=stamp, duration_s=1.0)
    ledger.close()


def test_prune_deletes_old_finished_runs_only(env, tmp_path):
    path = tmp_path / "state" / "ledger.db"
    _seed(path, [1, 5, 100, 200])
    _seed(path, [300], status="running")
    result = run_lockrun(env, "prune", "--older-than", "90d")
    assert result.returncode == 0 and "pruned 2 runs older than 90d" in result.stdout
    ids = {row["run_id"] for row in history(env)}
    assert ids == {"succeeded-0", "succeeded-1", "running-0"}
    assert run_lockrun(env, "prune").returncode == 2
    assert run_lockrun(env, "prune", "--older-than", "soon").returncode == 2


def test_ledger_keep_days_prunes_at_most_hourly(env, tmp_path):
    path = tmp_path / "state" / "ledger.db"
    _seed(path, [1, 40])
    config = tmp_path / "keep.toml"
    config.write_text("ledger_keep_days = 30\n")
    env["LOCKRUN_CONFIG"] = str(config)
    assert run_lockrun(env, "-n", "k", "--", "true").returncode == 0
    assert {r["run_id"] for r in history(env, "old")} == {"succeeded-0"}
    _seed(path, [50], first=2)  # a new old row: the next prune is an hour away
    assert run_lockrun(env, "-n", "k", "--", "true").returncode == 0
    assert {r["run_id"] for r in history(env, "old")} == {"succeeded-0", "succeeded-2"}
    db = sqlite3.connect(path)
    last = db.execute("SELECT value FROM meta WHERE key = 'last_prune'").fetchone()[0]
    db.close()
    assert last.endswith("Z")


# --- shell completion of lock names -------------------------------------------------------------------


def test_lock_names_complete_from_the_backend(env, tmp_path, redis_server):
    proc = start_holder(env, tmp_path, "alpha-job")
    try:
        complete_env = dict(env, _LOCKRUN_COMPLETE="bash_complete", COMP_WORDS="lockrun unlock al", COMP_CWORD="2")
        result = subprocess.run(lockrun_argv(), env=complete_env, capture_output=True, text=True, timeout=30)
        assert "alpha-job" in result.stdout
        redis_server.pause()
        complete_env["COMP_WORDS"] = "lockrun status al"
        down = subprocess.run(lockrun_argv(), env=complete_env, capture_output=True, text=True, timeout=30)
        assert (down.returncode, down.stdout.strip(), down.stderr) == (0, "", "")
    finally:
        redis_server.resume()
        proc.terminate()
        proc.communicate(timeout=30)


# --- tables through CliRunner ----------------------------------------------------------------------------


@pytest.fixture
def runner_env(env):
    return {k: v for k, v in env.items() if k.startswith("LOCKRUN_") or k == "HOME"}


def test_history_table_columns(env, runner_env):
    run_lockrun(env, "-n", "tbl", "--", "sh", "-c", "exit 3")
    result = CliRunner().invoke(cli, ["history"], env=runner_env)
    assert result.exit_code == 0
    header, row = result.output.splitlines()[:2]
    assert header.split() == ["WHEN", "NAME", "STATUS", "EXIT", "DURATION", "HOST", "RUN", "ID", "COMMAND"]
    assert "tbl" in row and "failed" in row and " 3 " in row and "sh -c 'exit 3'" in row
    assert "\x1b[" not in result.output


def test_status_table_and_colours(env, runner_env, tmp_path):
    proc = start_holder(env, tmp_path, "shown")
    try:
        plain = CliRunner().invoke(cli, ["status"], env=runner_env)
        assert plain.exit_code == 0 and "\x1b[" not in plain.output
        lines = plain.output.splitlines()
        assert lines[0].startswith("backend: redis unix://")
        assert lines[1].split()[:4] == ["NAME", "STATE", "HOLDER", "AGE"]
        assert "shown" in lines[2] and "held" in lines[2] and f":{proc.pid}" in lines[2]
        coloured = CliRunner().invoke(cli, ["status"], env={**runner_env, "FORCE_COLOR": "1"})
        assert "\x1b[32m" in coloured.output  # green "held"
        no_color = CliRunner().invoke(cli, ["status"], env={**runner_env, "FORCE_COLOR": "1", "NO_COLOR": "1"})
        assert "\x1b[32m" not in no_color.output and "shown" in no_color.output
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_status_table_when_nothing_is_held(runner_env):
    result = CliRunner().invoke(cli, ["status"], env=runner_env)
    assert result.exit_code == 0 and "no locks are held" in result.output
