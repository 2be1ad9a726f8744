"""lockrun in the foreground of a terminal: the command owns the terminal for its run."""

from __future__ import annotations

import os
import sys

from tests.conftest import in_pty as _in_pty
from tests.conftest import read_until as _read_until

READ_LINE = "import sys; line = sys.stdin.readline(); print('got', line.strip(), flush=True)"
WAIT_FOR_CTRL_C = "import time; print('ready', flush=True); time.sleep(60)"


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
