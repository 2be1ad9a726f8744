"""Waiting for a busy local lock without polling: a helper thread sleeps in the kernel.

A kernel lock has no wake-up call, but a blocked lock request is one: each helper thread
opens the lock file on a descriptor of its own and asks for an open-file-description lock
with ``F_OFD_SETLKW``, which sleeps until the holder lets go (releases, or dies however it
dies). The moment it is granted the helper gives it back (``F_UNLCK``: held for a few
microseconds, never past that line) and wakes the waiter, whose next try takes the lock the
ordinary way (``lockf``). An OFD lock conflicts with the process's own ``lockf`` lock too, so
a helper still blocked when its run takes the lock just keeps sleeping until that run lets go.

Two rules of POSIX locks shape the rest:

- Closing *any* descriptor of a file drops every ``lockf`` lock the process holds on it, so a
  helper never closes its descriptor: :meth:`KernelWaits.forget` closes the descriptors of
  finished helpers only for files the caller says it does not hold.
- A thread blocked in ``fcntl`` cannot be called back, so the caller enforces the deadline:
  :meth:`KernelWaits.wait` returns at its timeout and leaves the helper blocked, to be
  reused by the next wait (or, granted later, to give the lock straight back).

The waiter sleeps in ``select`` on a pipe the helpers write to. For as long as it sleeps, the
pipe is also Python's signal wake-up fd, so a SIGTERM ends the sleep at once (Python retries
an interrupted ``select`` after running the handler); the signal bytes are passed on to the
wake-up fd that was there before (lockrun's signal relay), which keeps its own wake-ups.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import struct
import threading
import time
from pathlib import Path

from lockrun.system.safefs import UnsafePath, open_regular

_FLOCK = "hhqqi4x"  # struct flock on 64-bit Linux: type, whence, start, len, pid (+ padding)
_WRITE_LOCK = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)  # the whole file, as lockf takes it
_UNLOCK = struct.pack(_FLOCK, fcntl.F_UNLCK, os.SEEK_SET, 0, 0, 0)
#: What a helper writes to the pipe: no signal is numbered 0, so it is told apart from a signal's byte.
WOKEN = b"\0"
#: The most lock files one waiter watches (the first slots of a --slots lock); a release of a slot
#: beyond them is noticed at the next try, at most a second later (the caller's timeout).
MAX_WATCHED = 64
#: After this many wake-ups in a row that came at once (a lock file nobody holds, yet the try
#: said busy), each wait lasts at least QUICK_FLOOR_S: never a busy loop, whatever the files say.
QUICK_IN_A_ROW, QUICK_FLOOR_S = 3, 0.005


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class _Helper:
    """One thread blocked in ``F_OFD_SETLKW`` on one lock file, on a descriptor it never closes."""

    def __init__(self, fd: int, wake_fd: int) -> None:
        self.fd = fd
        self.identity = _identity(os.fstat(fd))
        self.done = threading.Event()
        self.over = threading.Event()  # done, and the pipe written to: it will never touch the pipe again
        self._wake_fd = wake_fd
        threading.Thread(target=self._block, name="lockrun-local-wait", daemon=True).start()

    def _block(self) -> None:
        with contextlib.suppress(ValueError, OSError):  # signals are the main thread's business
            signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            fcntl.fcntl(self.fd, fcntl.F_OFD_SETLKW, _WRITE_LOCK)
            fcntl.fcntl(self.fd, fcntl.F_OFD_SETLK, _UNLOCK)  # granted: given back at once, held no longer
        except OSError:
            pass  # cannot wait on this file (EDEADLK, ENOLCK...): the waiter's timeout still bounds the wait
        self.done.set()
        with contextlib.suppress(OSError):  # a full pipe already wakes the waiter
            os.write(self._wake_fd, WOKEN)
        self.over.set()


class KernelWaits:
    """The helpers of one backend, and the pipe they wake the waiter through."""

    def __init__(self) -> None:
        self._helpers: dict[Path, _Helper] = {}
        self._finished: list[_Helper] = []  # replaced helpers: their descriptors wait for forget()
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._quick = 0

    def wait(self, paths: list[Path], timeout: float) -> None:
        """Sleep until one of the lock files at ``paths`` is let go by its holder, a signal comes,
        or ``timeout`` passes; never longer. A file that cannot be watched is waited for by time."""
        started = time.monotonic()
        watched = [self._watch(path) for path in paths[:MAX_WATCHED]]
        if None in watched:  # a lock file gone (unlock --force): the next try makes it, in the old poll's time
            timeout = min(timeout, QUICK_FLOOR_S)
        floor = QUICK_FLOOR_S if self._quick >= QUICK_IN_A_ROW else 0.0
        woken = self.sleep(timeout, floor)
        self._quick = self._quick + 1 if woken and time.monotonic() - started < 0.002 else 0

    def _watch(self, path: Path) -> bool | None:
        """A helper asleep on the lock file at ``path``: True; None when no file is there, False
        when it cannot be opened (the waiter's timeout bounds that wait)."""
        helper = self._helpers.get(path)
        try:
            current = _identity(os.lstat(path))
        except OSError:
            return None  # gone (unlock --force): the next try creates it
        if helper is not None and not helper.done.is_set() and helper.identity == current:
            return True  # still asleep on the file that is there: it will wake us
        if helper is not None:
            self._finished.append(helper)
            del self._helpers[path]
        try:
            fd = open_regular(path, os.O_RDWR)
        except (OSError, UnsafePath):
            return False  # the try said what is wrong with it, or will
        self._helpers[path] = _Helper(fd, self._write_fd)
        return True

    def sleep(self, timeout: float, floor: float = 0.0) -> bool:
        """Sleep up to ``timeout`` (at least ``floor``) in ``select`` on the pipe; a signal ends it.
        Whether a helper woke us."""
        try:
            previous = signal.set_wakeup_fd(self._write_fd)
        except ValueError:  # not the main thread: signals cannot reach this sleep anyway
            previous = None
        try:
            if floor:
                time.sleep(min(floor, timeout))
            select.select([self._read_fd], [], [], max(0.0, timeout - floor))
        finally:
            if previous is not None:
                signal.set_wakeup_fd(previous)
            data = self._drain()
        signals = data.replace(WOKEN, b"")
        if signals and previous is not None and previous >= 0:
            with contextlib.suppress(OSError):  # the relay's own wake-up, as if it had been there all along
                os.write(previous, signals)
        return WOKEN in data

    def _drain(self) -> bytes:
        chunks = []
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._read_fd, 512):
                chunks.append(chunk)
        return b"".join(chunks)

    def close(self) -> bool:
        """Close the pipe and every helper's descriptor, unless a helper still sleeps (it will write
        to the pipe when it wakes): whether all is closed. Only for a caller that holds none of the
        lock files (a process that takes a name again and again must not keep a pipe per name)."""
        helpers = [*self._finished, *self._helpers.values()]
        if not all(helper.over.is_set() for helper in helpers):
            return False
        self.forget(set())
        for fd in (self._read_fd, self._write_fd):
            os.close(fd)
        return True

    def forget(self, held: set[tuple[int, int]]) -> None:
        """Close the descriptors of finished helpers, except on files in ``held`` (the (device, inode)
        of each lock file the caller holds): closing one would drop the caller's lock."""
        keep = []
        for helper in [*self._finished, *self._helpers.values()]:
            if helper.done.is_set() and helper.identity not in held:
                os.close(helper.fd)
            else:
                keep.append(helper)
        self._helpers = {path: h for path, h in self._helpers.items() if h in keep}
        self._finished = [h for h in self._finished if h in keep]
