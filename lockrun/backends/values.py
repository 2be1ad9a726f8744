"""The values that cross the backend protocol, and reading a holder's record back defensively.

A backend hands out leases: ``acquire`` returns a :class:`Lease`, the :class:`Holder` that has
the lock, or :class:`Duplicate` when a ``--once`` key is already done. ``renew`` and ``release``
compare the owner token first, so a lease that was lost (expired, stolen, cleared) is never
extended or deleted by its former owner. A holder's record may have been written by anyone:
every field is parsed with a range, and what cannot be used is named in ``Holder.problem``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from lockrun.core.clock import age_s
from lockrun.core.defaults import DEFAULT_FLEET_KEEP_DAYS, DEFAULT_FLEET_KEEP_RUNS
from lockrun.core.readers import Parsed, Unusable, as_command, as_machine_id, as_text, as_time, int_between
from lockrun.core.record import Row

if TYPE_CHECKING:
    from datetime import datetime

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
    replicas: int = 0  # --replicas: how many replicas must acknowledge each renewal (all: learned at acquire)
    # allow_eviction: the maxmemory-policy of a Redis that may evict keys, which the acquire found
    # and was told to accept (for a line under -v); None: the server does not evict, or was not asked.
    evicting: str | None = None
    # What sits where the name's pause would be, when it is no pause lockrun wrote (not honoured:
    # the run goes on; backends/pause.py); None: no such thing.
    pause_problem: str | None = None


class OnceKey(NamedTuple):
    """An idempotency key (already strftime-expanded) and how long a success is remembered."""

    key: str
    remember_s: float
    # The canonical time zone the key was computed in, when it is time-derived (--once-per, or
    # --once with a % conversion): every run of the name must use the same (docs/guarantees.md "One zone
    # per name"). None: the key does not depend on the time.
    zone: str | None = None
    zone_from: str = ""  # where that zone came from (--tz, the host's local zone...), for messages


class Duplicate(NamedTuple):
    """The ``--once`` key had already succeeded: the lock was given back, nothing is to run."""

    name: str
    key: str


class TooSoon(NamedTuple):
    """``--once-every``: the name's last success started less than that long ago, so nothing is to
    run; the lock was given back (docs/reference.md "Usage": --once-every). Times are epoch
    seconds, by the Redis server's clock (this host's with the local backend)."""

    name: str
    success_at: float  # when the last success started
    now: float  # when the acquire judged it


class FleetRecord(NamedTuple):
    """A finished run for the fleet record (docs/fleet.md "One fleet, one memory"), written by the same
    script that releases (or clears) the lock. The local backend has no fleet record: its
    ledger is the whole memory of this host."""

    row: Row  # as ``history --json`` shows it
    output_tail: str | None = None  # with --capture-tail: its last 4 KiB go to the ``last`` record
    at_once: bool = False  # a row that is over at once (an unlock): recorded only if it cleared something
    # The row to record instead when the release finds the lock no longer this run's (expired,
    # evicted, stolen, cleared): its note and ``lock_lost_at_release`` say so. Only the release
    # script knows which of the two is true. None: ``row`` either way.
    if_lost: Row | None = None


class FleetRetention(NamedTuple):
    """How much of the fleet record Redis keeps (config ``fleet_keep_runs``, ``fleet_keep_days``)."""

    keep_runs: int = DEFAULT_FLEET_KEEP_RUNS
    keep_days: int = DEFAULT_FLEET_KEEP_DAYS

    @property
    def max_events(self) -> int:
        return self.keep_runs  # one entry per finished run (record_format.py)

    @property
    def keep_ms(self) -> int:
        return self.keep_days * 86400 * 1000


class PageRequest(NamedTuple):
    """One page of one name's ``runs`` stream, newest first."""

    name: str
    before: str  # "+" or "(ID": events older than this
    oldest: str  # "-" or the ID of the oldest event of interest
    size: int  # at most this many events


#: A stream entry of the fleet record: its ID ("ms-seq") and its fields (bytes or str keys and
#: values, as stored: whoever wrote them).
FleetEvent = tuple[str, dict[object, object]]


# Ranges of the holder fields: anything outside is data lockrun did not write.
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT: no process id is larger
INT64_MAX = (1 << 63) - 1
MAX_TTL_MS = 365 * 86400 * 1000  # settings.MAX_SECONDS: no lockrun lease is longer


_TEXT_FIELDS = ("token", "run_id", "host", "boot_id")
_TIME_FIELDS = ("started_at", "heartbeat_at", "cooling_until", "retry_at")
MAX_ATTEMPT = 1000  # --retry allows 101 attempts (core/defaults.MAX_RETRIES); more was not written by lockrun
NS_INODE_MAX = (1 << 32) - 1  # a namespace's inode is 32-bit
_INT_FIELDS = {"pid": (1, PID_MAX), "child_pid": (1, PID_MAX), "pid_start": (0, INT64_MAX),
               "ttl_ms": (1, MAX_TTL_MS), "fencing_token": (0, INT64_MAX), "pid_ns": (1, NS_INODE_MAX),
               "attempt": (1, MAX_ATTEMPT)}


class Holder(NamedTuple):
    """Who holds a lock, as recorded in the backend (docs/redis.md "Redis keys").

    Build one with :meth:`from_fields`: the one place where a holder record read back
    from Redis or the state directory (possibly written by someone else) is parsed.
    """

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
    problem: str | None = None  # why this record is malformed (data lockrun did not write), or None
    foreign: bool = False  # not a lockrun lease at all (a key of another type): nothing lockrun runs under it
    pid_ns: int | None = None  # the inode of the holder's PID namespace: its pid means that process only there
    machine_id: str | None = None  # machine-id(5) of the holder's machine (None: not recorded or unreadable)
    unusable: tuple[str, ...] = ()  # the fields whose recorded values were unusable (named in ``problem``)
    heartbeat_age_s: float | None = None  # since the last heartbeat, by the clock that stamped it (with_age)
    kernel_held: bool = False  # a kernel lock (local backend) that a live process holds: never a zombie
    note: str | None = None  # something to tell the operator about the holder (another PID namespace)
    attempt: int | None = None  # --retry: the attempt running, or the next one while retrying
    retry_at: str | None = None  # --retry: set while the run pauses between attempts: when the next starts

    @classmethod
    def from_fields(
        cls,
        name: str,
        fields: Mapping[Any, object] | None,  # keys: bytes (a Redis hash) or str (local JSON)
        *,
        token: str | bytes | None = None,
        pid: int | None = None,
        ttl_remaining_s: float | None = None,
        slotted: bool = False,
        problem: str | None = None,
        foreign: bool = False,
        now: datetime | None = None,
    ) -> Holder:
        """A Holder from a recorded description (Redis hash: bytes; local JSON: any JSON values).

        Survives any value: a field that is not what lockrun writes there is dropped
        (None) and named in ``problem``, so that ``status`` shows the holder as
        malformed instead of failing. ``token`` (the lock key's value) and ``pid`` (the
        kernel's word, for a local lock) win over the description's own. ``now``: the clock
        that stamped the heartbeat, for its age (see :meth:`with_age`).
        """
        info: dict[str, object] = {}
        for key, value in (fields or {}).items():
            info[key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)] = value
        problems = [problem] if problem else []
        unusable: list[str] = []

        def parsed(key: str, parse: Callable[[object], Parsed], empty: Parsed) -> Parsed:
            try:
                return parse(info.get(key))
            except Unusable as exc:
                problems.append(f"{key}: {exc}")
                unusable.append(key)
                return empty

        texts = {key: parsed(key, as_text, None) for key in _TEXT_FIELDS}
        times = {key: parsed(key, as_time, None) for key in _TIME_FIELDS}
        ints = {key: parsed(key, int_between(low, high), None) for key, (low, high) in _INT_FIELDS.items()}
        command: list[str] = parsed("command", as_command, [])
        machine: str | None = parsed("machine_id", as_machine_id, None)
        if token is not None:
            lock_token = token.decode("utf-8", "replace") if isinstance(token, bytes) else str(token)
            if texts["token"] is not None and texts["token"] != lock_token:
                problems.append("its description names another token")
                texts, times, ints, command = dict.fromkeys(texts), dict.fromkeys(times), dict.fromkeys(ints), []
                machine = None
            texts["token"] = lock_token
        return cls(
            name=name, token=texts["token"], run_id=texts["run_id"], host=texts["host"], boot_id=texts["boot_id"],
            pid=ints["pid"] if pid is None else pid, pid_start=ints["pid_start"], child_pid=ints["child_pid"],
            command=command, started_at=times["started_at"], heartbeat_at=times["heartbeat_at"],
            ttl_ms=ints["ttl_ms"], ttl_remaining_s=ttl_remaining_s, fencing_token=ints["fencing_token"],
            cooling_until=times["cooling_until"], slotted=slotted, problem="; ".join(problems) or None,
            foreign=foreign, pid_ns=ints["pid_ns"], machine_id=machine, unusable=tuple(unusable),
            heartbeat_age_s=age_s(times["heartbeat_at"], now) if now is not None else None,
            attempt=ints["attempt"], retry_at=times["retry_at"],
        )

    def with_age(self, now: datetime | None) -> Holder:
        """This holder with its heartbeat's age as of ``now``, on the clock that stamped the
        heartbeat: for Redis the server's TIME, read in the same inspection, never this host's
        clock. ``now`` None (that clock could not be read): no age, so no judgement by it."""
        age = age_s(self.heartbeat_at, now) if now is not None else None
        return self._replace(heartbeat_age_s=age)

    def with_problem(self, problem: str | None) -> Holder:
        """This holder with ``problem`` named first among its problems."""
        return self._replace(problem="; ".join(filter(None, (problem, self.problem))) or None)

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
