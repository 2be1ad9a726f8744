"""How a lost lease reaches the code inside a block: LeaseLost, raised in the thread that entered it.

- **The main thread**: a real-time signal (:data:`INTERRUPT_SIGNAL`), sent to that thread alone
  (``pthread_kill``); its handler raises LeaseLost. A blocking call is cut short as Ctrl-C cuts it:
  ``time.sleep``, a socket read, ``select``, a lock's or a thread's wait end in EINTR, Python runs
  the handler, the exception comes out of the call. The handler is installed while a block of the
  main thread asks for it and the one found before is put back after the last (unless someone
  replaced ours meanwhile: theirs stays). A signal of that number that lockrun did not send goes
  to that previous handler (none, or the default: ignored).
- **Another thread**: ``PyThreadState_SetAsyncExc``, the C API's way to raise an exception in
  another thread. It is raised when that thread next runs Python code: a blocking C call there
  (``time.sleep(600)``, a socket read without a timeout) ends first.
- **Never inside lockrun's own entry or exit of a block** (a delivery that finds the thread there,
  a nested block's, is deferred and tried again 20 ms later): the exit records the run and raises
  LeaseLost itself; an exception thrown into the middle of a release could leave a lease held.

What cannot be reached: code that never returns to Python (a C extension's long loop, a blocking
call in another thread). Then the lease is not renewed past its end, and at the lease's end the
run is recorded ``lost`` without waiting for the block (block.py).
"""

from __future__ import annotations

import collections
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, Protocol

from lockrun.api.errors import LeaseLost

#: The signal that interrupts the main thread: a real-time one, which nothing in Python's standard
#: library uses and which the kernel queues rather than merges.
INTERRUPT_SIGNAL = signal.SIGRTMAX - 7

#: The code objects of lockrun's own entry and exit of a block (block.py registers them): no
#: LeaseLost is raised while one of them is on the thread's stack.
TRANSITIONS: set[CodeType] = set()


def in_transition(frame: FrameType | None) -> bool:
    """Whether ``frame`` or one of its callers is lockrun entering or leaving a block."""
    while frame is not None:
        if frame.f_code in TRANSITIONS:
            return True
        frame = frame.f_back
    return False


class Teller(Protocol):
    """How one block is told its lease is lost: :class:`Target` for a thread, aio.TaskTarget for a task."""

    def arm(self) -> None:
        """From now on the block may be told (called by the block's own thread, as it enters)."""

    def deliver(self) -> bool:
        """Tell it (called by the watcher); False: try again a little later."""

    def disarm(self) -> None:
        """Nothing more is told (called as the block leaves); idempotent."""


class Target:
    """One block's thread, and the LeaseLost to raise there once its lease is lost."""

    def __init__(self, thread_id: int, error: Callable[[], LeaseLost], *, main: bool) -> None:
        self.thread_id = thread_id
        self.error = error  # the exception to raise (made when it is raised)
        self.main = main  # through the signal handler (else: an asynchronous exception)
        self.armed = False  # between the block's entry and its exit
        self.delivered = False  # raised (main thread), or handed to the interpreter (another thread)
        # Held by the watcher while it delivers and by the block's thread while it disarms: a delivery
        # decided before the exit began is never made after it (the signal handler takes no lock).
        self.lock = threading.Lock()

    def wanted(self, frame: FrameType | None) -> bool:
        return self.armed and not self.delivered and not in_transition(frame)

    def arm(self) -> None:
        arm(self)

    def deliver(self) -> bool:
        return deliver(self)

    def disarm(self) -> None:
        if self.armed:
            disarm(self)


class Delivered(LeaseLost):
    """What another thread gets: the interpreter makes it without arguments, in that thread, as it
    raises it; its message is the one :func:`deliver` left there for it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:  # made again from its fields (a copy, a pickle)
            super().__init__(*args, **kwargs)
            return
        error = _ASYNC_ERRORS.pop(threading.get_ident(), None) or LeaseLost()
        super().__init__(str(error), name=error.name, reason=error.reason)


#: thread id -> the LeaseLost its asynchronous exception will carry (the interpreter passes none).
_ASYNC_ERRORS: dict[int, LeaseLost] = {}


def _async_exc() -> Callable[[int, object], int]:
    """``PyThreadState_SetAsyncExc(thread id, exception type or NULL)``: how many threads it reached
    (0: that thread is gone). Called through pythonapi, so with the GIL held throughout."""
    import ctypes  # only a block whose lease is lost in a thread other than the main one needs it

    set_async = ctypes.pythonapi.PyThreadState_SetAsyncExc
    set_async.argtypes = (ctypes.c_ulong, ctypes.py_object)
    set_async.restype = ctypes.c_int

    def call(thread_id: int, exc_type: object) -> int:
        # None cancels what was scheduled: NULL, not Py_None.
        return int(set_async(thread_id, ctypes.py_object(exc_type) if exc_type is not None else ctypes.py_object()))

    return call


class _MainThread:
    """The handler of INTERRUPT_SIGNAL, while blocks of the main thread want it; one per process.

    The handler runs on the main thread between two bytecodes, possibly while that thread holds any
    lock of ours: it takes none. It learns what was sent for whom from ``sent`` (a deque: append and
    popleft are atomic), one entry per signal sent; Python may run it once for several signals."""

    def __init__(self) -> None:
        self.users = 0
        self.previous: Any = None
        self.sent: collections.deque[Target] = collections.deque()

    def install(self) -> bool:
        """Ours from now on (main thread only); False where no handler can be installed."""
        if not self.ours():
            try:
                self.previous = signal.signal(INTERRUPT_SIGNAL, self.handle)
            except (ValueError, OSError):  # not the main interpreter, or the signal is refused
                return False
        self.users += 1
        return True

    def uninstall(self) -> None:
        """One user fewer; after the last, the previous handler is back. Only the main thread may
        put it back: a block left from another thread (a generator closed there) leaves ours in
        place, for the next block of the main thread to find."""
        self.users -= 1
        if self.users > 0 or threading.current_thread() is not threading.main_thread():
            return
        # A signal sent but not yet handled would find the previous handler (the default one ends
        # the process): wait for ours to take it. A signal to this thread is handled within
        # microseconds; the sleep is cut short by it.
        for _ in range(200):
            if not self.sent:
                break
            time.sleep(0.005)  # the handler raises only for armed targets, and there is none
        if signal.getsignal(INTERRUPT_SIGNAL) == self.handle:  # someone else's handler stays
            signal.signal(INTERRUPT_SIGNAL, self.previous if self.previous is not None else signal.SIG_DFL)
        self.previous = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        popped: list[Target] = []
        while True:
            try:
                popped.append(self.sent.popleft())
            except IndexError:
                break
        if not popped:  # not ours
            previous = self.previous
            if callable(previous) and previous != self.handle:
                previous(signum, frame)
            return
        for target in popped:
            if target.wanted(frame):
                target.delivered = True
                raise target.error()

    def send(self, target: Target) -> None:
        """Signal the main thread for ``target``, unless a signal for it is still unhandled."""
        if target in self.sent:
            return
        self.sent.append(target)
        try:
            signal.pthread_kill(target.thread_id, INTERRUPT_SIGNAL)
        except (OSError, ValueError):
            with contextlib.suppress(ValueError):
                self.sent.remove(target)

    def ours(self) -> bool:
        """Whether our handler is the one installed (another may have replaced it since)."""
        return bool(signal.getsignal(INTERRUPT_SIGNAL) == self.handle)


_MAIN = _MainThread()


def arm(target: Target) -> None:
    """From now on ``target`` may be delivered to. Called by the block's own thread; for the main
    thread, installs the handler (falls back to an asynchronous exception where it cannot)."""
    if target.main and not _MAIN.install():
        target.main = False
    target.armed = True


def disarm(target: Target) -> None:
    """Nothing more is raised for ``target`` (called by the block's own thread, as it leaves)."""
    with target.lock:
        target.armed = False
        if not target.main and target.delivered:
            # Scheduled but maybe not raised yet (the thread came here first): cancelled, so that it
            # is not raised later, somewhere else.
            _async_exc()(target.thread_id, None)
            _ASYNC_ERRORS.pop(target.thread_id, None)
    if target.main:
        _MAIN.uninstall()


def deliver(target: Target) -> bool:
    """Raise ``target``'s LeaseLost in its thread (called by the lease's watcher); False when it
    must be tried again later: the thread is in lockrun's entry or exit of a block, or the main
    thread has not handled the signal yet (the handler may defer it for that same reason)."""
    with target.lock:
        if not target.armed or target.delivered:
            return True
        if target.main and _MAIN.ours():
            _MAIN.send(target)
            return target.delivered
        # Everything made first: between the look at the thread's stack and the scheduling, this
        # thread keeps the GIL (no switch comes sooner than the switch interval, 5 ms, far above this).
        error, set_async = target.error(), _async_exc()
        frame = sys._current_frames().get(target.thread_id)
        if frame is None:
            return True  # that thread is gone: nobody to tell
        if in_transition(frame):
            return False
        _ASYNC_ERRORS[target.thread_id] = error
        target.delivered = True
        if set_async(target.thread_id, Delivered) == 0:
            _ASYNC_ERRORS.pop(target.thread_id, None)
        return True


def after_fork_in_child() -> None:
    """A child forked inside a block holds none of its parent's leases: nothing is owed to it."""
    _MAIN.sent.clear()
    _ASYNC_ERRORS.clear()
