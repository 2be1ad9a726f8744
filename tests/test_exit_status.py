"""One exit status everywhere: what lockrun exited with (what cron saw) is the ledger's
``exit_status``, shown by history, status, show, webhooks and metrics; ``started_at`` and
``duration_s`` are the command's own and ``waited_s`` the wait for the lock (both backends)."""

from __future__ import annotations

import json
import signal
import sys
import time

import pytest

from tests.conftest import history, isolated_env, run_lockrun, spawn_lockrun, wait_until
from tests.test_metrics import samples
from tests.test_notify import Receiver

PY = sys.executable


@pytest.fixture
def env(any_env):
    return any_env


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


def hold(env, tmp_path, name):
    """A holder of ``name`` that keeps it until the returned file is removed."""
    flag, gate = tmp_path / f"{name}.held", tmp_path / f"{name}.gate"
    gate.touch()
    proc = spawn_lockrun(env, "-n", name, "--", "sh", "-c", f"touch {flag}; while [ -e {gate} ]; do sleep 0.02; done")
    wait_until(flag.exists, what="the holder")
    return proc, gate


# (lockrun args, expected lockrun exit = exit_status, status, exit_code, signal)
OUTCOMES = [
    (["--", "true"], 0, "succeeded", 0, None),
    (["--", "sh", "-c", "exit 3"], 3, "failed", 3, None),
    (["--timeout", "0.2", "--", "sleep", "30"], 124, "timeout", None, 15),
    (["--", "sh", "-c", "kill -TERM $$"], 143, "killed", None, 15),
    (["--", "/nonexistent/command"], 127, "error", None, None),
]


@pytest.mark.parametrize("args,code,status,exit_code,sig", OUTCOMES, ids=[o[2] for o in OUTCOMES])
def test_exit_status_is_what_lockrun_exited_with(env, args, code, status, exit_code, sig):
    result = run_lockrun(env, "-n", "x", *args)
    assert result.returncode == code
    (row,) = history(env, "x")
    assert (row["status"], row["exit_status"], row["exit_code"], row["signal"]) == (status, code, exit_code, sig)


@pytest.mark.parametrize("flag,code", [([], 75), (["-E", "0"], 0), (["-E", "9"], 9)])
def test_a_busy_skip_records_the_code_it_exited_with(env, tmp_path, flag, code):
    holder, gate = hold(env, tmp_path, "b")
    try:
        assert run_lockrun(env, "-n", "b", *flag, "--", "true").returncode == code
    finally:
        gate.unlink()
        holder.wait(30)
    busy = history(env, "b", "--status", "busy")[0]
    assert (busy["exit_status"], busy["exit_code"], busy["duration_s"]) == (code, None, None)
    assert busy["waited_s"] is not None and busy["waited_s"] < 5


def test_a_duplicate_records_exit_status_0(env):
    assert run_lockrun(env, "-n", "d", "--once", "k", "--", "true").returncode == 0
    assert run_lockrun(env, "-n", "d", "--once", "k", "--", "true").returncode == 0
    assert [(r["status"], r["exit_status"], r["duration_s"]) for r in history(env, "d")][0] == ("duplicate", 0, None)


def test_a_lost_lease_is_76_and_the_command_signal_stays(env, tmp_path):
    flag = tmp_path / "started"
    proc = spawn_lockrun(env, "-n", "l", "--ttl", "1.5", "--", "sh", "-c", f"touch {flag}; sleep 30")
    wait_until(flag.exists, what="the command")
    assert run_lockrun(env, "unlock", "l", "--force", "--yes").returncode == 0
    assert proc.wait(30) == 76
    (row,) = history(env, "l", "--status", "lost")
    assert (row["exit_status"], row["signal"]) == (76, signal.SIGTERM)


@pytest.mark.parametrize("backend", ["redis", "local"])
def test_unavailable_is_69(redis_server, tmp_path, backend):
    env = {**isolated_env(tmp_path), "LOCKRUN_LEDGER": str(tmp_path / "ledger.db")}
    if backend == "redis":
        env["LOCKRUN_REDIS_URL"] = redis_server.url
        redis_server.kill()
    else:  # a state directory that cannot hold locks: a file where the directory should be
        (tmp_path / "state-file").write_text("")
        env["LOCKRUN_STATE_DIR"] = str(tmp_path / "state-file")
    assert run_lockrun(env, "-n", "u", "--", "true").returncode == 69
    (row,) = history(env, "u")
    assert (row["status"], row["exit_status"], row["duration_s"]) == ("unavailable", 69, None)
    assert row["fencing_token"] is None


def test_a_wait_is_not_part_of_the_commands_time(env, tmp_path):
    holder, gate = hold(env, tmp_path, "w")
    waiter = spawn_lockrun(env, "-n", "w", "--wait", "30", "--", "sh", "-c", "exit 0")
    wait_until(lambda: len(history(env, "w")) == 2, what="the waiter's running row")
    invoked = [r for r in history(env, "w") if r["pid"] == waiter.pid][0]["started_at"]
    time.sleep(1.0)  # a deliberate hold, not a wait for a condition: the waiter waits this long
    assert waiter.poll() is None
    gate.unlink()
    assert waiter.wait(30) == 0 and holder.wait(30) == 0
    row = [r for r in history(env, "w") if r["pid"] == waiter.pid][0]
    assert row["waited_s"] >= 0.9
    assert row["duration_s"] < row["waited_s"]
    assert row["started_at"] > invoked  # the command's start, not lockrun's
    assert row["ended_at"] >= row["started_at"]


def test_the_running_row_gets_the_commands_start_and_wait(env, tmp_path):
    flag = tmp_path / "started"
    proc = spawn_lockrun(env, "-n", "r", "--", "sh", "-c", f"touch {flag}; sleep 30")
    try:
        wait_until(flag.exists, what="the command")
        row = wait_until(lambda: [r for r in history(env, "r") if r["fencing_token"] is not None],
                         what="the command's start on the running row")[0]
        assert row["status"] == "running" and row["exit_status"] is None and row["waited_s"] is not None
    finally:
        proc.terminate()
        proc.wait(30)


def test_every_view_shows_the_exit_status(env, tmp_path, receiver):
    hook = f"{receiver.url}/hook"
    result = run_lockrun(env, "-n", "v", "--timeout", "0.2", "--notify", hook, "--metrics-file",
                         str(tmp_path / "m.prom"), "--", "sleep", "30")
    assert result.returncode == 124
    (row,) = history(env, "v")
    table = run_lockrun(env, "history", "v").stdout
    assert "124 (sig 15)" in table
    status = run_lockrun(env, "status", "v").stdout
    assert "timeout (124, sig 15)" in status
    assert json.loads(run_lockrun(env, "status", "v", "--json").stdout)["locks"][0]["last_run"]["exit_status"] == 124
    shown = run_lockrun(env, "show", row["run_id"][:8]).stdout
    assert any(line.split() == ["exit_status", "124"] for line in shown.splitlines())
    assert any(line.split()[0] == "waited_s" for line in shown.splitlines())
    (payload,) = receiver.json_bodies()
    assert (payload["exit_status"], payload["signal"], payload["exit_code"]) == (124, 15, None)
    assert payload["waited_s"] == row["waited_s"] and payload["duration_s"] == row["duration_s"]
    metrics = samples(run_lockrun(env, "metrics").stdout)
    assert metrics[("lockrun_last_exit_status", (("name", "v"),))] == 124
    assert ("lockrun_last_exit_code", (("name", "v"),)) not in metrics
    assert samples((tmp_path / "m.prom").read_text())[("lockrun_last_exit_status", (("name", "v"),))] == 124


def test_slack_text_says_what_cron_saw_and_how_the_command_ended(env, receiver):
    run_lockrun(env, "-n", "s", "--timeout", "0.2", "--notify", receiver.url, "--notify-format", "slack",
                "--", "sleep", "30")
    (body,) = receiver.json_bodies()
    assert "timeout (exit 124, command killed by signal 15)" in body["text"]


def test_a_command_that_cannot_start_is_notified_and_pinged(env, receiver):
    result = run_lockrun(env, "-n", "nf", "--notify", f"{receiver.url}/hook", "--ping", f"{receiver.url}/ping",
                         "--", "/nonexistent/command")
    assert result.returncode == 127 and result.stderr.count("\n") == 1
    run_id = history(env, "nf")[0]["run_id"]
    assert sorted(receiver.paths()) == ["/hook", f"/ping/fail?rid={run_id}"]
    hook = [json.loads(r["body"]) for r in receiver.requests if r["path"] == "/hook"][0]
    assert (hook["status"], hook["exit_status"]) == ("error", 127)
    assert hook["error"] == "/nonexistent/command: command not found"
    not_executable = run_lockrun(env, "-n", "nx", "--notify", f"{receiver.url}/hook", "--", "/etc/hostname")
    assert not_executable.returncode == 126 and len(receiver.requests) == 3
