"""lockrun in the foreground of a terminal: the command owns the terminal for its run."""

from __future__ import annotations

import fcntl
import os
import select
import subprocess
import sys
import termios
import time

from tests.conftest import lockrun_argv

READ_LINE = "import sys; line = sys.stdin.readline(); print('got', line.strip(), flush=True)"
WAIT_FOR_CTRL_C = "import time; print('ready', flush=True); time.sleep(60)"


def _in_pty(env, *args):
    """Start lockrun as a session leader with a pseudo-terminal as its controlling terminal."""
    master, slave = os.openpty()

    def take_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        lockrun_argv(*args), env=env, stdin=slave, stdout=slave, stderr=slave, preexec_fn=take_terminal
    )
    os.close(slave)
    return proc, master


def _read_until(master, needle: bytes, timeout: float = 15.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"timed out waiting for {needle!r}; saw {seen!r}"
        ready, _, _ = select.select([master], [], [], left)
        if ready:
            try:
                chunk = os.read(master, 1024)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


def test_command_can_read_the_terminal(env):
    proc, master = _in_pty(env, "-n", "tty", "--", sys.executable, "-c", READ_LINE)
    try:
        os.write(master, b"typed\n")
        assert b"got typed" in _read_until(master, b"got typed")
        assert proc.wait(30) == 0
    finally:
        os.close(master)


def test_ctrl_c_reaches_the_command(env):
    proc, master = _in_pty(env, "-n", "tty", "--", sys.executable, "-c", WAIT_FOR_CTRL_C)
    try:
        _read_until(master, b"ready")
        os.write(master, b"\x03")  # the terminal sends SIGINT to its foreground group: the command's
        assert proc.wait(30) == 130
    finally:
        os.close(master)
