"""The signal relay: signals sent to lockrun reach the command's whole process group, and
every wake-up of the main loop arrives through one self-pipe.

- SIGTERM, SIGINT and SIGHUP are caught from before the lock is taken (one that comes
  while lockrun waits for the lock ends the wait) and forwarded to the command's group
  as soon as there is one: the launcher prepared ahead of the exec (supervisor.py) dies
  of them as the command would.
- The signal module's wakeup fd, the keeper's :meth:`SignalRelay.wake` and SIGCHLD (caught,
  not ignored, so that the child's exit writes to the wakeup fd too) all write to one
  pipe: the main loop sleeps in ``select`` on it and costs no CPU while idle.
- While a waiter blocks on the backend (:meth:`SignalRelay.interrupting`), a forwarded signal
  raises WaitInterrupted out of the blocking read, as SIGINT raises KeyboardInterrupt: a wait
  that may last a whole lease ends at once.
- SIGTTOU is ignored, so that lockrun can hand the terminal to the command and take it back.

What a forwarded signal means for the command's deadline (SIGKILL after ``--kill-after``)
is decided by the main loop (watch.py), beside lockrun's other reasons to stop it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from lockrun.core.errors import WaitInterrupted

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to the process group ``pgid``; a group that is gone already is no error."""
    try:
        os.killpg(pgid, signum)
    except OSError as exc:
        if exc.errno != errno.ESRCH:
            raise


class SignalRelay:
    def __init__(self) -> None:
        self.received: list[int] = []  # signals sent to lockrun, in order
        self._pgid: int | None = None  # where they are forwarded to
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._old_handlers: dict[int, Any] = {}
        self._old_wakeup_fd: int | None = None
        self._interrupting = False  # inside interrupting(): a forwarded signal raises WaitInterrupted

    def install(self) -> None:
        """Catch the forwarded signals from now on (also while waiting for the lock)."""
        self._old_wakeup_fd = signal.set_wakeup_fd(self._wake_w)
        for sig in FORWARDED_SIGNALS:
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        self._old_handlers[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, self._on_sigchld)
        self._old_handlers[signal.SIGTTOU] = signal.signal(signal.SIGTTOU, signal.SIG_IGN)

    def forward_to(self, pgid: int | None) -> None:
        """Forward what comes from now on to the group ``pgid`` (None: to nobody)."""
        self._pgid = pgid

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if self._pgid is not None:
            signal_group(self._pgid, signum)
        if self._interrupting:
            self._interrupting = False  # once: what runs after the wait is never interrupted
            raise WaitInterrupted(signum)

    @contextlib.contextmanager
    def interrupting(self) -> Iterator[None]:
        """Around one blocking call (a waiter's BLPOP): a forwarded signal that arrives inside, or
        arrived before, raises WaitInterrupted, so that the call ends at once; the signal is
        recorded and forwarded as ever. The caller keeps nothing the exception may cut short
        (the backend drops the connection it blocked on)."""
        self._interrupting = True  # first, then the check: a signal in between raises too
        try:
            if self.received:
                self._interrupting = False
                raise WaitInterrupted(self.received[0])
            yield
        finally:
            self._interrupting = False

    def _on_sigchld(self, _signum: int, _frame: FrameType | None) -> None:
        pass  # the wakeup fd has already woken the loop

    def wake(self) -> None:
        """Wake the main loop (thread-safe; called by the keeper)."""
        with contextlib.suppress(BlockingIOError):  # the pipe is full: the loop is already awake
            os.write(self._wake_w, b"k")

    def wait(self, until: float | None) -> None:
        """Sleep until something happens or the monotonic time ``until`` (None: 1 s)."""
        timeout = 1.0 if until is None else max(0.0, until - time.monotonic())
        ready, _, _ = select.select([self._wake_r], [], [], timeout)
        if ready:
            try:
                while os.read(self._wake_r, 512):
                    pass
            except BlockingIOError:
                pass

    def close(self) -> None:
        """Put back the handlers and the wakeup fd lockrun found; close the pipe."""
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()
        if self._old_wakeup_fd is not None:
            signal.set_wakeup_fd(self._old_wakeup_fd)
            self._old_wakeup_fd = None
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
