"""Fakes for the unit layer: a clock that moves only when told to, an in-memory backend, and
the pieces of a run that touch processes (the supervisor, its signal relay, the backstop).

Nothing here starts a process, sends a signal, arms a timer or sleeps: time is the
:class:`FakeClock`'s, and whatever "happens meanwhile" (a holder releasing the lock, the
backend going down, the command exiting, a signal reaching lockrun) is an action scheduled
on it, run when the clock passes its moment. The fakes keep the real code's decisions: the
backend is a small model of the lock (expiry, owner token, fencing, ``--once`` keys, preempt
requests, release wake-ups), and the supervisor's kill schedule is the real one.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import signal
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from lockrun.backends.audit import BackendAudit
from lockrun.backends.pause import Paused, PauseRequest
from lockrun.backends.protocol import Backend
from lockrun.backends.values import LOST, PREEMPTED, RENEWED, Duplicate, FleetRecord, Holder, Lease, OnceKey
from lockrun.core.clock import iso_ago
from lockrun.core.errors import BackendUnavailable, WaitInterrupted
from lockrun.run.backstop import Backstop
from lockrun.run.keeper import Keeper
from lockrun.run.signals import SignalRelay
from lockrun.run.supervisor import ChildExit, Supervisor

T = TypeVar("T")

# A monotonic clock starts anywhere; not at 0, so that a time mistaken for "not set" shows.
START = 1000.0
# More wake-ups of the main loop than any scenario needs: the loop spins instead of sleeping.
MAX_WAKEUPS = 10_000


class FakeClock:
    """A monotonic clock that moves only when told to; actions scheduled on it run at their moment."""

    def __init__(self, start: float = START) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self._events: list[tuple[float, int, Callable[[], object]]] = []
        self._order = itertools.count()  # actions due at one moment run in the order they were scheduled

    def __call__(self) -> float:
        return self.now

    def call_at(self, at: float, action: Callable[[], object]) -> None:
        heapq.heappush(self._events, (at, next(self._order), action))

    def advance_to(self, target: float, until: Callable[[], bool] = lambda: False) -> None:
        """Move to ``target``, running every action due on the way at its moment; stop right after
        an action that makes ``until`` true. The clock never goes back."""
        while self._events and self._events[0][0] <= target:
            at, _, action = heapq.heappop(self._events)
            self.now = max(self.now, at)
            action()
            if until():
                return
        self.now = max(self.now, target)

    def sleep(self, seconds: float) -> None:
        """A ``time.sleep`` that only moves the clock (and remembers that it was asked)."""
        self.sleeps.append(seconds)
        self.advance_to(self.now + seconds)


class Call(NamedTuple):
    """One call the fake backend received: when, which method, and its telling argument."""

    at: float
    method: str
    arg: object = None


@dataclass
class HeldLock:
    token: str
    expires_at: float
    info: dict[str, str]
    fencing_token: int
    preempted_by: str | None = None  # a --replace request waiting for the holder's next renewal
    stops_after: float | None = None  # a rival that releases this long after it is asked to stop


class FakeBackend(Backend):
    """An in-memory lock with the backend's semantics, on a fake clock.

    Each call acts at once and its reply takes ``latency`` (actions due meanwhile run); set
    ``down`` (:meth:`go_down`) to make every call raise BackendUnavailable, or queue errors for
    the next calls of one method in ``failures``. ``lose_acquire_reply``: the next acquire takes
    the lock and then raises it, like a reply lost on the way back. ``calls`` records every call.
    Subclassing the protocol makes mypy check every method against it.
    """

    def __init__(self, clock: FakeClock, *, latency: float = 0.0) -> None:
        self.name = "fake"
        self.clock = clock
        self.latency = latency
        self.locks: dict[str, HeldLock] = {}
        self.once_done: dict[str, float] = {}  # --once key -> remembered until
        self.calls: list[Call] = []
        self.failures: dict[str, list[BackendUnavailable]] = {}
        self.down: str | None = None
        self.lose_acquire_reply: BackendUnavailable | None = None
        self.fleet_rows: list[FleetRecord] = []
        self._fencing: dict[str, int] = {}
        self._wakeups: dict[str, int] = {}  # releases announced and not yet consumed by a waiter
        self.signals: list[int] = []  # signals that reached lockrun (signal_at): they end a wait

    # -- test set-up ------------------------------------------------------------------

    def hold(
        self, name: str, *, token: str = "rival-token", ttl: float = 60.0, host: str = "web2", pid: int = 4242,
        run_id: str = "0123456789abcdef", started_ago: float = 90.0, release_at: float | None = None,
        stops_after: float | None = None, renewing: bool = False,
    ) -> None:
        """Another run holds ``name`` from now on: for ``ttl`` seconds, or as long as it renews
        (``renewing``: every TTL/3), unless it releases at ``release_at``, or ``stops_after``
        seconds after a ``--replace`` asks it to stop."""
        info = {
            "token": token, "run_id": run_id, "host": host, "pid": str(pid), "command": json.dumps(["backup"]),
            "started_at": iso_ago(started_ago), "heartbeat_at": iso_ago(1.0), "ttl_ms": str(int(ttl * 1000)),
        }
        self.locks[name] = HeldLock(token, self.clock.now + ttl, info, self._next_fencing(name),
                                    stops_after=stops_after)
        if release_at is not None:
            self.clock.call_at(release_at, lambda: self._let_go(name, token))
        if renewing:
            self._rival_renews(name, token, ttl)

    def _rival_renews(self, name: str, token: str, ttl: float) -> None:
        def renew() -> None:
            held = self._held(name)
            if held is not None and held.token == token:
                held.expires_at = self.clock.now + ttl
                self.clock.call_at(self.clock.now + ttl / 3, renew)

        self.clock.call_at(self.clock.now + ttl / 3, renew)

    def signal_at(self, at: float, signum: int = signal.SIGTERM) -> None:
        """A signal reaches lockrun at ``at``: a wait under way then raises WaitInterrupted, as the
        signal relay makes the real one do."""
        self.clock.call_at(at, lambda: self.signals.append(signum))

    def go_down(self, why: str = "connection refused") -> None:
        self.down = why

    def methods(self) -> list[str]:
        return [call.method for call in self.calls]

    def calls_of(self, method: str) -> list[Call]:
        return [call for call in self.calls if call.method == method]

    # -- the protocol -----------------------------------------------------------------

    def acquire(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None = None,
        slots: int = 1, last_try: bool = True, once_every: float | None = None,
    ) -> Lease | Holder | Duplicate:
        # once_every is judged by the real backends (tests/test_once_every.py), never here.
        sent_at = self._call("acquire", last_try)
        if once is not None and self.once_done.get(once.key, -1.0) > self.clock.now:
            return self._reply(Duplicate(name, once.key))
        held = self._held(name)
        if held is not None and held.token != token:
            return self._reply(Holder.from_fields(name, held.info, token=held.token,
                                                  ttl_remaining_s=round(held.expires_at - self.clock.now, 3)))
        self.locks[name] = HeldLock(token, sent_at + ttl, dict(info), self._next_fencing(name))
        lease = self._reply(Lease(name, token, self.locks[name].fencing_token, ttl, sent_at, once, slots))
        if self.lose_acquire_reply is not None:
            error, self.lose_acquire_reply = self.lose_acquire_reply, None
            raise error
        return lease

    def renew(self, lease: Lease, heartbeat_at: str, child_pid: int | None) -> str:
        self._call("renew", child_pid)
        held = self._held(lease.name)
        if held is None or held.token != lease.token:
            return self._reply(LOST)
        if held.preempted_by is not None:
            return self._reply(PREEMPTED)
        held.expires_at = self.clock.now + lease.ttl
        return self._reply(RENEWED)

    def attempt_over(self, lease: Lease, holder: dict[str, str], record: FleetRecord) -> str:
        self.fleet_rows.append(record)
        return self.renew(lease, "", None)

    def attempt_begins(self, lease: Lease, holder: dict[str, str], start: dict[str, str]) -> str:
        return self.renew(lease, "", None)

    def release(
        self, lease: Lease, succeeded: bool = False, hold_s: float = 0.0, hold_until: str = "",
        record: FleetRecord | None = None,
    ) -> bool:
        self._call("release", succeeded)
        if record is not None:
            self.fleet_rows.append(record)
        released = self._let_go(lease.name, lease.token)
        if released and succeeded and lease.once is not None:
            self.once_done[lease.once.key] = self.clock.now + lease.once.remember_s
        return self._reply(released)

    def release_token(self, name: str, token: str, slots: int = 1) -> bool:
        self._call("release_token", token)
        return self._reply(self._let_go(name, token))

    def preempt(self, name: str, requester: str, ttl: float) -> bool:
        self._call("preempt", ttl)
        held = self._held(name)
        if held is None:
            return self._reply(False)
        held.preempted_by = requester
        if held.stops_after is not None:
            token = held.token
            self.clock.call_at(self.clock.now + held.stops_after, lambda: self._let_go(name, token))
        return self._reply(True)

    def clear(self, name: str, token: str, record: FleetRecord | None = None) -> bool:
        self._call("clear", token)
        return self._reply(self._let_go(name, token))

    def clear_foreign(self, name: str) -> bool:
        self._call("clear_foreign")
        return self._reply(False)

    def wait_for_release(
        self, name: str, timeout: float,
        interruptible: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        """Like BLPOP on the wake-up list: at once if a release was announced, else until one is
        or ``timeout`` passes (an expiry announces nothing); a signal (:meth:`signal_at`) raises
        WaitInterrupted inside ``interruptible``, at its moment."""
        self.calls.append(Call(self.clock.now, "wait_for_release", round(timeout, 6)))
        with interruptible():
            if not self._wakeups.get(name):
                self.clock.advance_to(self.clock.now + timeout,
                                      until=lambda: bool(self._wakeups.get(name)) or bool(self.signals))
            if self.signals:
                raise WaitInterrupted(self.signals[0])
        if self._wakeups.get(name):
            self._wakeups[name] -= 1

    def lock_names(self) -> list[str]:
        return sorted(name for name in list(self.locks) if self._held(name) is not None)

    def fleet_record(self) -> None:
        return None

    def pause(self, name: str, request: PauseRequest) -> Paused:
        raise NotImplementedError("pauses are tested through real processes (tests/test_pause.py)")

    def resume(self, name: str) -> bool:
        return False

    def pauses(self, names: list[str] | None = None) -> dict[str, Paused]:
        return {}

    def cadences(self, names: list[str]) -> dict[str, object]:
        return {}

    def known_names(self) -> list[str]:
        return self.lock_names()

    def holders(self, names: list[str] | None = None) -> list[Holder]:
        return [
            Holder.from_fields(name, held.info, token=held.token, ttl_remaining_s=held.expires_at - self.clock.now)
            for name in (names if names is not None else self.lock_names())
            if (held := self._held(name)) is not None
        ]

    def eviction_warnings(self) -> list[str]:
        return []

    def audit(self, probe_ttl: float | None = None) -> BackendAudit:
        return BackendAudit("fake", "memory")

    def close(self) -> None:
        self.calls.append(Call(self.clock.now, "close"))

    # -- the model --------------------------------------------------------------------

    def _call(self, method: str, arg: object = None) -> float:
        """Record the call; it reaches the backend at once (or fails): return when it was sent."""
        sent_at = self.clock.now
        self.calls.append(Call(sent_at, method, arg))
        if self.down is not None:
            raise BackendUnavailable(self.down)
        queued = self.failures.get(method)
        if queued:
            raise queued.pop(0)
        return sent_at

    def _reply(self, result: T) -> T:
        """The reply, after ``latency`` (what is due meanwhile happens meanwhile)."""
        self.clock.advance_to(self.clock.now + self.latency)
        return result

    def _held(self, name: str) -> HeldLock | None:
        """The lock of ``name`` if it has not expired (an expired one is gone, as in Redis)."""
        held = self.locks.get(name)
        if held is not None and held.expires_at <= self.clock.now:
            del self.locks[name]
            return None
        return held

    def _let_go(self, name: str, token: str) -> bool:
        held = self._held(name)
        if held is None or held.token != token:
            return False
        del self.locks[name]
        self._wakeups[name] = self._wakeups.get(name, 0) + 1  # one waiter wakes
        return True

    def _next_fencing(self, name: str) -> int:
        self._fencing[name] = self._fencing.get(name, 0) + 1
        return self._fencing[name]


class Reports(list[tuple[str, str]]):
    """A Report callable that keeps what a run said: ``(level, message)`` in order."""

    def __call__(self, level: str, message: str) -> None:
        self.append((level, message))

    def at(self, level: str) -> list[str]:
        return [message for said, message in self if said == level]


# -- the parts of a run that touch processes ------------------------------------------------


class FakeRelay(SignalRelay):
    """The signal relay without signal handlers or a pipe: :meth:`wait` moves the fake clock to
    the moment asked for, and returns early when something wakes the main loop."""

    def __init__(self, clock: FakeClock) -> None:  # not the real __init__: no pipe to open
        self.received = []
        self.waits: list[float | None] = []  # every moment the main loop asked to sleep until
        self._clock = clock
        self._woken = False
        self._interrupting = False

    def wake(self) -> None:
        self._woken = True

    def wait(self, until: float | None) -> None:
        self.waits.append(until)
        if len(self.waits) > MAX_WAKEUPS:
            raise AssertionError(f"the main loop woke up {MAX_WAKEUPS} times: it spins instead of sleeping")
        if not self._woken:
            target = self._clock.now + 1.0 if until is None else until
            self._clock.advance_to(target, until=lambda: self._woken)
        self._woken = False

    def close(self) -> None:
        pass


class FakeSupervisor(Supervisor):
    """The real supervisor's kill schedule, with a simulated command instead of a process group.

    Signals lockrun sends to the group are recorded in ``sent`` as ``(time, signal)``; signals
    that reach lockrun (:meth:`signal_lockrun_at`) are forwarded, as the relay does, and recorded
    in ``forwarded``. The command dies ``exit_delay`` after a signal in ``dies_of`` (SIGKILL:
    at once), or exits by itself with ``returncode`` at ``exits_at``.
    """

    def __init__(
        self, clock: FakeClock, *, dies_of: Iterable[int] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP),
        exit_delay: float = 0.0, exits_at: float | None = None, returncode: int = 0,
    ) -> None:
        super().__init__(["fake-command"], {}, clock=clock)
        self.signals.close()  # the real relay's pipe: nothing waits on it here
        self.relay = FakeRelay(clock)
        self.signals = self.relay
        self.clock = clock
        self.dies_of = frozenset(dies_of)
        self.exit_delay = exit_delay
        self.sent: list[tuple[float, int]] = []
        self.forwarded: list[tuple[float, int]] = []
        self.exit: ChildExit | None = None
        self.exited_at: float | None = None
        if exits_at is not None:
            clock.call_at(exits_at, lambda: self._exit(ChildExit(returncode=returncode, signal=None)))

    def signal_lockrun_at(self, at: float, signum: int) -> None:
        """``signum`` reaches lockrun at ``at``: the relay records it and forwards it to the command."""

        def arrive() -> None:
            self.relay.received.append(signum)
            self.forwarded.append((self.clock.now, signum))
            self._receive(signum)
            self.relay.wake()

        self.clock.call_at(at, arrive)

    def _signal_group(self, signum: int) -> None:
        self.sent.append((self.clock.now, signum))
        self._receive(signum)

    def _receive(self, signum: int) -> None:
        if signum == signal.SIGKILL:
            self.clock.call_at(self.clock.now, lambda: self._exit(ChildExit(returncode=None, signal=signum)))
        elif signum in self.dies_of:
            self.clock.call_at(self.clock.now + self.exit_delay,
                               lambda: self._exit(ChildExit(returncode=None, signal=signum)))

    def _exit(self, child: ChildExit) -> None:
        if self.exit is None:
            self.exit, self.exited_at = child, self.clock.now
            self.relay.wake()  # SIGCHLD

    def child_exit_pending(self) -> bool:
        return self.exit is not None


class FakeBackstop(Backstop):
    """Remembers when it was armed for and when it was retired; a real one would SIGKILL the tests."""

    def __init__(self, clock: FakeClock) -> None:  # not the real __init__: no kernel timer
        self.error = None
        self.clock = clock
        self.armed_for: list[float] = []
        self.disarmed_at: float | None = None

    def arm(self, at: float) -> None:
        if self.disarmed_at is None:
            self.armed_for.append(at)

    def disarm(self) -> None:
        if self.disarmed_at is None:
            self.disarmed_at = self.clock.now

    def suspend(self) -> None:  # as far as these tests go, the same: no re-arm follows
        self.disarm()


def keep_renewing(clock: FakeClock, keeper: Keeper) -> None:
    """Schedule the keeper's renewals on the fake clock as its thread would make them: the first
    TTL/3 after the acquire, each next when :meth:`Keeper.renew_once` says, none after a loss."""

    def renew() -> None:
        next_at = keeper.renew_once()
        if next_at is not None:
            clock.call_at(next_at, renew)

    clock.call_at(keeper.lease.sent_at + keeper.interval, renew)
