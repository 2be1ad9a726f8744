"""The ``Backend`` protocol: everything the run path and the read commands ask of a lock backend,
and the read side of the fleet record (``FleetSource``). Both backends implement it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from lockrun.backends.pause import Paused, PauseRequest
from lockrun.backends.values import (
    Duplicate,
    FleetEvent,
    FleetRecord,
    Holder,
    Lease,
    OnceKey,
    PageRequest,
    TooSoon,
)

if TYPE_CHECKING:  # what doctor reads: not imported by a run
    from lockrun.backends.audit import BackendAudit


class FleetSource(Protocol):
    """The read side of the fleet record (backends/redis_fleet.py): raw, as stored.
    lockrun/fleet.py turns what it answers into rows, defensively."""

    def names(self, kinds: tuple[str, ...] = ...) -> list[str]: ...
    def opens(self, names: list[str]) -> dict[str, list[FleetEvent]]: ...
    def pages(self, requests: Sequence[PageRequest]) -> list[list[FleetEvent]]: ...
    def after(self, name: str, entry_id: str) -> list[FleetEvent]: ...
    def lasts(self, names: list[str]) -> dict[str, tuple[object, object]]: ...
    def counts(self, names: list[str]) -> dict[str, dict[object, object]]: ...
    def skips(self, names: list[str]) -> dict[str, list[object]]: ...
    def find_run(
        self, names: list[str], run_id_prefix: str,
    ) -> list[tuple[str, list[FleetEvent], dict[object, object]]]: ...


class Backend(Protocol):
    name: str  # "redis" or "local"

    def acquire(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None = None,
        slots: int = 1, last_try: bool = True, once_every: float | None = None,
    ) -> Lease | Holder | Duplicate | TooSoon | Paused:
        """Take the lock (or one of ``slots``) if free and ``once`` is not done; else say why not.
        A name paused (``pause``) answers its Paused, found under the lock, which is given back.

        One round trip. Raises SlotsMismatch when the name is in use with another N, and
        ReplicasMissing when the lock was taken but fewer replicas than ``--replicas`` asks
        acknowledged it (the caller gives it back). With ``last_try``, a busy answer is this
        run's outcome (the fleet record counts it).
        """

    def renew(self, lease: Lease, heartbeat_at: str, child_pid: int | None) -> str:
        """Reset the lease to its full TTL if we still own it: RENEWED, LOST or PREEMPTED.

        Raises ReplicasMissing when fewer than ``lease.replicas`` replicas acknowledged the
        reset: such a renewal must not count towards the lease's deadline.
        """

    def release(
        self, lease: Lease, succeeded: bool = False, hold_s: float = 0.0, hold_until: str = "",
        record: FleetRecord | None = None,
    ) -> bool:
        """Delete the lock if we still own it and wake one waiter. False: it was not ours.

        With ``succeeded``, the lease's ``--once`` key is marked done in the same step.
        With ``hold_s`` > 0 (``--min-hold``), the lock stays taken, "cooling", that long.
        ``record``, the run's final row, goes to the fleet record in the same step, ours or not.
        """

    def attempt_over(self, lease: Lease, holder: dict[str, str], record: FleetRecord) -> str:
        """A ``--retry`` attempt ended and the run pauses, keeping the lock: renew it as
        :meth:`renew` does, set ``holder`` on its holder record (the next attempt, when it
        starts), and add ``record``, the attempt's final row, to the fleet record (ours or
        not). One round trip. RENEWED, LOST or PREEMPTED (docs/operating.md "Retries and jitter")."""

    def attempt_begins(self, lease: Lease, holder: dict[str, str], start: dict[str, str]) -> str:
        """The next ``--retry`` attempt starts under the same lock: renew it, set ``holder`` (its
        run id, its number) on the holder record, and record ``start`` (as the acquire's holder
        info) among the runs in progress. One round trip. RENEWED, LOST or PREEMPTED."""

    def release_token(self, name: str, token: str, slots: int = 1) -> bool:
        """Give back whatever ``token`` holds of ``name`` (with ``slots`` > 1: its slot) and wake
        one waiter; for an acquire whose reply never came, which may have taken the lock all
        the same. Nothing is marked done and nothing goes to the fleet record. False: it held nothing."""

    def preempt(self, name: str, requester: str, ttl: float) -> bool:
        """Ask the holder of ``name`` to stop (``--replace``). False: nobody holds it."""

    def clear(self, name: str, token: str, record: FleetRecord | None = None) -> bool:
        """Delete the lock only if it still holds ``token`` (``unlock``); wake one waiter.
        ``record`` (the unlock's own row) goes to the fleet record if something was cleared."""

    def clear_foreign(self, name: str) -> bool:
        """Delete what sits where the lock of ``name`` should be but no lockrun lease can be
        (a key of another type, a file that is not a regular file); False if nothing was."""

    def wait_for_release(
        self, name: str, timeout: float, interruptible: Callable[[], AbstractContextManager[None]] = ...,
    ) -> None:
        """Block until a release of ``name`` is announced or ``timeout`` passes (a crashed holder
        announces nothing: the caller's timeout is when its lease could have expired). The
        blocking read itself runs inside ``interruptible()``, which may raise WaitInterrupted
        out of it (a signal): the backend then keeps nothing the wait left half done."""

    def pause(self, name: str, request: PauseRequest) -> Paused:
        """Pause ``name`` until the request's end (replacing any pause it had); the lock is not touched."""

    def resume(self, name: str) -> bool:
        """End the pause of ``name`` (a malformed one too). False: it was not paused."""

    def pauses(self, names: list[str] | None = None) -> dict[str, Paused]:
        """The recorded pauses of ``names`` (None: of every name), those that ended left out."""

    def cadences(self, names: list[str]) -> dict[str, object]:
        """Each name's declared cadence as the backend keeps it (raw; Redis: the fleet-wide one),
        {} where it keeps none (local: the ledger does)."""

    def known_names(self) -> list[str]:
        """Every name the backend knows of, held or not (Redis: the registry of names)."""

    def lock_names(self) -> list[str]:
        """Names of the held locks (shell completion)."""

    def fleet_record(self) -> FleetSource | None:
        """The shared record of every host's runs (Redis), or None (local: the ledger is all)."""

    def holders(self, names: list[str] | None = None) -> list[Holder]:
        """The held locks (all, or the named ones that are held): one Holder per holder,
        so a --slots lock may appear several times, and a cooling one appears too."""

    def eviction_warnings(self) -> list[str]:
        """One line per server a lock may live on that may evict keys, or will not say (docs/guarantees.md
        "A Redis that evicts keys"): for ``status`` and ``check``; the local backend has none."""

    def audit(self, probe_ttl: float | None = None) -> BackendAudit:
        """What ``lockrun doctor`` judges, read without changing anything (docs/operating.md
        "Checking the setup: lockrun doctor"): Redis, its deployment and every master a name may
        land on; the local backend, its state and lock directories. With ``probe_ttl``, the lease
        operations are also tried live on a scratch name with that TTL, and everything they wrote
        removed (Redis only)."""

    def close(self) -> None: ...
