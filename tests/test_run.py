"""`lockrun run` end to end, the shared contract: every test runs against both backends
(a real redis-server, and the local one), through real lockrun subprocesses."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import history, lockrun_argv, pid_alive, run_lockrun, spawn_lockrun, wait_until

PY = sys.executable


@pytest.fixture
def env(any_env):
    return any_env

# A command that appends "start <t>" and "end <t>" lines to a log around a short sleep.
INTERVAL = (
    "import sys, time\n"
    "log, pause = sys.argv[1], float(sys.argv[2])\n"
    "with open(log, 'a') as f: f.write(f'start {time.time()!r}\\n')\n"
    "time.sleep(pause)\n"
    "with open(log, 'a') as f: f.write(f'end {time.time()!r}\\n')\n"
)


def intervals(log_path) -> list[tuple[float, float]]:
    """The (start, end) pairs of a log written by INTERVAL, checked for strict alternation."""
    lines = log_path.read_text().split()
    kinds, stamps = lines[0::2], [float(x) for x in lines[1::2]]
    # With a working lock, a start is always followed by its own end: never two starts in a row.
    assert kinds == ["start", "end"] * (len(kinds) // 2), f"overlapping runs: {kinds}"
    pairs = list(zip(stamps[0::2], stamps[1::2], strict=True))
    for (_, end), (start, _) in itertools.pairwise(pairs):
        assert end <= start
    return pairs


# --- pass-through ---------------------------------------------------------------------------


@pytest.mark.parametrize("form", [["run", "-n", "job"], ["-n", "job", "--"], ["run", "-n", "job", "--"]])
@pytest.mark.parametrize("code", [0, 1, 3, 42, 255])
def test_exit_code_passes_through(env, form, code):
    result = run_lockrun(env, *form, "sh", "-c", f"exit {code}")
    assert result.returncode == code
    assert result.stderr == ""


def test_output_passes_through_untouched(env):
    script = "import sys; sys.stdout.write('out\\n\\x00bin'); sys.stderr.write('err line\\n')"
    result = subprocess.run(
        lockrun_argv("-n", "out", "--", PY, "-c", script),
        env=env, capture_output=True, timeout=60,
    )
    assert result.returncode == 0
    assert result.stdout == b"out\n\x00bin"
    assert result.stderr == b"err line\n"


def test_stdin_is_inherited(env):
    result = run_lockrun(env, "-n", "cat", "--", "cat", input="fed through\n")
    assert (result.returncode, result.stdout) == (0, "fed through\n")


def test_flags_after_the_command_belong_to_it(env):
    result = run_lockrun(env, "run", "-n", "x", "echo", "-n", "-v", "--ttl", "abc")
    assert result.returncode == 0
    assert result.stdout == "-v --ttl abc"


def test_environment_seen_by_the_command(env):
    script = ("import os, json; print(json.dumps({k: os.environ[k] for k in "
              "('LOCKRUN_NAME', 'LOCKRUN_RUN_ID', 'LOCKRUN_FENCING_TOKEN')}))")
    result = run_lockrun(env, "-n", "envjob", "--", PY, "-c", script)
    seen = json.loads(result.stdout)
    row = history(env, "envjob")[0]
    assert seen == {"LOCKRUN_NAME": "envjob", "LOCKRUN_RUN_ID": row["run_id"],
                    "LOCKRUN_FENCING_TOKEN": str(row["fencing_token"])}


def test_default_name_is_derived_from_argv(env):
    run_lockrun(env, "--", "echo", "a b")
    run_lockrun(env, "--", "echo", "a", "b")
    names = {row["name"] for row in history(env)}
    assert len(names) == 2 and all(n.startswith("cmd-") and len(n) == 16 for n in names)


# --- the lock --------------------------------------------------------------------------------


def test_busy_skip_exits_75_and_obeys_E(env, tmp_path):
    flag = tmp_path / "started"
    holder = spawn_lockrun(env, "-n", "busy", "--", "sh", "-c", f"touch {flag}; sleep 30")
    try:
        wait_until(flag.exists, what="the holder's command to start")
        ran = tmp_path / "ran"
        busy = run_lockrun(env, "-n", "busy", "--", "touch", str(ran))
        assert (busy.returncode, busy.stdout, busy.stderr) == (75, "", "")  # silent: no cron mail
        assert not ran.exists()
        assert run_lockrun(env, "-n", "busy", "-E", "0", "--", "touch", str(ran)).returncode == 0
        assert run_lockrun(env, "-n", "busy", "--busy-exit-code", "9", "--", "true").returncode == 9
        assert not ran.exists()
        verbose = run_lockrun(env, "-v", "-n", "busy", "--", "true")
        assert "busy" in verbose.stderr and "held by" in verbose.stderr
        rows = history(env, "busy", "--status", "busy")
        assert len(rows) == 4 and all("held by" in r["note"] for r in rows)
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(30)


def test_concurrent_runs_never_overlap(env, tmp_path):
    log = tmp_path / "log"
    cmd = ["-n", "race", "--wait", "120", "--", PY, "-c", INTERVAL, str(log), "0.02"]
    procs = [spawn_lockrun(env, *cmd) for _ in range(25)]
    codes = [p.wait(180) for p in procs]
    assert codes == [0] * 25
    assert len(intervals(log)) == 25
    rows = history(env, "race")
    assert len({r["fencing_token"] for r in rows}) == 25  # every grant its own token


def test_concurrent_runs_without_wait_mostly_skip(env, tmp_path):
    log = tmp_path / "log"
    cmd = ["-n", "race0", "--", PY, "-c", INTERVAL, str(log), "0.5"]
    procs = [spawn_lockrun(env, *cmd) for _ in range(10)]
    codes = sorted(p.wait(120) for p in procs)
    ran = len(intervals(log))
    assert codes.count(0) == ran and codes.count(75) == 10 - ran and ran >= 1


def test_waiters_all_run_in_turn(env, tmp_path):
    log = tmp_path / "log"
    flag = tmp_path / "holding"
    first = spawn_lockrun(env, "-n", "queue", "--", "sh", "-c", f"touch {flag}; sleep 0.5")
    wait_until(flag.exists, what="the first holder")
    cmd = ["-n", "queue", "-w", "120", "--", PY, "-c", INTERVAL, str(log), "0.1"]
    waiters = [spawn_lockrun(env, *cmd) for _ in range(12)]
    assert first.wait(60) == 0
    assert [w.wait(120) for w in waiters] == [0] * 12
    assert len(intervals(log)) == 12


def test_wait_gives_up_with_the_busy_code(env, tmp_path):
    flag = tmp_path / "holding"
    holder = spawn_lockrun(env, "-n", "w", "--", "sh", "-c", f"touch {flag}; sleep 30")
    try:
        wait_until(flag.exists, what="the holder")
        started = time.monotonic()
        result = run_lockrun(env, "-n", "w", "-w", "1", "-E", "3", "--", "true")
        assert result.returncode == 3
        assert time.monotonic() - started >= 1.0
    finally:
        holder.terminate()
        holder.wait(30)


def test_fencing_tokens_strictly_increase(env):
    tokens = []
    for _ in range(5):
        result = run_lockrun(env, "-n", "fence", "--", "sh", "-c", "echo $LOCKRUN_FENCING_TOKEN")
        tokens.append(int(result.stdout))
    assert tokens == sorted(set(tokens)) and tokens[0] >= 1


# --- signals, timeouts, missing commands -------------------------------------------------------


TRAP_TERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n"
    "open(sys.argv[1], 'w').close()\n"
    "time.sleep(60)\n"
)


def test_sigterm_is_forwarded_and_the_commands_code_returned(env, tmp_path):
    flag = tmp_path / "ready"
    proc = spawn_lockrun(env, "-n", "term", "--", PY, "-c", TRAP_TERM, str(flag))
    wait_until(flag.exists, what="the command's TERM handler")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 42
    row = history(env, "term")[0]
    assert (row["status"], row["exit_code"]) == ("failed", 42)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM])
def test_forwarded_signal_death_is_128_plus_n(env, tmp_path, sig):
    flag = tmp_path / "ready"
    proc = spawn_lockrun(env, "-n", "sig", "--", "sh", "-c", f"touch {flag}; exec sleep 60")
    wait_until(flag.exists, what="the command")
    proc.send_signal(sig)  # whether sh has exec'd sleep yet or not, the group gets it and dies of it
    assert proc.wait(30) == 128 + sig
    row = history(env, "sig")[0]
    assert (row["status"], row["signal"], row["exit_code"]) == ("killed", sig, None)


GROUP = (
    "import os, subprocess, sys, time\n"
    "child = subprocess.Popen(['sleep', '300'])\n"
    "with open(sys.argv[1], 'w') as f: f.write(f'{os.getpid()} {child.pid}')\n"
    "time.sleep(300)\n"
)


def test_command_and_its_children_die_with_a_sigkilled_lockrun(env, tmp_path):
    pids_file = tmp_path / "pids"
    proc = spawn_lockrun(env, "-n", "orphan", "--", PY, "-c", GROUP, str(pids_file))
    wait_until(lambda: pids_file.exists() and pids_file.read_text(), what="the command's pids")
    pids = [int(p) for p in pids_file.read_text().split()]
    proc.kill()
    proc.wait(30)
    wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=5, what="the command group to die")


def test_group_leftovers_are_killed_before_release(env, tmp_path):
    pid_file = tmp_path / "bg"
    result = run_lockrun(env, "-n", "bg", "--", "sh", "-c", f"sleep 300 & echo $! > {pid_file}")
    assert result.returncode == 0
    wait_until(lambda: not pid_alive(int(pid_file.read_text())), timeout=5, what="the straggler to die")


def test_timeout_stops_the_command_with_124(env, tmp_path):
    started = time.monotonic()
    result = run_lockrun(env, "-n", "slow", "--timeout", "0.5", "--", "sleep", "30")
    assert result.returncode == 124
    assert time.monotonic() - started < 10
    assert "timeout" in result.stderr
    row = history(env, "slow")[0]
    assert (row["status"], row["signal"]) == ("timeout", signal.SIGTERM)


def test_timeout_escalates_to_sigkill_after_kill_after(env, tmp_path):
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    started = time.monotonic()
    result = run_lockrun(env, "-n", "stubborn", "--timeout", "0.3", "--kill-after", "0.5", "--", PY, "-c", script)
    assert result.returncode == 124
    assert time.monotonic() - started < 10
    assert history(env, "stubborn")[0]["signal"] == signal.SIGKILL


def test_missing_command_is_127(env, tmp_path):
    result = run_lockrun(env, "-n", "m", "--", "no-such-command-xyz")
    assert result.returncode == 127
    assert result.stderr.count("\n") == 1 and "not found" in result.stderr
    assert history(env, "m")[0]["status"] == "error"


def test_non_executable_command_is_126(env, tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    result = run_lockrun(env, "-n", "m", "--", str(script))
    assert result.returncode == 126
    assert result.stderr.count("\n") == 1 and "permission denied" in result.stderr
    directory = run_lockrun(env, "-n", "m", "--", str(tmp_path))
    assert directory.returncode == 126


