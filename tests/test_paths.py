"""Paths someone else controls: the directories above the state directory, one set of local locks
per user whatever cron's environment lacks, and output paths that are not regular files
(README "Security notes", "The state directory").

Each case ends in one holder or one line with a documented exit code, through real lockrun
processes. The cron-versus-shell cases run lockrun as another user (uid TEST_UID) with a passwd
entry of its own, in a private mount namespace.
"""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest

from tests.conftest import OTHER_UID, assert_one_line, run_lockrun, wait_until

# --- every directory above the state directory ---------------------------------------------------


def test_a_state_directory_inside_another_users_directory_is_refused(local_env, tmp_path):
    # The case: /x belongs to someone else, who renamed /x/sub away mid-run; a second run
    # then took "the same" lock in a new /x/sub. Now nothing runs there at all.
    theirs = tmp_path / "theirs"
    (theirs / "sub").mkdir(parents=True)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    local_env["LOCKRUN_STATE_DIR"] = str(theirs / "sub")
    ran = tmp_path / "ran"
    assert_one_line(run_lockrun(local_env, "-n", "job", "--", "touch", str(ran)), 69,
                    f"the state directory {theirs / 'sub'} is inside {theirs}", f"owned by uid {OTHER_UID}")
    assert not ran.exists() and list((theirs / "sub").iterdir()) == []
    for args in (("history",), ("metrics",), ("timeline",)):
        assert_one_line(run_lockrun(local_env, *args), 1, f"is inside {theirs}")
    os.chown(theirs, 0, 0)  # root's: fine
    assert run_lockrun(local_env, "-n", "job", "--", "touch", str(ran)).returncode == 0 and ran.exists()


def test_a_directory_above_that_others_may_write_is_refused_unless_sticky_and_roots(local_env, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o775)
    local_env["LOCKRUN_STATE_DIR"] = str(shared / "mine" / "state")
    assert_one_line(run_lockrun(local_env, "-n", "job", "--", "true"), 69, f"is inside {shared}",
                    "writable by group or others (mode 0775)", f"chmod go-w {shared}")
    assert list(shared.iterdir()) == []  # nothing was created under it either
    os.chmod(shared, 0o1777)  # like /tmp: others cannot rename what is ours in it
    assert run_lockrun(local_env, "-n", "job", "--", "true").returncode == 0
    for created in (shared / "mine", shared / "mine" / "state"):  # every missing directory: 0700, ours
        st = created.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, os.geteuid()), created
    # ... but only as the parent of what is ours or root's: a directory of another user in it is not.
    (shared / "theirs").mkdir()
    os.chown(shared / "theirs", OTHER_UID, OTHER_UID)
    local_env["LOCKRUN_STATE_DIR"] = str(shared / "theirs" / "state")
    assert_one_line(run_lockrun(local_env, "-n", "job", "--", "true"), 69, f"is inside {shared / 'theirs'}",
                    f"owned by uid {OTHER_UID}")
    # The sticky directory itself as the state directory: writable by all, refused as before.
    local_env["LOCKRUN_STATE_DIR"] = str(shared)
    assert_one_line(run_lockrun(local_env, "-n", "job", "--", "true"), 69, "writable by group or others")


def test_a_link_on_the_way_must_be_ours_or_roots_and_its_target_is_checked_too(local_env, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    os.lchown(link, OTHER_UID, OTHER_UID)
    local_env["LOCKRUN_STATE_DIR"] = str(link / "state")
    assert_one_line(run_lockrun(local_env, "-n", "job", "--", "true"), 69, f"goes through {link}",
                    f"a symbolic link owned by uid {OTHER_UID}")
    os.lchown(link, 0, 0)
    assert run_lockrun(local_env, "-n", "job", "--", "true").returncode == 0
    assert (real / "state" / "locks" / "job.lock").exists()
    # A link to a place below another user's directory: the target's parents are what count.
    theirs = tmp_path / "theirs"
    (theirs / "state").mkdir(parents=True)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    link.unlink()
    link.symlink_to(theirs)
    assert_one_line(run_lockrun(local_env, "-n", "job", "--", "true"), 69, f"is inside {theirs}")


def test_the_ledgers_directory_is_checked_the_same_way(env, tmp_path):
    """With Redis the lock does not live in the state directory: the command runs, without a row."""
    theirs = tmp_path / "theirs"
    (theirs / "sub").mkdir(parents=True)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    ledger = theirs / "sub" / "ledger.db"
    result = run_lockrun(env, "--ledger", str(ledger), "-n", "job", "--", "echo", "ran")
    assert (result.returncode, result.stdout) == (0, "ran\n")
    assert result.stderr.count("\n") == 1 and f"is inside {theirs}" in result.stderr, result.stderr
    assert "runs regardless" in result.stderr and not ledger.exists()
    assert_one_line(run_lockrun(env, "--ledger", str(ledger), "history"), 1, "cannot read the run ledger",
                    f"is inside {theirs}")


# --- one set of local locks per user, from cron and from a shell ----------------------------------


def _held(user, env) -> list[str]:
    result = user.run(env, "status", "--json")
    assert result.returncode == 0, result.stderr
    return [lock["name"] for lock in json.loads(result.stdout)["locks"] if lock["state"] == "held"]


def test_cron_and_a_login_shell_share_one_set_of_local_locks(user):
    started = user.home / "started"
    holder = user.spawn(user.shell, "-n", "job", "--", "sh", "-c", f"touch {started}; exec sleep 30")
    try:
        wait_until(started.exists, what="the holder started from a shell")
        ran = user.home / "ran"
        # cron has no XDG_STATE_HOME: the same lock, so busy, and the job does not run twice.
        busy = user.run(user.cron, "-n", "job", "--", "touch", str(ran))
        assert (busy.returncode, busy.stderr) == (75, "")
        # Nor does a HOME changed by hand (sudo -E, su without -) move the locks.
        moved = user.run({**user.cron, "HOME": str(user.home / "elsewhere")}, "-n", "job", "--", "touch", str(ran))
        assert moved.returncode == 75, moved.stderr
        assert not ran.exists()
        assert _held(user, user.shell) == ["job"] and _held(user, user.cron) == ["job"]
        assert (user.home / ".local" / "state" / "lockrun" / "locks" / "job.lock").exists()
        assert not (user.home / "xdg-state").exists()
    finally:
        holder.terminate()
        holder.wait(30)


# --- output paths that are not regular files ------------------------------------------------------


def _special(tmp_path: Path, kind: str) -> Path:
    """A device node (our own, never the machine's /dev/null), a FIFO or a socket."""
    path = tmp_path / f"special-{kind}"
    if kind == "device":
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.close()
    return path


def _identity(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), st.st_ino, st.st_rdev


KIND_NAMES = {"device": "a character device", "fifo": "a FIFO", "socket": "a socket"}


@pytest.mark.parametrize("kind", ["device", "fifo", "socket"])
def test_a_device_fifo_or_socket_at_an_output_path_is_refused_at_parse_time_and_stays(local_env, tmp_path, kind):
    special = _special(tmp_path, kind)
    before = _identity(special)
    needle = f"{special} is {KIND_NAMES[kind]}, not a regular file"
    ran = tmp_path / "ran"
    config = tmp_path / "special.toml"
    for key in ("metrics_file", "ledger"):
        config.write_text(f'{key} = "{special}"\n')
        assert_one_line(run_lockrun({**local_env, "LOCKRUN_CONFIG": str(config)}, "-n", "j", "--", "touch", str(ran)),
                        78, f"config file {config}, line 1: {key} {special}", f"is {KIND_NAMES[kind]}")
    for args, code in (
        (("-n", "j", "--metrics-file", str(special), "--", "touch", str(ran)), 2),
        (("--ledger", str(special), "-n", "j", "--", "touch", str(ran)), 2),
        (("--ledger", str(special), "history"), 2),
        (("timeline", "--svg", str(special)), 2),
    ):
        assert_one_line(run_lockrun(local_env, *args), code, needle)
    assert_one_line(run_lockrun({**local_env, "LOCKRUN_LEDGER": str(special)}, "-n", "j", "--", "true"), 2, needle)
    # A link to one (as /dev/stdout is to whatever fd 1 is) is refused just the same.
    link = tmp_path / "link"
    link.symlink_to(special)
    assert_one_line(run_lockrun(local_env, "-n", "j", "--metrics-file", str(link), "--", "true"), 2,
                    f"is a symbolic link to {KIND_NAMES[kind]}")
    assert not ran.exists() and _identity(special) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_a_directory_at_the_ledger_path_is_a_usage_error(local_env, tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    assert_one_line(run_lockrun(local_env, "--ledger", str(folder), "-n", "j", "--", "true"), 2,
                    f"{folder} is a directory, not a regular file")


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_device_that_appears_at_the_metrics_path_during_the_run_is_left_alone(any_env, tmp_path, kind):
    """Checked again when the file is written: the command already ran, so a warning."""
    target = tmp_path / "lockrun.prom"
    make = f"mknod {target} c 1 3" if kind == "device" else f"mkfifo {target}"
    result = run_lockrun(any_env, "-n", "m", "--metrics-file", str(target), "--", "sh", "-c", make)
    assert result.returncode == 0 and result.stderr.count("\n") == 1, result.stderr
    assert f"cannot write the metrics file {target}" in result.stderr
    assert f"is {KIND_NAMES[kind]}, not a regular file" in result.stderr and "left it alone" in result.stderr
    mode = os.lstat(target).st_mode
    assert stat.S_ISCHR(mode) if kind == "device" else stat.S_ISFIFO(mode)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_link_at_an_output_path_is_neither_replaced_nor_written_through(local_env, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "lockrun.prom"
    link.symlink_to(victim)
    # Refused as it is read, before the command runs (a link made later is refused as it would be
    # replaced: system/safefs.write_atomically, tests/unit of safefs).
    ran = tmp_path / "ran"
    result = run_lockrun(local_env, "-n", "m", "--metrics-file", str(link), "--", "touch", str(ran))
    assert_one_line(result, 2, "is a symbolic link", "name the file it points to")
    assert not ran.exists()
    svg = run_lockrun(local_env, "timeline", "--svg", str(link))
    assert_one_line(svg, 1, "cannot write the SVG", "is a symbolic link")
    assert link.is_symlink() and victim.read_text() == "precious\n"
    # A regular file is replaced as before.
    link.unlink()
    assert run_lockrun(local_env, "-n", "m", "--metrics-file", str(link), "--", "true").returncode == 0
    assert "lockrun_runs_total" in link.read_text()
