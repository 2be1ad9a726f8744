"""lockrun's own output failing: readers whose stdout is closed, full or read-only, a stderr that
is gone, and the --capture-tail pump whose destination fails (README "Exit codes", "Telling
someone"). One line and a documented code, never a traceback, 120 or 125."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from tests.conftest import history, lockrun_argv, run_lockrun


def shell(env: dict, argv: list[str], redirect: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"{shlex.join(argv)} {redirect}"], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def env(local_env):
    assert run_lockrun(local_env, "-n", "job", "--", "true").returncode == 0  # something to show
    return local_env


@pytest.mark.parametrize("redirect,needle", [
    (">&-", "cannot write to standard output: it was closed when lockrun started"),
    (">/dev/full", "cannot write to standard output (No space left on device): the output is incomplete"),
    ("1</dev/null", "cannot write to standard output (Bad file descriptor): the output is incomplete"),  # read-only
])
@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["history"], ["history", "--json"],
                                  ["metrics"], ["timeline"], ["timeline", "--svg", "-"], ["--help"],
                                  ["unlock", "job"]], ids=" ".join)
def test_a_reader_whose_output_fails_says_so_in_one_line_and_exits_1(env, args, redirect, needle):
    result = shell(env, lockrun_argv(*args), redirect)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert result.stderr == f"lockrun: {needle}\n"


def test_show_whose_output_fails_too(env):
    run_id = history(env, "job")[0]["run_id"]
    result = shell(env, lockrun_argv("show", run_id), ">/dev/full")
    assert (result.returncode, result.stderr.count("\n")) == (1, 1) and "No space left" in result.stderr


def test_a_stderr_that_fails_as_well_leaves_the_exit_code_alone(env):
    # Python would exit 120 when its last flush of a full stderr fails; lockrun's code stands.
    assert shell(env, lockrun_argv("history"), ">/dev/full 2>/dev/full").returncode == 1
    assert shell(env, lockrun_argv("history", "--limit", "0"), "2>/dev/full").returncode == 2
    assert shell(env, lockrun_argv("-n", "e", "--", "no-such-command-here"), "2>/dev/full").returncode == 127
    assert shell(env, lockrun_argv("-n", "e", "--", "sh", "-c", "echo oops >&2; exit 3"), "2>/dev/full").returncode == 3
    assert shell(env, lockrun_argv("-n", "e", "--", "sh", "-c", "exit 4"), "2>&-").returncode == 4
    assert [row["status"] for row in history(env, "e")] == ["failed", "failed", "error"]


# --- the --capture-tail pump ------------------------------------------------------------------------


@pytest.mark.parametrize("redirect,stream,said", [
    (">/dev/full", "standard output", "No space left on device"),
    ("1</dev/null", "standard output", "Bad file descriptor"),
    (">/dev/full 2>&1", "standard output and error", None),  # one destination, and it failed: nowhere to say it
])
def test_a_failing_destination_is_said_once_and_the_command_gets_epipe(any_env, redirect, stream, said):
    """The pump cannot hand the command ENOSPC or EBADF: it closes the pipe, so the command's next
    write fails with EPIPE (yes dies of SIGPIPE: 141), as on a pipe whose reader went away."""
    result = shell(any_env, lockrun_argv("-n", "full", "--capture-tail", "1k", "--", "yes"), redirect)
    assert result.returncode == 141, result.stderr
    problem = f"the command's {stream} could not be written"
    if said:
        assert result.stderr == f"lockrun: {problem} ({said}); its further writes there fail as on a closed pipe\n"
    else:
        assert result.stderr == ""
    (row,) = history(any_env, "full")
    assert (row["status"], row["signal"], row["exit_status"]) == ("killed", 13, 141)
    assert problem in row["note"]
    tail = run_lockrun(any_env, "show", row["run_id"]).stdout
    assert "y\ny\n" in tail  # what the command wrote is kept all the same


def test_a_full_stderr_alone_leaves_stdout_flowing(local_env):
    argv = lockrun_argv("-n", "half", "--capture-tail", "1k", "--", "sh", "-c", "echo out; echo err >&2; echo more")
    result = shell(local_env, argv, "2>/dev/full")
    assert (result.returncode, result.stdout) == (0, "out\nmore\n")
    (row,) = history(local_env, "half")
    assert row["status"] == "succeeded" and "the command's standard error could not be written" in row["note"]


# --- a change that was made, but could not be said (pause, resume, unlock, prune) -----------------


@pytest.mark.parametrize("redirect,needle", [
    (">&-", "cannot write to standard output: it was closed when lockrun started"),
    (">/dev/full", "cannot write to standard output (No space left on device): the output is incomplete"),
])
def test_a_change_that_was_made_exits_0_with_a_warning_when_it_cannot_be_said(any_env, redirect, needle):
    # `lockrun pause … || alert` must not alert on a pause that holds.
    paused = shell(any_env, lockrun_argv("pause", "job", "--for", "1h", "--reason", "migration"), redirect)
    assert (paused.returncode, paused.stderr) == (0, f"lockrun: {needle}; the pause holds all the same\n")
    lock = json.loads(run_lockrun(any_env, "status", "--json", "job").stdout)["locks"][0]
    assert lock["paused"]["reason"] == "migration"
    resumed = shell(any_env, lockrun_argv("resume", "job"), redirect)
    assert (resumed.returncode, resumed.stderr) == (0, f"lockrun: {needle}; the pause is over all the same\n")
    assert json.loads(run_lockrun(any_env, "status", "--json", "job").stdout)["locks"][0]["paused"] is None

    # unlock shows the holder before it clears it: a holder it could not show is not cleared (exit 1)
    assert run_lockrun(any_env, "-n", "cool", "--min-hold", "1h", "--", "true").returncode == 0  # kept taken
    kept = shell(any_env, lockrun_argv("unlock", "cool", "--yes"), redirect)
    assert (kept.returncode, kept.stderr) == (1, f"lockrun: {needle}\n")
    assert json.loads(run_lockrun(any_env, "status", "--json", "cool").stdout)["locks"][0]["state"] == "cooling"

    pruned = shell(any_env, lockrun_argv("prune", "--older-than", "1s"), redirect)
    assert (pruned.returncode, pruned.stderr) == (0, f"lockrun: {needle}; the runs are pruned all the same\n")


def test_a_change_whose_reader_went_away_early_is_no_error(any_env):
    result = shell(any_env, lockrun_argv("pause", "job", "--for", "1h"), "| true")
    assert (result.returncode, result.stderr) == (0, "")
