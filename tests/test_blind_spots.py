"""More of what lockrun cannot see, found by a hostile pass over issue 21's rules (README "What
lockrun guarantees, and how"): each case once ran two copies of one job, or gave a false answer.

- a signal to lockrun's whole process group (``timeout -s KILL``, ``kill -9 -- -PGID``, a group
  SIGSTOP) took the watchdog with lockrun, and the command's group ran on;
- a reader whose ``/proc`` hides other users' processes (``hidepid=invisible``) took a live
  root holder for dead, and ``unlock --yes`` cleared it;
- the user's config file followed ``$HOME`` while the state directory follows the passwd entry;
- ``status`` with Redis unreachable and its stdout failing lost exit 69;
- a reader under a directory someone else controls said "no runs recorded" (exit 0) before the
  state directory existed;
- a newline in the command's name split the "not found" line in two;
- a ledger others may write was read and written as lockrun's own;
- ``--slots N`` with ``--once`` let N holders do one period's work at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import OTHER_UID, TEST_UID, assert_one_line, isolated_env, lockrun_argv, run_lockrun, wait_until
from tests.test_descendants import Escapee, cgroup_available, gone


def spawn_in_own_group(env: dict, *args: str) -> subprocess.Popen:
    """lockrun as the leader of a process group of its own, as `timeout` or a shell job makes it."""
    return subprocess.Popen(lockrun_argv(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


# --- a signal to lockrun's whole process group ----------------------------------------------------


def test_a_sigkill_to_lockruns_whole_group_still_kills_the_commands_group(any_env, tmp_path):
    # The command's group: sh and a child of it. Before, the watchdog died with lockrun's group,
    # PR_SET_PDEATHSIG took only sh, and the child ran on, unlocked.
    escapee = Escapee(tmp_path)
    proc = spawn_in_own_group(any_env, "-n", "gk", "--", *escapee.command("double-fork", then="sleep 30"))
    wait_until(escapee.started, what="the command's child to start")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    for pid in escapee.pid_list():
        wait_until(lambda pid=pid: gone(pid) or _zombie(pid), timeout=15, what=f"{pid} to be killed")


def test_a_sigkill_to_lockruns_group_takes_the_detached_grandchild_through_the_cgroup(any_env, tmp_path):
    if not cgroup_available():
        pytest.fail("this test needs a writable cgroup v2 (root, or a delegated subtree), as CI has")
    escapee = Escapee(tmp_path)
    proc = spawn_in_own_group(any_env, "-n", "gc", "--", *escapee.command("setsid", then="sleep 30"))
    wait_until(escapee.started, what="the grandchild to start")
    pid = escapee.pid_list()[0]
    wait_until(lambda: "/lockrun-" in Path(f"/proc/{pid}/cgroup").read_text(), what="the run's cgroup")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    wait_until(lambda: gone(pid) or _zombie(pid), timeout=15, what="the cgroup to be killed")


def test_a_sigstop_to_lockruns_group_still_ends_the_command_with_the_lease(env, redis_server, tmp_path):
    # lockrun and its group are frozen: its backstop kills it at the lease's end, and the watchdog,
    # which is not in that group, kills the command's group.
    escapee = Escapee(tmp_path)
    proc = spawn_in_own_group(env, "-n", "gs", "--ttl", "3", "--", *escapee.command("double-fork", then="sleep 60"))
    try:
        wait_until(escapee.started, what="the command's child to start")
        os.killpg(proc.pid, signal.SIGSTOP)
        pid = escapee.pid_list()[0]
        wait_until(lambda: gone(pid) or _zombie(pid), timeout=30, what="the command to end with the lease")
        assert proc.wait(30) == -signal.SIGKILL  # the backstop
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone with its lockrun, as it should be
            os.killpg(proc.pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# --- /proc that hides other users' processes -------------------------------------------------------


def test_a_reader_whose_proc_hides_the_holder_does_not_take_it_for_dead(user, redis_server, tmp_path):
    env = {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": redis_server.tcp_url}
    started = tmp_path / "started"
    holder = subprocess.Popen(lockrun_argv("-n", "hp", "--ttl", "60", "--", "sh", "-c", f"touch {started}; sleep 60"),
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(started.exists, what="the holder")
        reader = {**user.cron, "LOCKRUN_REDIS_URL": redis_server.tcp_url}
        hidden = ["mount -t proc -o hidepid=invisible proc /proc"]
        shown = user.run(reader, "status", "--json", "hp", before=hidden)
        assert shown.returncode == 0, shown.stderr
        (lock,) = json.loads(shown.stdout)["locks"]
        assert lock["state"] == "held", lock
        kept = user.run(reader, "unlock", "hp", "--yes", before=hidden)
        assert kept.returncode == 1 and "looks alive" in kept.stderr, (kept.stdout, kept.stderr)
        assert redis_server.client().exists("lockrun:{hp}:lock") == 1
    finally:
        holder.terminate()
        holder.wait(30)


# --- one config file per user, as one state directory --------------------------------------------


def test_the_users_config_file_is_found_by_the_passwd_home_not_HOME(user, tmp_path):
    config_dir = user.home / ".config" / "lockrun"
    config_dir.mkdir(parents=True)
    chosen = user.home / "chosen-state"
    (config_dir / "config.toml").write_text(f'state_dir = "{chosen}"\n')
    for path in (user.home / ".config", config_dir, config_dir / "config.toml"):
        os.chown(path, TEST_UID, TEST_UID)
    elsewhere = tmp_path / "elsewhere"  # a crontab's HOME= line, sudo -E, su without -
    elsewhere.mkdir()
    cron = {key: value for key, value in user.cron.items() if key != "LOCKRUN_CONFIG"}  # the default files
    ran = user.run({**cron, "HOME": str(elsewhere)}, "-n", "cfg", "--", "true")
    assert (ran.returncode, ran.stderr) == (0, "")
    assert (chosen / "ledger.db").exists()  # the passwd home's config file was read


# --- status keeps exit 69 when its own output fails ------------------------------------------------


@pytest.mark.parametrize("redirect", [">&-", ">/dev/full"])
@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_status_keeps_exit_69_when_its_output_fails_too(tmp_path, redirect, as_json):
    env = {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": f"unix://{tmp_path}/none.sock"}
    result = subprocess.run(["sh", "-c", f'exec "$@" {redirect}', "sh", *lockrun_argv("status", *as_json)], env=env,
                            stderr=subprocess.PIPE, text=True, timeout=60)
    assert result.returncode == 69, result.stderr
    assert "Traceback" not in result.stderr
    assert "none.sock" in result.stderr  # the unreachable server is named


# --- a reader under a directory someone else controls --------------------------------------------


def test_a_reader_under_another_users_directory_says_so_before_any_run(local_env, tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER_UID, OTHER_UID)
    local_env["LOCKRUN_STATE_DIR"] = str(theirs / "sub")  # does not exist: no run could make it
    for args in (("history",), ("timeline",), ("show", "abcd")):
        assert_one_line(run_lockrun(local_env, *args), 1, f"is inside {theirs}")


# --- a command name with a newline ---------------------------------------------------------------


def test_a_newline_in_the_commands_name_stays_on_one_line(any_env):
    result = run_lockrun(any_env, "-n", "nl", "--", "a\nb")
    assert_one_line(result, 127, "a\\nb: command not found")


# --- a ledger others may write ---------------------------------------------------------------------


def test_a_ledger_others_may_write_is_not_used(env, tmp_path):
    ledger = Path(env["LOCKRUN_STATE_DIR"]) / "ledger.db"
    assert run_lockrun(env, "-n", "w", "--", "true").returncode == 0
    os.chmod(ledger, 0o666)
    ran = run_lockrun(env, "-n", "w", "--", "true")
    assert ran.returncode == 0 and "writable by group or others" in ran.stderr  # the command runs, warned
    assert_one_line(run_lockrun(env, "history"), 1, "ledger file", "writable by group or others")
    os.chmod(ledger, 0o600)
    os.chown(ledger, OTHER_UID, OTHER_UID)
    assert_one_line(run_lockrun(env, "history"), 1, f"owned by uid {OTHER_UID}")


# --- --slots with --once ---------------------------------------------------------------------------


@pytest.mark.parametrize("once", [["--once", "k"], ["--once-per", "day"]])
def test_slots_and_once_do_not_combine(any_env, tmp_path, once):
    ran = tmp_path / "ran"
    assert_one_line(run_lockrun(any_env, "-n", "so", "--slots", "2", *once, "--", "touch", str(ran)), 2,
                    "--slots 2 cannot be combined with --once")
    assert not ran.exists()

