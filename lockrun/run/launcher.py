"""The command's process before and at its exec: forked ahead of time, blocked on a pipe until the
lock is held, then exec'd with the environment it was sent (supervisor.py drives it).

The launcher runs in the forked child only: its own process group, the death signal armed
(``PR_SET_PDEATHSIG(SIGKILL)``: it dies the moment lockrun does), every descriptor but the
standard streams and its pipes closed, the terminal's foreground group, then one execve. A
failed exec reports its errno on the error pipe, which is close-on-exec: EOF means it ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from lockrun.core.errors import CommandNotRunnable, ExitCode
from lockrun.core.printable import clipped
from lockrun.run.signals import FORWARDED_SIGNALS

PR_SET_PDEATHSIG = 1


def load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        return None


def check_runnable(argv: list[str], shown: str | None = None) -> None:
    """Fail early, before taking the lock, for a command that cannot be executed; the message names
    it as ``shown`` (the program as the run records it: core/masking.py)."""
    if shutil.which(argv[0]):
        return
    # Named in one line: a newline or an escape in it is shown escaped, a long one cut.
    program = clipped(argv[0] if shown is None else shown) or "''"  # lockrun -- "": say what is not found
    raise _at_a_path(argv[0], program) if "/" in argv[0] else _in_path(argv[0], program)


def _at_a_path(path: str, program: str) -> CommandNotRunnable:
    if os.path.isdir(path) or (os.path.exists(path) and not os.access(path, os.X_OK)):
        return CommandNotRunnable(f"{program}: permission denied (not an executable file)", ExitCode.NOT_EXECUTABLE)
    return CommandNotRunnable(f"{program}: command not found", ExitCode.NOT_FOUND)


def _in_path(name: str, program: str) -> CommandNotRunnable:
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate):
            return CommandNotRunnable(f"{program}: permission denied (not executable)", ExitCode.NOT_EXECUTABLE)
    return CommandNotRunnable(f"{program}: command not found in PATH", ExitCode.NOT_FOUND)


def spawn_error(program: str, exc: OSError) -> CommandNotRunnable:
    program = clipped(program)
    if isinstance(exc, FileNotFoundError):
        return CommandNotRunnable(f"{program}: command not found", ExitCode.NOT_FOUND)
    return CommandNotRunnable(f"{program}: cannot execute: {exc.strerror or exc}", ExitCode.NOT_EXECUTABLE)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)


def _close_all_but(keep: set[int]) -> None:
    """Close every descriptor from 3 up except ``keep``."""
    start = 3
    for fd in sorted(keep):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, os.sysconf("SC_OPEN_MAX"))


def launch(
    argv: list[str], program: str | None, base_env: dict[str, str], ctl_r: int, err_w: int,
    prctl: Callable[..., int] | None, parent: int, tty_fd: int | None, output_fds: tuple[int | None, int | None] | None,
) -> NoReturn:
    """The command's process between fork and exec. Never returns.

    Only fd 0-2, the control pipe and the error pipe stay open (with
    ``output_fds``, stdout and stderr become those pipes); the signal
    dispositions lockrun changed are reset, as subprocess does.
    """
    try:
        os.setpgid(0, 0)
        _arm_the_death_signal(prctl, parent)
        _reset_signals()
        _route_output(output_fds)
        _close_all_but({ctl_r, err_w})
        message = read_all(ctl_r)
        if not message:
            os._exit(0)  # lockrun decided not to run the command
        env = {**base_env, **json.loads(message)}
        if tty_fd is not None:
            with contextlib.suppress(OSError):
                os.tcsetpgrp(tty_fd, os.getpid())  # SIGTTOU is still ignored here, as in lockrun
        signal.signal(signal.SIGTTOU, signal.SIG_DFL)
        if program:
            os.execve(program, argv, env)
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        write_all(err_w, f"{exc.errno or 0}:".encode())
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        write_all(err_w, b"0:")
    os._exit(ExitCode.NOT_FOUND)


def _arm_the_death_signal(prctl: Callable[..., int] | None, parent: int) -> None:
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # lockrun died before the death signal was armed
            os._exit(ExitCode.SIGNAL_BASE + signal.SIGKILL)


def _reset_signals() -> None:
    """The dispositions lockrun changed, back to the defaults, as subprocess does."""
    signal.set_wakeup_fd(-1)
    for sig in (*FORWARDED_SIGNALS, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)


def _route_output(output_fds: tuple[int | None, int | None] | None) -> None:
    """With ``output_fds``, stdout and stderr become the pump's pipes."""
    if output_fds is not None:
        for target, fd in ((1, output_fds[0]), (2, output_fds[1])):
            if fd is not None:
                os.dup2(fd, target)
