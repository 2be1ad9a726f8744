"""A command line that is not valid UTF-8 (a valid argv on Linux): it runs with its own bytes, as
without lockrun, every record of it survives (shown escaped: \\xff), and every run's row ends
with a final status (README "Exit codes", "The run ledger")."""

from __future__ import annotations

import json
import os
import sys

from tests.conftest import assert_one_line, history, run_lockrun, spawn_lockrun, wait_until

BAD = os.fsdecode(b"\xff")  # what Python makes of the byte 0xff in an argv; passed back, it is the byte again
ALSO_BAD = os.fsdecode(b"a\xfeb")



def test_a_command_that_is_not_utf8_runs_with_its_own_bytes(any_env, tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / os.fsdecode(b"job\xff")
    program.write_text('#!/bin/sh\nprintf "%s %s" "$(basename "$0")" "$1" > "$OUT"\n')
    program.chmod(0o755)
    any_env.update(PATH=f"{folder}:{any_env['PATH']}", OUT=str(tmp_path / "out"))
    result = run_lockrun(any_env, "-n", "odd", "--capture-tail", "1k", "--", program.name, ALSO_BAD)
    assert (result.returncode, result.stderr) == (0, "")
    assert (tmp_path / "out").read_bytes() == b"job\xff a\xfeb"  # the command saw its own bytes
    (row,) = history(any_env, "odd")
    assert (row["status"], row["exit_status"], row["command"]) == ("succeeded", 0, ["job\\xff", "a\\xfeb"])
    assert "'job\\xff' 'a\\xfeb'" in run_lockrun(any_env, "history", "odd").stdout  # shell-quoted, escaped
    shown = run_lockrun(any_env, "show", row["run_id"], "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["command"] == ["job\\xff", "a\\xfeb"]
    if "LOCKRUN_REDIS_URL" in any_env:  # the fleet record too
        (fleet_row,) = history(any_env, "--fleet", "odd")
        assert fleet_row["command"] == ["job\\xff", "a\\xfeb"] and fleet_row["status"] == "succeeded"
    # The default name hashes the real bytes: two commands that differ only there differ in name.
    first = run_lockrun(any_env, "--", program.name, BAD)
    second = run_lockrun(any_env, "--", program.name, os.fsdecode(b"\xfe"))
    assert first.returncode == second.returncode == 0
    assert history(any_env, limit=2)[0]["name"] != history(any_env, limit=2)[1]["name"]


def test_a_holder_with_such_a_command_is_shown_escaped(any_env, tmp_path):
    flag = tmp_path / "started"
    holder = spawn_lockrun(any_env, "-n", "held", "--", "sh", "-c", 'touch "$1"; exec sleep 30', BAD, str(flag))
    try:
        wait_until(flag.exists, what="the holder")
        status = run_lockrun(any_env, "status", "--json")
        assert status.returncode == 0, status.stderr
        (lock,) = json.loads(status.stdout)["locks"]
        assert lock["state"] == "held" and lock["command"][3] == "\\xff"
        table = run_lockrun(any_env, "status")
        assert table.returncode == 0 and "\\xff" in table.stdout and table.stderr == ""
    finally:
        holder.terminate()
        holder.wait(30)
    assert history(any_env, "held")[0]["status"] == "killed"


def test_a_command_not_found_is_one_line_and_a_finished_row(any_env):
    # The case: exit 125, and the row left "running" (abandoned once lockrun was gone).
    result = run_lockrun(any_env, "--", BAD)
    assert_one_line(result, 127, "lockrun: \\xff: command not found in PATH")
    (row,) = history(any_env)
    assert (row["status"], row["exit_status"], row["command"]) == ("error", 127, ["\\xff"])
    assert row["error"] == "\\xff: command not found in PATH"


def test_lock_names_once_keys_and_the_environment_with_such_bytes(local_env, tmp_path):
    assert_one_line(run_lockrun(local_env, "-n", f"a{BAD}", "--", "true"), 2, "invalid lock name")
    assert_one_line(run_lockrun(local_env, "--once", f"k{BAD}", "--", "true"), 2, "invalid --once key")
    assert history(local_env) == []  # neither ran
    out = tmp_path / "env"
    local_env["ODD"] = BAD
    result = run_lockrun(local_env, "-n", "env", "--", "sh", "-c", f'printf %s "$ODD" > {out}')
    assert result.returncode == 0 and out.read_bytes() == b"\xff"  # passed on untouched
    # A state directory (so the ledger's path and the row's backend_where) with such a byte.
    local_env["LOCKRUN_STATE_DIR"] = str(tmp_path / f"state{BAD}")
    result = run_lockrun(local_env, "-n", "dir", "--", "true")
    assert (result.returncode, result.stderr) == (0, "")
    assert os.path.exists(os.fsencode(tmp_path) + b"/state\xff/ledger.db")
    (row,) = history(local_env, "dir")
    assert row["status"] == "succeeded"
    status = run_lockrun(local_env, "status")
    assert (status.returncode, status.stderr) == (0, "")  # no false "your runs used another backend" hint


INJECT_FAILING_DELIVERY = """
import lockrun.run.runner
def broken(self, outcome):
    raise RuntimeError("a bug in telling someone")
lockrun.run.runner.Run._deliver = broken
from lockrun.cli.main import main
main()
"""


def test_a_lockrun_that_fails_after_the_row_running_still_finishes_it(any_env):
    """Whatever lockrun trips over once the row exists, the row ends (error, 125), never "running"."""
    import subprocess

    argv = [sys.executable, "-c", INJECT_FAILING_DELIVERY, "-n", "bug", "--", "true"]
    result = subprocess.run(argv, env=any_env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 125 and result.stderr.count("\n") == 1 and "a bug in telling" in result.stderr
    (row,) = history(any_env, "bug")
    assert (row["status"], row["exit_status"]) == ("error", 125)
    assert "a bug in telling someone" in row["error"] and row["ended_at"]
