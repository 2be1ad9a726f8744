"""The lock backend protocol and the values that cross it.

A backend hands out leases: ``acquire`` returns a :class:`Lease`, the
:class:`Holder` that has the lock, or :class:`Duplicate` when a ``--once`` key
is already done. ``renew`` and ``release`` compare the owner token first, so a
lease that was lost (expired, stolen, cleared) is never extended or deleted by
its former owner.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from lockrun.clock import age_s, parse_iso
from lockrun.record import Row

if TYPE_CHECKING:
    from datetime import datetime

# What a renewal found.
RENEWED = "renewed"
LOST = "lost"  # the token no longer matches: expired, cleared or taken over
PREEMPTED = "preempted"  # still ours, but another run asked to replace it (--replace)

# --replicas all: as many replicas as the master has (asked at acquire time).
ALL_REPLICAS = "all"


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


class OnceKey(NamedTuple):
    """An idempotency key (already strftime-expanded) and how long a success is remembered."""

    key: str
    remember_s: float
    # The canonical time zone the key was computed in, when it is time-derived (--once-per, or
    # --once with a % conversion): every run of the name must use the same (README "One zone
    # per name"). None: the key does not depend on the time.
    zone: str | None = None
    zone_from: str = ""  # where that zone came from (--tz, the host's local zone...), for messages


class Duplicate(NamedTuple):
    """The ``--once`` key had already succeeded: the lock was given back, nothing is to run."""

    name: str
    key: str


class FleetRecord(NamedTuple):
    """A finished run for the fleet record (README "One fleet, one memory"), written by the same
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

    keep_runs: int = 1000
    keep_days: int = 90

    @property
    def max_events(self) -> int:
        return 2 * self.keep_runs  # a start and an end event per run

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


class FleetSource(Protocol):
    """The read side of the fleet record (backends/redis_fleet.py): raw, as stored.
    lockrun/fleet.py turns what it answers into rows, defensively."""

    def names(self, kinds: tuple[str, ...] = ...) -> list[str]: ...
    def pages(self, requests: Sequence[PageRequest]) -> list[list[FleetEvent]]: ...
    def after(self, name: str, entry_id: str) -> list[FleetEvent]: ...
    def lasts(self, names: list[str]) -> dict[str, tuple[object, object]]: ...
    def counts(self, names: list[str]) -> dict[str, dict[object, object]]: ...
    def find_run(
        self, names: list[str], run_id_prefix: str,
    ) -> list[tuple[str, list[FleetEvent], dict[object, object]]]: ...


# Ranges of the holder fields: anything outside is data lockrun did not write.
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT: no process id is larger
INT64_MAX = (1 << 63) - 1
MAX_TTL_MS = 365 * 86400 * 1000  # settings.MAX_SECONDS: no lockrun lease is longer
MAX_TEXT = 1024  # longer text fields are cut (a host name has at most 255 characters)
_INTEGER_RE = re.compile(r"-?\d{1,40}")
_TEXT_FIELDS = ("token", "run_id", "host", "boot_id")
_TIME_FIELDS = ("started_at", "heartbeat_at", "cooling_until")
NS_INODE_MAX = (1 << 32) - 1  # a namespace's inode is 32-bit
_INT_FIELDS = {"pid": (1, PID_MAX), "child_pid": (1, PID_MAX), "pid_start": (0, INT64_MAX),
               "ttl_ms": (1, MAX_TTL_MS), "fencing_token": (0, INT64_MAX), "pid_ns": (1, NS_INODE_MAX)}
_MACHINE_ID_RE = re.compile(r"[0-9a-f]{32}")  # machine-id(5): 32 lower-case hex digits


class _Unusable(ValueError):
    """One field's value is not what lockrun writes there."""


_Parsed = TypeVar("_Parsed")


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise _Unusable(f"a {type(value).__name__}, not text")
    if len(value) > MAX_TEXT:
        raise _Unusable(f"{len(value)} characters long")
    return value or None


def _as_int(value: object, low: int, high: int) -> int | None:
    if isinstance(value, (bytes, str)):
        text = _as_text(value)
        if text is None:
            return None  # an empty field: not known yet (child_pid before the first renewal)
        if not _INTEGER_RE.fullmatch(text.strip()):
            raise _Unusable(f"{text[:40]!r} is not a whole number")
        value = int(text)
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    elif value is None:
        return None
    elif isinstance(value, bool) or not isinstance(value, int):
        raise _Unusable(f"a {type(value).__name__}, not a whole number")
    if not low <= value <= high:
        raise _Unusable(f"{value} is outside {low}..{high}")
    return value


def _as_command(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (bytes, str)):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        try:
            value = json.loads(text) if text else []
        except (ValueError, RecursionError):
            raise _Unusable("not a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(arg, str) for arg in value):
        raise _Unusable("not a list of strings")
    return [arg for arg in value if isinstance(arg, str)]  # all of them: a list[str] for the type checker


def _int_between(low: int, high: int) -> Callable[[object], int | None]:
    return lambda value: _as_int(value, low, high)


def _as_time(value: object) -> str | None:
    text = _as_text(value)
    if text is not None and parse_iso(text) is None:
        raise _Unusable(f"{text[:40]!r}, not an ISO 8601 UTC time")
    return text


def _as_machine_id(value: object) -> str | None:
    text = _as_text(value)
    if text is not None and not _MACHINE_ID_RE.fullmatch(text):
        raise _Unusable(f"{text[:40]!r} is not a machine id (32 hex digits)")
    return text


def written_by_others(what: str) -> str:
    """A ``problem`` of a record lockrun did not write, as both backends word it."""
    return f"{what}: written by something other than lockrun"


class Holder(NamedTuple):
    """Who holds a lock, as recorded in the backend (README, "Redis keys").

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

        def parsed(key: str, parse: Callable[[object], _Parsed], empty: _Parsed) -> _Parsed:
            try:
                return parse(info.get(key))
            except _Unusable as exc:
                problems.append(f"{key}: {exc}")
                unusable.append(key)
                return empty

        texts = {key: parsed(key, _as_text, None) for key in _TEXT_FIELDS}
        times = {key: parsed(key, _as_time, None) for key in _TIME_FIELDS}
        ints = {key: parsed(key, _int_between(low, high), None) for key, (low, high) in _INT_FIELDS.items()}
        command: list[str] = parsed("command", _as_command, [])
        machine: str | None = parsed("machine_id", _as_machine_id, None)
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


class Backend(Protocol):
    name: str  # "redis" or "local"

    def acquire(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None = None,
        slots: int = 1, last_try: bool = True,
    ) -> Lease | Holder | Duplicate:
        """Take the lock (or one of ``slots``) if free and ``once`` is not done; else say why not.

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

    def wait_for_release(self, name: str, timeout: float) -> None:
        """Block until a release of ``name`` is announced or ``timeout`` passes."""

    def lock_names(self) -> list[str]:
        """Names of the held locks (shell completion)."""

    def fleet_record(self) -> FleetSource | None:
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


class BackendSettings(Protocol):
    """What :func:`open_backend` reads of the resolved settings (``settings.Settings`` is one)."""

    @property
    def redis_url(self) -> str | None: ...
    @property
    def state_dir(self) -> str | Path | None: ...
    @property
    def prefix(self) -> str: ...
    @property
    def redis_ca(self) -> str | None: ...
    @property
    def fleet_keep_runs(self) -> int: ...
    @property
    def fleet_keep_days(self) -> int: ...
    def redis_password(self) -> str | None: ...


def open_backend(
    settings: BackendSettings, timeout: float, connect_timeout: float | None = None, replicas: int | str = 0,
    allow_eviction: bool = False,
) -> Backend:
    """Redis when a URL is configured, else the local backend in the state directory.

    A configured but unreachable Redis is never replaced by the local backend:
    that is exit 69. Redis is imported only when it is used. ``replicas`` (``--replicas``:
    a number or "all") is how many Redis replicas must acknowledge an acquire or renewal.
    ``allow_eviction``: acquire even on a Redis that may evict keys (else exit 69).
    """
    if not settings.redis_url:
        from lockrun.backends.local import LocalBackend

        return LocalBackend(settings.state_dir)
    from lockrun.backends.redis import RedisBackend

    return RedisBackend(
        settings.redis_url, settings.prefix, timeout, ca=settings.redis_ca, connect_timeout=connect_timeout,
        fleet=FleetRetention(settings.fleet_keep_runs, settings.fleet_keep_days),
        password=settings.redis_password(),
        replicas=replicas,
        allow_eviction=allow_eviction,
    )
