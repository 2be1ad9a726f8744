"""The backstop: a kernel timer that SIGKILLs lockrun itself when the lease runs out.

lockrun's main loop stops the command before the lease can expire, but only while
lockrun runs. A lockrun that is stopped (SIGSTOP, a debugger) or starved cannot act,
and its command would run on past a lease another host may hold by then. So from
just before the command starts, a POSIX timer (``timer_create``) is armed with
SIGKILL for lockrun's own process at the lease's end, half the safety margin before
it, and pushed forward by every successful renewal. SIGKILL is the one signal a
stopped process still dies of; when lockrun dies, ``PR_SET_PDEATHSIG`` kills the
command and the watchdog its whole process group (see watchdog.py). The run is
then ``abandoned`` in the ledger and lockrun's exit status is 137.

The timer counts on CLOCK_BOOTTIME, so a host that was suspended fires it at once
on resume instead of giving the command extra time. Re-arming is one system call
(a few microseconds), so renewals cost no process and no CPU worth measuring.

Once lockrun has stopped the command itself (SIGKILL sent to its group, or the
command exited), :meth:`Backstop.disarm` retires the timer for good: releasing
the lock, the ledger and notifications may take longer than the lease had left.

If the kernel refuses the timer (``timer_create`` or ``timer_settime`` fails: a
seccomp filter, a resource limit), lockrun runs the command without it rather than
not at all, but never silently: :attr:`Backstop.error` says why, the runner warns
once and notes it in the ledger row. A re-arm that fails retires the timer, so an
older expiry can never kill lockrun in the middle of a lease it did renew.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes  # at run time only when a Backstop is made: a busy skip does not pay for it

CLOCK_BOOTTIME = 7
SIGEV_SIGNAL = 0

#: A C function of the timer API: it returns 0, or -1 with errno set.
TimerCall = Callable[..., int]


def _timer_api() -> tuple[ModuleType, TimerCall, TimerCall] | None:
    """``(ctypes, timer_create, timer_settime)`` from the C library, or None where there is none.

    The one seam for tests that play a kernel refusing the timer (tests/test_hostile.py)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    for name in (None, "librt.so.1"):  # glibc >= 2.34 has timers in libc itself
        try:
            lib = ctypes.CDLL(name, use_errno=True)
            return ctypes, lib.timer_create, lib.timer_settime
        except (OSError, AttributeError):
            continue
    return None  # pragma: no cover - a libc without POSIX timers


class Backstop:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._retired = False
        self._suspended = False  # between --retry attempts: off until resume (retry.py)
        self._timer: ctypes.c_void_p | None = None
        self.error: str | None = None  # why there is no backstop (after a failed system call)
        api = _timer_api()
        if api is None:
            return
        _, timer_create, self._timer_settime = api
        import ctypes

        class SigEvent(ctypes.Structure):  # struct sigevent: 64 bytes on every Linux ABI
            _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                        ("_pad", ctypes.c_int * 12)]

        class TimeSpec(ctypes.Structure):
            _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]

        class ITimerSpec(ctypes.Structure):
            _fields_ = [("interval", TimeSpec), ("value", TimeSpec)]

        self._TimeSpec: type[ctypes.Structure] = TimeSpec
        self._ITimerSpec: type[ctypes.Structure] = ITimerSpec
        event = SigEvent(signo=signal.SIGKILL, notify=SIGEV_SIGNAL)
        timer = ctypes.c_void_p()
        if timer_create(CLOCK_BOOTTIME, ctypes.byref(event), ctypes.byref(timer)) == 0:
            self._timer = timer
        else:
            self.error = f"timer_create failed: {_errno_text()}"

    def _set(self, seconds: float) -> bool:
        import ctypes  # imported by __init__ already: only a name to look up

        whole = int(seconds)
        spec = self._ITimerSpec(value=self._TimeSpec(whole, int((seconds - whole) * 1e9)))
        return self._timer_settime(self._timer, 0, ctypes.byref(spec), None) == 0

    def arm(self, at: float) -> None:
        """Kill lockrun at monotonic time ``at`` unless armed again or disarmed first."""
        with self._lock:
            if self._timer is None or self._retired or self._suspended:
                return
            # An all-zero time would disarm the timer: a moment already past fires at once.
            if not self._set(max(1e-9, at - time.monotonic())):
                self.error = f"timer_settime failed: {_errno_text()}"
                self._set(0.0)  # never let an older expiry fire in the middle of a renewed lease
                self._retired = True

    def suspend(self) -> None:
        """Off until :meth:`resume`: the command is gone or going, and what follows (the ledger, a
        release) may outlast the lease; renewals no longer re-arm it (thread-safe). A run that
        goes on to another ``--retry`` attempt resumes it; any other run never does."""
        with self._lock:
            if self._timer is not None and not self._retired:
                self._set(0.0)
            self._suspended = True

    def resume(self, at: float) -> None:
        """Armed again for ``at`` (monotonic), and by every renewal after: the lease is kept on
        through a ``--retry`` pause and the next attempt (docs/operating.md "Retries and jitter")."""
        with self._lock:
            self._suspended = False
        self.arm(at)

    def disarm(self) -> None:
        """Retire the timer for good: lockrun has stopped the command itself (thread-safe)."""
        with self._lock:
            if self._timer is not None and not self._retired:
                self._set(0.0)
            self._retired = True


def _errno_text() -> str:
    """What the C library's errno says after a failed timer call."""
    import ctypes

    return os.strerror(ctypes.get_errno()) or "unknown error"
