"""The lock backend protocol and the values that cross it.

A backend hands out leases: ``acquire`` returns a :class:`Lease`, the
:class:`Holder` that has the lock, or :class:`Duplicate` when a ``--once`` key
is already done. ``renew`` and ``release`` compare the owner token first, so a
lease that was lost (expired, stolen, cleared) is never extended or deleted by
its former owner.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol


# What a renewal found.
RENEWED = "renewed"
LOST = "lost"  # the token no longer matches: expired, cleared or taken over
PREEMPTED = "preempted"  # still ours, but another run asked to replace it (--replace)


class Lease(NamedTuple):
    name: str
    token: str  # random owner token, new for every run
    fencing_token: int  # strictly increases with every acquisition of the name
    ttl: float  # seconds
    sent_at: float  # time.monotonic() just before the acquire was sent: the lease starts no later
    once: OnceKey | None = None  # marked done by a release after a successful command
    slots: int = 1  # --slots N: one of N holders


class OnceKey(NamedTuple):
    """An idempotency key (already strftime-expanded) and how long a success is remembered."""

    key: str
    remember_s: float


class Duplicate(NamedTuple):
    """The ``--once`` key had already succeeded: the lock was given back, nothing is to run."""

    name: str
    key: str


class FleetRecord(NamedTuple):
    """A finished run for the fleet record (README "One fleet, one memory"), written by the same
    script that releases (or clears) the lock. The local backend has no fleet record: its
    ledger is the whole memory of this host."""

    row: dict  # as ``history --json`` shows it
    output_tail: str | None = None  # with --capture-tail: its last 4 KiB go to the ``last`` record
    at_once: bool = False  # a row that is over at once (an unlock): recorded only if it cleared something


class FleetRetention(NamedTuple):
    """How much of the fleet record Redis keeps (config ``fleet_keep_runs``, ``fleet_keep_days``)."""

    keep_runs: int = 1000
    keep_days: int = 90

    @property
    def max_events(self) -> int:
        return 2 * self.keep_runs  # a start and an end event per run

    @property
    def keep_ms(self) -> int:
        return self.keep_days * 86400 * 1000


class Holder(NamedTuple):
    """Who holds a lock, as recorded in the backend (contract §7)."""

    name: str
    token: str | None = None
    run_id: str | None = None
    host: str | None = None
    boot_id: str | None = None
    pid: int | None = None
    pid_start: int | None = None
    child_pid: int | None = None
    command: tuple[str, ...] | list[str] = ()
    started_at: str | None = None
    heartbeat_at: str | None = None
    ttl_ms: int | None = None
    ttl_remaining_s: float | None = None  # None: no expiry (or unknown)
    fencing_token: int | None = None
    cooling_until: str | None = None  # set while --min-hold keeps a finished run's lock taken
    slotted: bool = False  # one of the holders of a --slots lock

    def describe(self) -> str:
        """``host:pid (run abcd1234, since ..., expires in 12.3s)`` for one-line messages."""
        who = f"{self.host or '?'}:{self.pid if self.pid is not None else '?'}"
        extra = []
        if self.run_id:
            extra.append(f"run {self.run_id[:8]}")
        if self.started_at:
            extra.append(f"since {self.started_at}")
        if self.ttl_remaining_s is not None:
            extra.append(f"expires in {self.ttl_remaining_s:.1f}s")
        return f"{who} ({', '.join(extra)})" if extra else who


class Backend(Protocol):
    name: str  # "redis" or "local"

    def acquire(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None = None,
        slots: int = 1, last_try: bool = True,
    ) -> Lease | Holder | Duplicate:
        """Take the lock (or one of ``slots``) if free and ``once`` is not done; else say why not.

        One round trip. Raises SlotsMismatch when the name is in use with another N. With
        ``last_try``, a busy answer is this run's outcome (the fleet record counts it).
        """

    def renew(self, lease: Lease, heartbeat_at: str, child_pid: int | None) -> str:
        """Reset the lease to its full TTL if we still own it: RENEWED, LOST or PREEMPTED."""

    def release(
        self, lease: Lease, succeeded: bool = False, hold_s: float = 0.0, hold_until: str = "",
        record: FleetRecord | None = None,
    ) -> bool:
        """Delete the lock if we still own it and wake one waiter. False: it was not ours.

        With ``succeeded``, the lease's ``--once`` key is marked done in the same step.
        With ``hold_s`` > 0 (``--min-hold``), the lock stays taken, "cooling", that long.
        ``record``, the run's final row, goes to the fleet record in the same step, ours or not.
        """

    def preempt(self, name: str, requester: str, ttl: float) -> bool:
        """Ask the holder of ``name`` to stop (``--replace``). False: nobody holds it."""

    def clear(self, name: str, token: str, record: FleetRecord | None = None) -> bool:
        """Delete the lock only if it still holds ``token`` (``unlock``); wake one waiter.
        ``record`` (the unlock's own row) goes to the fleet record if something was cleared."""

    def wait_for_release(self, name: str, timeout: float) -> None:
        """Block until a release of ``name`` is announced or ``timeout`` passes."""

    def lock_names(self) -> list[str]:
        """Names of the held locks (shell completion)."""

    def fleet_record(self):
        """The shared record of every host's runs (Redis), or None (local: the ledger is all)."""

    def holders(self, names: list[str] | None = None) -> list[Holder]:
        """The held locks (all, or the named ones that are held): one Holder per holder,
        so a --slots lock may appear several times, and a cooling one appears too."""

    def close(self) -> None: ...


def call_timeout_for(ttl: float, configured: float | None = None) -> float:
    """The bound on one backend call: a fifth of the lease, between 50 ms and 5 s.

    A renewal that hangs longer than that must leave time for a retry and for
    stopping the command before the lease can expire, so a configured timeout
    (``socket_timeout`` / ``connect_timeout``) is capped at a third of the lease.
    """
    if configured is not None:
        return min(configured, ttl / 3.0)
    return min(5.0, max(0.05, ttl / 5.0))


def open_backend(settings, timeout: float, connect_timeout: float | None = None) -> Backend:
    """Redis when a URL is configured, else the local backend in the state directory.

    A configured but unreachable Redis is never replaced by the local backend:
    that is exit 69. Redis is imported only when it is used.
    """
    if not settings.redis_url:
        from lockrun.backends.local import LocalBackend

        return LocalBackend(settings.state_dir)
    from lockrun.backends.redis import RedisBackend

    return RedisBackend(
        settings.redis_url, settings.prefix, timeout, ca=settings.redis_ca, connect_timeout=connect_timeout,
        fleet=FleetRetention(settings.fleet_keep_runs, settings.fleet_keep_days),
    )
