"""This run's side of the lock protocol: acquire, wait, replace, release, give back.

A :class:`LeaseClient` owns the run's owner token (128 random bits, new for every run)
and what the holder record says about this run. The backend does each step in one
round trip (backends/__init__.py); what is decided here is when to try again:

- ``--wait``: a busy answer is followed by a sleep until a release wakes us (BLPOP on
  Redis) or the holder's lease could have expired (its remaining TTL and WAKE_MARGIN_S:
  a crashed holder wakes nobody), then another try; no try in between, however long the
  holder's lease. A wake-up that is lost (its waiter died, or another run took the lock
  first) costs the others only that: the holder's expiry still hands over. The try at or
  after the deadline decides, and only its busy answer is counted by the fleet record. A
  forwarded signal ends the wait at once (``interruptible``), with the holder's answer.
- ``--replace``: the holder is asked once to stop; its keeper sees the request at its
  next renewal and stops its command. Without ``--wait``, the deadline is the holder's
  TTL plus ``--kill-after``, known from its first busy answer.
- A lost reply: an acquire whose reply never came may have taken the lock all the same
  (and one that too few replicas acknowledged, under ``--replicas``, did take it), so
  whatever our token holds is given back rather than left stuck for a whole TTL.
- Release: compare-and-delete, retried a little; the token is kept until then (redis-py
  forgot it before the call, and a failed release could never be retried).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from lockrun.backends.pause import Paused
from lockrun.backends.protocol import Backend
from lockrun.backends.values import Duplicate, FleetRecord, Holder, Lease, OnceKey, TooSoon
from lockrun.core.clock import utc_now_iso
from lockrun.core.defaults import DEFAULT_KILL_AFTER, MAX_BLOCK_S, WAKE_MARGIN_S
from lockrun.core.errors import BackendUnavailable, NothingTaken, Report, WaitInterrupted
from lockrun.system import host

RELEASE_ATTEMPTS = 3
#: How often a waiter tries again when the holder's lease has no known end (a lock key without
#: a TTL: not lockrun's; it may be deleted by hand, which wakes nobody).
NO_EXPIRY_RECHECK_S = 1.0


class _Deadline:
    """When a wait gives up: ``--wait`` from now, or (``--replace`` alone) unknown until the
    holder's first busy answer."""

    def __init__(self, clock: Callable[[], float], wait: float | None) -> None:
        self.clock = clock
        self.at = clock() + (wait or 0.0)
        self.known = wait is not None

    def reached(self) -> bool:
        return self.known and self.clock() >= self.at

    def left(self) -> float:
        return self.at - self.clock()

    def learn(self, result: Lease | Holder | Duplicate | TooSoon | Paused, own_ttl: float, kill_after: float) -> None:
        """``--replace`` without ``--wait``: long enough for the holder to notice at its next
        renewal (TTL/3 of *its* lease) and to stop its command (``--kill-after``)."""
        if self.known or not isinstance(result, Holder):
            return
        holder_ttl = result.ttl_ms / 1000.0 if result.ttl_ms else own_ttl
        self.at = self.clock() + holder_ttl + kill_after
        self.known = True


class LeaseClient:
    def __init__(
        self,
        backend: Backend,
        name: str,
        ttl: float,
        *,
        run_id: str,
        argv: list[str],
        report: Report,
        slots: int = 1,
        once: OnceKey | None = None,
        once_every: float | None = None,
        cadence: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # clock and sleep are parameters so that the unit tests can drive the waiting on a fake clock.
        self.backend, self.report, self.clock, self.sleep = backend, report, clock, sleep
        self.name, self.ttl, self.slots, self.once = name, ttl, slots, once  # what each try asks for
        self.once_every = once_every
        self.run_id, self.argv = run_id, argv  # what the holder record says of this run
        self.token = os.urandom(16).hex()  # from the kernel CSPRNG
        self.cadence = cadence  # the declared cadence: the acquire script keeps it with the name

    def holder_info(self) -> dict[str, str]:
        """What the holder record says about this run (docs/redis.md "Redis keys")."""
        now = utc_now_iso()
        return {
            "token": self.token,
            "run_id": self.run_id,
            "host": host.hostname(),
            "boot_id": host.boot_id(),
            "pid": str(os.getpid()),
            "pid_start": str(host.own_start() or ""),
            "child_pid": "",
            "command": json.dumps(self.argv),
            "started_at": now,
            "heartbeat_at": now,
            "ttl_ms": str(int(self.ttl * 1000)),
            # Which process "pid" is: a pid means something only in its PID namespace, on its machine.
            "pid_ns": str(host.pid_ns() or ""),
            "machine_id": host.machine_id(),
            # docs/operating.md "Declaring a cadence": the acquire stores it with the name when it changed.
            **({"cadence": self.cadence} if self.cadence else {}),
        }

    def acquire(
        self,
        wait: float | None,
        *,
        replace: bool = False,
        kill_after: float = DEFAULT_KILL_AFTER,
        interrupted: Callable[[], bool] = lambda: False,
        interruptible: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
        get_ready: Callable[[], None] = lambda: None,
    ) -> Lease | Holder | Duplicate | TooSoon | Paused:
        """The lease, the holder that kept us out until ``wait`` ran out (or ``interrupted``),
        or a duplicate. ``wait`` None (``--replace`` alone): the holder's TTL + ``kill_after``.
        ``interruptible`` is entered around each blocking wait (it raises WaitInterrupted on a
        signal); ``get_ready`` runs before each wait, so that the hand-over costs only the acquire."""
        deadline = _Deadline(self.clock, wait)
        asked: str | None = None  # the holder token we asked to stop (--replace)
        while True:
            # The try at or after the deadline decides: a busy answer to it is this run's
            # outcome, which the fleet record counts (earlier busy answers are only waiting).
            last_try = deadline.reached()
            result = self._try(last_try)
            answered_at = self.clock()
            self._report_lease_notes(result)
            deadline.learn(result, self.ttl, kill_after)
            if not isinstance(result, Holder) or interrupted() or last_try:
                return result
            left = deadline.left()
            if left <= 0:
                continue  # the deadline passed during this try: one last one decides
            if replace and result.token != asked:
                asked = result.token
                self._ask_to_stop(result, left)
            get_ready()
            if self._wait_for_release(result, answered_at, deadline.at, interruptible) or interrupted():
                return result

    def _try(self, last_try: bool) -> Lease | Holder | Duplicate | TooSoon | Paused:
        """One acquire; a reply that never came gives back whatever our token may hold."""
        try:
            return self.backend.acquire(self.name, self.token, self.ttl, self.holder_info(), self.once,
                                        self.slots, last_try=last_try, once_every=self.once_every)
        except NothingTaken:
            raise  # the server answered and took nothing (an evicting or full Redis): nothing to give back
        except BackendUnavailable:
            self._give_back()
            raise

    def _report_lease_notes(self, result: Lease | Holder | Duplicate | TooSoon | Paused) -> None:
        """What a lease taken all the same has to say: a pause it ignored, a server that may evict."""
        if not isinstance(result, Lease):
            return
        if result.pause_problem:
            # docs/operating.md "Pausing a job": a pause nobody can read the end of is not honoured.
            self.report("warn", f"{self.name!r}: ignoring a malformed pause ({result.pause_problem}); running."
                                f" lockrun resume {self.name} removes it")
        if result.evicting:
            self.report("info", f"running although the Redis server may evict keys (maxmemory-policy"
                                f" {result.evicting}; allow_eviction): the lock or a --once mark could vanish")

    def _ask_to_stop(self, holder: Holder, left: float) -> None:
        """Ask once per holder; it stops its command within TTL/3, then releases, which wakes us."""
        if self.backend.preempt(self.name, self.run_id, left):
            self.report("info", f"asked {holder.host}:{holder.pid} to stop (--replace)")

    def _wait_for_release(
        self, holder: Holder, answered_at: float, give_up_at: float,
        interruptible: Callable[[], AbstractContextManager[None]],
    ) -> bool:
        """Until a release wakes us, or until the holder's lease could have expired (a crashed
        holder pushes nothing; counted from its answer, not from now: preempting and getting
        ready took time), or the deadline: no try in between. True: a signal ended the wait."""
        now = self.clock()
        expiry = holder.ttl_remaining_s if holder.ttl_remaining_s is not None else NO_EXPIRY_RECHECK_S
        until_expiry = max(0.0, expiry - (now - answered_at)) + WAKE_MARGIN_S
        try:
            self.backend.wait_for_release(self.name, min(give_up_at - now, until_expiry, MAX_BLOCK_S), interruptible)
        except WaitInterrupted:
            return True  # the caller returns the holder that kept us out and says what the signal means
        return False

    def _give_back(self) -> None:
        """After a lost acquire reply (the script may have run) or too few replicas acknowledging
        it (``--replicas``): give back whatever our token holds (under ``--slots``, the slot)
        rather than leave it stuck for a whole TTL."""
        with contextlib.suppress(BackendUnavailable):  # the lease expires by itself within its TTL
            self.backend.release_token(self.name, self.token, self.slots)

    def release(
        self, lease: Lease, *, lost: bool = False, succeeded: bool = False, hold_s: float = 0.0,
        hold_until: str = "", record: FleetRecord | None = None,
    ) -> bool | None:
        """Compare-and-delete (marking a ``--once`` key done, or cooling for ``--min-hold``, and
        adding ``record`` to the fleet record), retried a little. After a lost lease the release
        is a formality that may well fail: tried once, quietly.

        True: released; False: the lock was no longer this run's (expired, evicted, stolen,
        cleared: the caller says so); None: the backend could not be asked."""
        last_error = None
        for attempt in range(1 if lost and not succeeded else RELEASE_ATTEMPTS):
            try:
                released = self.backend.release(lease, succeeded=succeeded, hold_s=hold_s, hold_until=hold_until,
                                                record=record)
            except BackendUnavailable as exc:
                last_error = exc
                self.sleep(0.05 * (attempt + 1))
                continue
            self.report("info", f"released {lease.name!r}" if released else f"{lease.name!r} was no longer ours")
            return released
        self._not_released(lease, last_error, lost=lost, succeeded=succeeded)
        return None

    def _not_released(self, lease: Lease, error: BackendUnavailable | None, *, lost: bool, succeeded: bool) -> None:
        message = f"could not release {lease.name!r} ({error}); it expires within {lease.ttl:g}s"
        if succeeded and lease.once is not None:
            # Worth a warning even after a lost lease: a rerun will not know the work was done.
            self.report("warn", f"{message}; --once key {lease.once.key!r} was not marked done")
            return
        self.report("info" if lost else "warn", message)
