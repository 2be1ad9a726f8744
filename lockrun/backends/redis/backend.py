"""The Redis backend: the lease operations, one Lua script each, every call bounded in time.

This module is the story of a lease: acquire (or learn who holds the lock), renew,
release (mark --once done, keep --min-hold, record the run in the fleet record), give
back, preempt, clear, wait. The pieces it stands on each have a module of their own:

- client.py: building the client for the URL (plain, TLS, Sentinel, Cluster, ACL)
  and turning whatever goes wrong into lockrun's errors;
- scripts.py and lua_parts.py: the Lua scripts, as data, with the KEYS/ARGV each is called with
  and the replies they give (lua_parts.Acquired);
- keys.py: every key of one lock (docs/redis.md "Redis keys");
- replicas.py: --replicas, WAIT behind each acquire and renewal;
- inspect.py: who holds what (``status``, ``unlock``, a busy acquire).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from lockrun.backends.pause import Paused, PauseRequest
from lockrun.backends.redis.client import REDIS_ERRORS, RedisConnection
from lockrun.backends.redis.eviction import Eviction, eviction_in, eviction_refusal
from lockrun.backends.redis.keys import lock_keys, registry_key
from lockrun.backends.redis.lua_parts import Acquired
from lockrun.backends.redis.replicas import ReplicaWait
from lockrun.backends.redis.replies import int_or_none, pairs, script_int, text
from lockrun.backends.redis.scripts import (
    acquire_call,
    attempt_begins_call,
    attempt_over_call,
    clear_foreign_call,
    preempt_call,
    release_call,
    renew_call,
)
from lockrun.backends.values import (
    LOST,
    PREEMPTED,
    RENEWED,
    Duplicate,
    FleetRecord,
    FleetRetention,
    Holder,
    Lease,
    OnceKey,
    TooSoon,
)
from lockrun.core.errors import (
    BackendUnavailable,
    EvictingServer,
    ForeignData,
    ReplicasMissing,
    SlotsMismatch,
    ZoneMismatch,
)
from lockrun.core.printable import printable
from lockrun.core.readers import written_by_others
from lockrun.core.zones import recorded_zone, shown_record

if TYPE_CHECKING:
    from lockrun.backends.audit import BackendAudit
    from lockrun.backends.redis.fleet import RedisFleetRecord
    from lockrun.backends.redis.inspect import RedisInspection
    from lockrun.backends.redis.pauses import RedisPauses

__all__ = ["REDIS_ERRORS", "RedisBackend", "lock_keys"]

#: What a renewal script's reply means.
_RENEWAL = {1: RENEWED, 2: PREEMPTED}


class _Asked(NamedTuple):
    """What one acquire asked for, as its reply's readers need it."""

    name: str
    token: str
    ttl: float
    once: OnceKey | None
    slots: int
    once_every: float | None
    sent_at: float


class RedisBackend:
    name = "redis"

    def __init__(
        self, url: str, prefix: str, timeout: float, ca: str | None = None, connect_timeout: float | None = None,
        fleet: FleetRetention | None = None,
        password: str | None = None,
        replicas: int | str = 0,
        allow_eviction: bool = False,
    ) -> None:
        self.url = url
        self.allow_eviction = allow_eviction  # run even where keys may be evicted (docs/guarantees.md)
        self.prefix = prefix
        self.fleet = fleet or FleetRetention()
        self.timeout = timeout
        self.connection = RedisConnection(url, prefix, timeout, ca=ca, connect_timeout=connect_timeout,
                                          password=password)
        self.replica_wait = ReplicaWait(self.connection, replicas)
        self._ca, self._connect_timeout, self._password = ca, connect_timeout, password  # for scratch()

    @property
    def registry_key(self) -> str | None:
        """The registry of names the scripts keep (docs/redis.md "Redis keys"); None on a Cluster,
        where one key cannot live in every name's slot."""
        return None if self.connection.is_cluster else registry_key(self.prefix)

    @functools.cached_property
    def inspection(self) -> RedisInspection:
        """Who holds what (redis_inspect.py): imported when first asked (a busy acquire, status,
        unlock), not by an uncontended run."""
        from lockrun.backends.redis.inspect import RedisInspection

        return RedisInspection(self.connection)

    # -- lease operations -----------------------------------------------------------

    def acquire(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None = None,
        slots: int = 1, last_try: bool = True, once_every: float | None = None,
    ) -> Lease | Holder | Duplicate | TooSoon | Paused:
        keys = lock_keys(self.prefix, name)
        call = acquire_call(keys, token, ttl, info, once, slots, last_try, self.fleet, self.allow_eviction,
                            registry=self.registry_key, once_every=once_every)
        wanted = self.replica_wait.replicas
        every = self.replica_wait.every
        known = self.replica_wait.known(keys.lock) if every else 0
        sent_at = time.monotonic()
        got = None
        if wanted:
            # --replicas all: ROLE says how many replicas are in sync; WAIT first for as many as
            # the Sentinels or the Cluster know (at least one), and for the rest if ROLE lists more.
            got = self.replica_wait.eval_then_wait(call, max(1, known) if every else int(wanted), ask_role=every)
            reply = got.reply
        else:
            reply = self.connection.eval(call)
        asked = _Asked(name, token, ttl, once, slots, once_every, sent_at)
        kind = self._acquired(asked, reply)
        if kind is Acquired.TAKEN:
            lease = self._taken(asked, reply)
            return self.replica_wait.confirmed(lease, self.prefix, got, known) if got is not None else lease
        return _ACQUIRE_REPLIES[kind](self, asked, reply)

    def _acquired(self, asked: _Asked, reply: list[Any]) -> Acquired:
        """The kind of an acquire script's reply; one that this acquire cannot have asked for is an
        error (exit 69), never taken for a busy lock."""
        try:
            kind = Acquired(script_int(reply[0]))
        except (ValueError, TypeError, IndexError):
            kind = None
        if kind is None or (kind is Acquired.DUPLICATE and asked.once is None) or (
                kind is Acquired.TOO_SOON and not asked.once_every):
            shown = printable(repr(reply))[:80]
            raise BackendUnavailable(f"Redis at {self.connection.redacted} answered the acquire of {asked.name!r}"
                                     f" with {shown}, which lockrun's script never returns")
        return kind

    def _taken(self, asked: _Asked, reply: list[Any]) -> Lease:
        pause_problem = text(reply[3]) if len(reply) > 3 else ""
        keys = lock_keys(self.prefix, asked.name)
        return Lease(name=asked.name, token=asked.token, fencing_token=script_int(reply[1]), ttl=asked.ttl,
                     sent_at=asked.sent_at, once=asked.once, slots=asked.slots,
                     evicting=(text(reply[2]) or None) if len(reply) > 2 else None,
                     pause_problem=written_by_others(f"{keys.paused} is {pause_problem}") if pause_problem else None)

    def _busy(self, asked: _Asked, reply: list[Any]) -> Holder:
        return self.inspection.busy_holder(asked.name, asked.slots, reply[1], reply[2])

    def _duplicate(self, asked: _Asked, reply: list[Any]) -> Duplicate:
        assert asked.once is not None  # checked by _acquired
        return Duplicate(name=asked.name, key=asked.once.key)

    def _paused(self, asked: _Asked, reply: list[Any]) -> Paused:
        return Paused.from_fields(asked.name, pairs(reply[1]))

    def _too_soon(self, asked: _Asked, reply: list[Any]) -> TooSoon:
        return TooSoon(name=asked.name, success_at=script_int(reply[1]) / 1000, now=script_int(reply[2]) / 1000)

    def _slots_mismatch(self, asked: _Asked, reply: list[Any]) -> NoReturn:
        raise SlotsMismatch(asked.name, script_int(reply[1]), asked.slots)

    def _evicting(self, asked: _Asked, reply: list[Any]) -> NoReturn:
        raise EvictingServer(eviction_refusal(self.connection.redacted, text(reply[1]), reply[2], text(reply[3])))

    def _zone_mismatch(self, asked: _Asked, reply: list[Any]) -> NoReturn:
        raw = reply[1] if isinstance(reply[1], bytes) else text(reply[1]).encode()
        recorded = recorded_zone(raw)
        if recorded is not None and asked.once is not None:
            raise ZoneMismatch(asked.name, recorded, asked.once.zone or "?", asked.once.zone_from or "this host")
        size = int_or_none(reply[2]) if len(reply) > 2 else None
        once_tz = lock_keys(self.prefix, asked.name).once_tz
        raise self._foreign_zone(asked.name, f"{once_tz} holds {shown_record(raw, size)}, no IANA zone this host"
                                             " knows")

    def _zone_not_a_string(self, asked: _Asked, reply: list[Any]) -> NoReturn:
        once_tz = lock_keys(self.prefix, asked.name).once_tz
        raise self._foreign_zone(asked.name, f"{once_tz} is a {printable(text(reply[1]))[:20]}, not a string")

    def _foreign_zone(self, name: str, what: str) -> ForeignData:
        """A zone record lockrun cannot have written (docs/guarantees.md "One zone per name"): exit 69."""
        key = lock_keys(self.prefix, name).once_tz
        return ForeignData(f"Redis at {self.connection.redacted} holds data for lock {name!r} that lockrun did not"
                           f" write ({what}); it records the time zone of the name's --once periods: delete it by"
                           f" hand (redis-cli DEL '{key}')")

    def eviction_warnings(self) -> list[str]:
        from lockrun.backends.redis.eviction import status_warning

        return [status_warning(found) for found in self.evicting_servers()]

    def evicting_servers(self) -> list[Eviction]:
        """For ``status``: the servers a lock may live on (every master of a Cluster) that may evict
        keys, or that do not say, by what INFO memory says: one command per server."""
        try:
            infos = self.connection.memory_infos()
        except REDIS_ERRORS as exc:
            return [Eviction(self.connection.redacted, "", 0, str(exc) or type(exc).__name__)]
        return [found for found in (eviction_in(where, info) for where, info in infos) if found]

    def renew(self, lease: Lease, heartbeat_at: str, child_pid: int | None) -> str:
        call = renew_call(lock_keys(self.prefix, lease.name), lease, heartbeat_at, child_pid)
        if not lease.replicas:
            return _RENEWAL.get(script_int(self.connection.eval(call)), LOST)
        got = self.replica_wait.eval_then_wait(call, lease.replicas)
        found = _RENEWAL.get(script_int(got.reply), LOST)
        if found == RENEWED and got.acks < lease.replicas:
            # The master reset the TTL, but a replica promoted now might not know it: this
            # renewal must not push the deadline on. (A lost or preempted lease ends anyway.)
            too_few = self.replica_wait.too_few("renewal", got.acks, lease.replicas)
            raise ReplicasMissing(f"{too_few}, --replicas {self.replica_wait.replicas}", got.acks, lease.replicas)
        return found

    def attempt_over(self, lease: Lease, holder: dict[str, str], record: FleetRecord) -> str:
        # Under --replicas the runner does not count this renewal towards the deadline: no WAIT here.
        call = attempt_over_call(lock_keys(self.prefix, lease.name), lease, holder, record, self.fleet,
                                 registry=self.registry_key)
        return _RENEWAL.get(script_int(self.connection.eval(call)), LOST)

    def attempt_begins(self, lease: Lease, holder: dict[str, str], start: dict[str, str]) -> str:
        call = attempt_begins_call(lock_keys(self.prefix, lease.name), lease, holder, start, self.fleet,
                                   registry=self.registry_key)
        return _RENEWAL.get(script_int(self.connection.eval(call)), LOST)

    def release(
        self, lease: Lease, succeeded: bool = False, hold_s: float = 0.0, hold_until: str = "",
        record: FleetRecord | None = None,
    ) -> bool:
        done = lease.once if succeeded else None
        return self._release(lease.name, lease.token, lease.slots > 1, done=done, hold_s=hold_s, hold_until=hold_until,
                             record=record)

    def release_token(self, name: str, token: str, slots: int = 1) -> bool:
        return self._release(name, token, slots > 1)

    def clear(self, name: str, token: str, record: FleetRecord | None = None) -> bool:
        """Delete the lock (or the slot) only if it still holds ``token``, and wake one waiter.

        ``record`` (the unlock's own row) goes to the fleet record only when something was cleared.
        """
        return self._release(name, token, self.inspection.is_slotted(name), record=record)

    def _release(
        self, name: str, token: str, slotted: bool, done: OnceKey | None = None, hold_s: float = 0.0,
        hold_until: str = "", record: FleetRecord | None = None,
    ) -> bool:
        """The release script: compare-and-delete, wake one waiter, mark ``done``, add ``record``."""
        call = release_call(lock_keys(self.prefix, name), token, slotted, self.fleet, done=done, hold_s=hold_s,
                            hold_until=hold_until, record=record, registry=self.registry_key)
        return script_int(self.connection.eval(call)) == 1

    def clear_foreign(self, name: str) -> bool:
        """Delete the keys of ``name`` that are of a type lockrun never writes there; wake one waiter."""
        return script_int(self.connection.eval(clear_foreign_call(lock_keys(self.prefix, name)))) > 0

    def preempt(self, name: str, requester: str, ttl: float) -> bool:
        return script_int(self.connection.eval(preempt_call(lock_keys(self.prefix, name), requester, ttl))) == 1

    def wait_for_release(
        self, name: str, timeout: float,
        interruptible: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        """BLPOP the name's wake list for ``timeout`` (the caller's: the holder's remaining lease
        and a margin, or what is left of --wait); a release pushes to it, so one waiter wakes at
        once. On the client's one connection: a waiter holds one connection to Redis, not two.
        A crashed holder pushes nothing: its expiry is noticed when the timeout ends."""
        if timeout <= 0:
            return
        self.connection.blocking_pop(lock_keys(self.prefix, name).wake, timeout, interruptible)

    # -- pauses (docs/operating.md "Pausing a job") -------------------------------------

    @functools.cached_property
    def _pauses(self) -> RedisPauses:
        from lockrun.backends.redis.pauses import RedisPauses

        return RedisPauses(self.connection, self.fleet.keep_ms, self.registry_key, self.inspection.registry)

    def pause(self, name: str, request: PauseRequest) -> Paused:
        return self._pauses.pause(name, request)

    def resume(self, name: str) -> bool:
        return self._pauses.resume(name)

    def pauses(self, names: list[str] | None = None) -> dict[str, Paused]:
        return self._pauses.read(names)

    def cadences(self, names: list[str]) -> dict[str, object]:
        return self._pauses.cadences(names)

    def known_names(self) -> list[str]:
        """Every name the registry knows (on a Cluster: every name with a lock, fleet record or pause key)."""
        return sorted(self.inspection.registry.names(("lock", "slots", "runs", "last", "paused", "cadence")))

    # -- inspection -----------------------------------------------------------------

    def fleet_record(self) -> RedisFleetRecord:
        """The fleet record every host writes into this Redis (read side: redis_fleet.py)."""
        from lockrun.backends.redis.fleet import RedisFleetRecord

        inspection = self.__dict__.get("inspection")  # set once holders were listed (cached_property)
        return RedisFleetRecord(self.connection, inspection.prefetched_lasts if inspection is not None else None)

    def lock_names(self) -> list[str]:
        """Names of every held lock, plain or slotted, by SCAN (never KEYS)."""
        return self.inspection.lock_names()

    def holders(self, names: list[str] | None = None) -> list[Holder]:
        """Every holder: one per plain lock, one per live slot of a --slots lock."""
        return self.inspection.holders(names)

    def close(self) -> None:
        RedisConnection.close(self.connection.client)

    # -- lockrun doctor (docs/operating.md "Checking the setup: lockrun doctor") -------------

    def audit(self, probe_ttl: float | None = None) -> BackendAudit:
        """The deployment and every master a name may land on, read-only; with ``probe_ttl``, the
        lease operations tried live on a scratch name (redis/probe.py), its keys removed after."""
        from lockrun.backends.redis.doctor import audit
        from lockrun.backends.redis.probe import run_probe

        ttl = probe_ttl
        probe = (lambda: run_probe(self.connection, self.scratch, ttl)) if ttl is not None else None
        return audit(self.connection, bool(self.replica_wait.replicas), probe)

    def scratch(self, prefix: str) -> RedisBackend:
        """A backend on the same servers, with the same settings and a connection of its own, whose
        every key starts with ``prefix`` (the probe's: two holders, as two hosts would be)."""
        return RedisBackend(self.url, prefix, self.timeout, fleet=self.fleet, replicas=self.replica_wait.replicas,
                            allow_eviction=self.allow_eviction, ca=self._ca, connect_timeout=self._connect_timeout,
                            password=self._password)

#: How each kind of acquire reply (but TAKEN, which --replicas may still refuse) becomes a value or an error.
_ACQUIRE_REPLIES: dict[Acquired, Callable[[RedisBackend, _Asked, list[Any]], Holder | Duplicate | TooSoon | Paused]] = {
    Acquired.BUSY: RedisBackend._busy,
    Acquired.DUPLICATE: RedisBackend._duplicate,
    Acquired.PAUSED: RedisBackend._paused,
    Acquired.TOO_SOON: RedisBackend._too_soon,
    Acquired.SLOTS_MISMATCH: RedisBackend._slots_mismatch,
    Acquired.EVICTING: RedisBackend._evicting,
    Acquired.ZONE_MISMATCH: RedisBackend._zone_mismatch,
    Acquired.ZONE_NOT_A_STRING: RedisBackend._zone_not_a_string,
}
