"""The keeper: a thread that renews the lease every TTL/3 and owns its deadline.

All times are on the monotonic clock. The deadline is measured from the moment
the last *successful* renewal was *sent* (the server reset the TTL no earlier
than that), plus the TTL. The keeper never decides alone that the command may
keep running: the main loop (watch.py) asks :meth:`Keeper.must_stop_at` and stops the
command itself when that moment passes, so a keeper thread that hangs or dies
still ends in a lost lease, never in a command that outlives it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from lockrun.backends.protocol import Backend
from lockrun.backends.values import LOST, PREEMPTED, Lease
from lockrun.core.clock import utc_now_iso
from lockrun.core.errors import BackendUnavailable


def safety_margin(ttl: float) -> float:
    """Time kept free before a lease expires: max(50 ms, 2 % of the TTL)."""
    return max(0.05, 0.02 * ttl)


def stop_grace(kill_after: float, ttl: float) -> float:
    """How long before the safety margin the command is told to stop, so that TERM, the grace and
    KILL all fit before the lease can expire: --kill-after, at most a quarter of the TTL."""
    return min(kill_after, ttl / 4.0)


def expires_at(lease: Lease) -> float:
    """When ``lease``, as last renewed, could expire (monotonic): the renewal's sending plus the TTL."""
    return lease.sent_at + lease.ttl


def must_stop_at(lease: Lease, kill_after: float) -> float:
    """After this moment, without a newer renewal of ``lease``, the command must be stopped."""
    return expires_at(lease) - safety_margin(lease.ttl) - stop_grace(kill_after, lease.ttl)


def backstop_for(expires: float, ttl: float) -> float:
    """When the backstop (backstop.py) kills lockrun if it has not stopped the command itself:
    after the latest SIGKILL lockrun would send (expiry - margin), before the lease can expire."""
    return expires - safety_margin(ttl) / 2


class Keeper:
    def __init__(
        self,
        backend: Backend,
        lease: Lease,
        *,
        kill_after: float,
        call_timeout: float,
        wake: Callable[[], None],
        child_pid: Callable[[], int | None],
        on_renewed: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self._clock = clock  # the monotonic clock; a parameter so that the unit tests can drive it
        self.lease = lease
        self.interval = lease.ttl / 3.0
        self.margin = safety_margin(lease.ttl)
        self.kill_after = kill_after
        self.retry_delay = max(0.05, min(1.0, lease.ttl / 10.0))
        self.call_timeout = call_timeout
        self._wake = wake
        self._child_pid = child_pid
        self._on_renewed = on_renewed  # called with the new expiry after each successful renewal
        self._lock = threading.Lock()
        self._last_error: str | None = None
        self._lost_reason: str | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lockrun-keeper", daemon=True)
        self.preempted = False  # the lease was given up for a --replace, not lost

    # -- what the main loop (watch.py) reads -----------------------------------------

    @property
    def renewed(self) -> Lease:
        """The lease as last renewed: ``sent_at`` is when that renewal was sent (monotonic)."""
        with self._lock:
            return self.lease

    @property
    def expires_at(self) -> float:
        """When the lease we last renewed could expire (monotonic)."""
        return expires_at(self.renewed)

    @property
    def must_stop_at(self) -> float:
        """After this moment, without a newer renewal, the command must be stopped."""
        return must_stop_at(self.renewed, self.kill_after)

    @property
    def lost_reason(self) -> str | None:
        with self._lock:
            return self._lost_reason

    @property
    def last_error(self) -> str | None:
        with self._lock:
            return self._last_error

    def kill_deadline(self) -> float:
        """The latest moment for SIGKILL: the lease's expiry minus the safety margin."""
        return self.expires_at - self.margin

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start renewing. A keeper that cannot start is a lost lease: the command is stopped."""
        try:
            self._thread.start()
        except RuntimeError as exc:  # "can't start new thread": out of memory, pids or threads
            self._mark_lost(f"the lease keeper could not start ({exc})")

    def stop(self) -> None:
        """Stop renewing; waits for an in-flight call, which is bounded by its timeout."""
        self._stopped.set()
        if self._thread.ident is not None:
            self._thread.join(self.call_timeout + 1.0)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a dying keeper is a lost lease, never a silent one
            self._mark_lost(f"the lease keeper failed: {exc!r}")

    def _mark_lost(self, reason: str) -> None:
        with self._lock:
            if self._lost_reason is None:
                self._lost_reason = reason
        self._wake()

    def _loop(self) -> None:
        next_at: float | None = self.renewed.sent_at + self.interval
        while next_at is not None and not self._stopped.wait(max(0.0, next_at - self._clock())):
            next_at = self.renew_once()

    def renew_once(self) -> float | None:
        """One renewal: when the next one is due (monotonic), or None once the lease is lost or
        given up for a ``--replace``. A failed call changes nothing but the error; it is retried
        after ``retry_delay``, and the deadline stays where the last success put it."""
        sent = self._clock()
        try:
            found = self.backend.renew(self.lease, utc_now_iso(), self._child_pid())
        except BackendUnavailable as exc:
            with self._lock:
                self._last_error = str(exc)
            return self._clock() + self.retry_delay
        if found == LOST:
            self._mark_lost("the lock was taken over or cleared (its token no longer matches)")
            return None
        if found == PREEMPTED:
            self.preempted = True
            self._mark_lost("another run asked to replace this one (--replace)")
            return None
        with self._lock:
            self.lease = self.lease._replace(sent_at=sent)
            self._last_error = None
        if self._on_renewed is not None:
            self._on_renewed(expires_at(self.lease))
        return sent + self.interval


def lease_problem(keeper: Keeper, now: float) -> str | None:
    """Why the lease can no longer be trusted at monotonic time ``now``, or None while it can: what the
    main loop (watch.py) and the Python API's watcher (api/) both ask."""
    if keeper.lost_reason is not None:
        return keeper.lost_reason
    if now >= keeper.must_stop_at:
        silent_for = now - keeper.renewed.sent_at
        why = keeper.last_error or "no renewal succeeded in time"
        return f"no renewal succeeded for {silent_for:.1f}s ({why})"
    return None
