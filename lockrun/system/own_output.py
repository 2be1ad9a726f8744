"""lockrun's own standard output (what ``status``, ``history``, ``metrics`` … print): when it
cannot be written, one line on stderr and exit 1, never a traceback or 125.

Python reports a failing stdout wherever it happens to flush: as an OSError in the middle of a
table (``>/dev/full``), as ``sys.stdout`` being None when lockrun was started without one
(``>&-``), or as exit status 120 when the last flush at exit fails; rich turns EPIPE into an
exit of its own. :func:`guard` puts one stream in their place that fails in one way,
:class:`OutputFailed`, once: after that, writes are dropped, so nothing fails again at exit.

A pipe that the reader closed early (``lockrun history | head -1``) is not an error: the reader
had what it wanted, and lockrun stops quietly, with the exit code it had (0).
The command's own output under ``lockrun run`` never goes through here: it has fd 1 itself.
"""

from __future__ import annotations

import errno
import io
import os
import select
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

#: What a reader exits with when its output cannot be written (README "Exit codes").
OUTPUT_FAILED_EXIT = 1


class OutputFailed(Exception):
    """lockrun's standard output cannot be written: ``reason`` says why."""

    def __init__(self, reason: str, broken_pipe: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.broken_pipe = broken_pipe


class _StandardOutput(io.RawIOBase):
    """fd 1, for lockrun's own output; ``closed_at_start``: lockrun was started without one (the
    descriptor then holds /dev/null, reserved so that no file of lockrun's lands there)."""

    def __init__(self, closed_at_start: bool) -> None:
        super().__init__()
        self._closed_at_start = closed_at_start
        self.failed = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 1

    def isatty(self) -> bool:
        return not self._closed_at_start and os.isatty(1)

    def write(self, data: ReadableBuffer) -> int:
        size = memoryview(data).nbytes
        if self.failed:
            return size  # said once; the rest goes nowhere, quietly
        if self._closed_at_start:
            self.failed = True
            raise OutputFailed("cannot write to standard output: it was closed when lockrun started")
        while True:
            try:
                return os.write(1, data)
            except BlockingIOError:  # a non-blocking stdout that is full: wait, never spin
                select.select([], [1], [], 1.0)
            except OSError as exc:
                self.failed = True
                raise OutputFailed(f"cannot write to standard output ({exc.strerror or exc}): the output is incomplete",
                                   broken_pipe=exc.errno == errno.EPIPE) from None


def _writes_to_fd_1(stream: object) -> bool:
    """Is ``stream`` a file over descriptor 1 (not a caller's own, such as a test's capture)?"""
    fileno = getattr(stream, "fileno", None)
    try:
        return callable(fileno) and fileno() == 1
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return False


def guard(closed_at_start: bool) -> None:
    """Replace ``sys.stdout`` by a stream over fd 1 whose failures raise OutputFailed.

    Only where ``sys.stdout`` is fd 1 (or missing): a caller that gave lockrun a stream of its
    own (``main()`` called in-process, with its output captured) keeps it."""
    previous = sys.stdout
    if not closed_at_start and previous is not None and not _writes_to_fd_1(previous):
        return
    encoding = getattr(previous, "encoding", None) or "utf-8"
    raw = _StandardOutput(closed_at_start)
    # backslashreplace: text from elsewhere (an undecodable command) never fails to encode.
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors="backslashreplace",
                                  line_buffering=raw.isatty())


def failed(exc: OutputFailed, code: int, say: Callable[[str], None]) -> int:
    """The exit code after ``exc``, said in one line; a pipe closed early is no error."""
    if exc.broken_pipe:
        return code
    say(exc.reason)
    return code or OUTPUT_FAILED_EXIT


def finish(code: int, say: Callable[[str], None]) -> int:
    """Flush what is left; the exit code, 1 if that fails."""
    try:
        sys.stdout.flush()
    except OutputFailed as exc:
        return failed(exc, code, say)
    return code


def reserve_standard_streams() -> set[int]:
    """Put /dev/null, close-on-exec, on any of fd 0-2 lockrun was started without, before anything
    opens a file: none of lockrun's own files (a lock, the ledger, a pipe) can then land there and
    take the command's output (SQLite would plant a /dev/null of its own there, inherited), and
    the command still finds those streams closed, as it would without lockrun. Returns them."""
    closed = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.add(fd)
            opened = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)  # the lowest free descriptor: fd
            if opened != fd:
                os.close(opened)
    return closed


def on_a_terminal() -> bool:
    """Whether lockrun's stdout or stderr is a terminal: then a person reads the output as it comes,
    and the command keeps the terminal (no pipe, no default tail)."""
    return any(os.isatty(fd) for fd in (1, 2) if inherited(fd))


def inherited(fd: int) -> bool:
    """True when ``fd`` is a descriptor lockrun was started with. Everything lockrun opens
    itself is close-on-exec, so a stdout that was closed at start and then reused by one of
    lockrun's own files is not mistaken for an output to pass the command's writes to."""
    import fcntl

    try:
        return not fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    except OSError:
        return False
