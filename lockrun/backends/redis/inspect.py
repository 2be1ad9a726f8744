"""Who holds which lock in Redis, for ``status``, ``unlock`` and a busy acquire.

Names come from the registry (registry.py; SCAN on a Redis Cluster) and are read in batches of
1,000: by one script call each (READ_LOCKS_SCRIPT: token, PTTL, info hash, fleet last run and live
slots of each, as one JSON text), or, on a Cluster or where the script cannot serve, by a pipeline
of GET, PTTL, HGETALL and slot listing per name; then one HGETALL per live slot, so ten thousand
locks cost a few round trips. Keys someone else wrote (another type, no
TTL, no description) come back as holders with a ``problem``: one bad key must not hide every
other lock.

Every holder's heartbeat age is measured against the TIME of the server that stamped it, read
with it (by the batch script, at the end of the pipeline, or, in a Redis Cluster, by a TIME per
name on the name's own node): no host's clock is ever compared with another's.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from redis.exceptions import ResponseError

from lockrun.backends.redis.client import RedisConnection
from lockrun.backends.redis.keys import SCAN_BATCH, LockKeys, lock_keys, scan_names
from lockrun.backends.redis.registry import NameRegistry
from lockrun.backends.redis.replies import expiry_s, int_or_none, is_utf8, pairs, text
from lockrun.backends.redis.scripts import READ_LOCKS_SCRIPT
from lockrun.backends.values import Holder
from lockrun.core.readers import written_by_others

#: What a key that is not lockrun's own says in ``status`` and on a busy skip.
NO_EXPIRY = written_by_others("the lock key has no expiry (lockrun always sets one)")
NO_DESCRIPTION = "no holder description (its info hash is missing)"
NOT_A_TOKEN = written_by_others("the lock's value is not UTF-8 text, so no lockrun owner token")

#: The server's clock, read on the node that holds a key (a Redis Cluster pipeline has no TIME).
TIME_SCRIPT = "return redis.call('TIME')"


def server_time(reply: Any) -> datetime | None:
    """A TIME reply ([seconds, microseconds]) as a UTC time; None when it is not one."""
    try:
        seconds, micros = (int(part) for part in reply)
        return datetime.fromtimestamp(seconds + micros / 1e6, timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _wrong_type(key: str, kind: str, expected: str) -> str:
    return written_by_others(f"{key} is a {kind}, not a {expected}")


def _as_reply(value: Any) -> Any:
    """A value as READ_LOCKS_SCRIPT encodes it, as the pipeline would give it: a missing key is
    None (cjson writes Lua's false), a key of the wrong type the error redis-py returns."""
    if value is False:
        return None
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("err"), str):
        return ResponseError(value["err"])
    return value


def _live_slots(reply: Any) -> Any:
    """READ_LOCKS_SCRIPT's flat member, score list as the pipeline's ZRANGEBYSCORE WITHSCORES
    gives it: (member, score) pairs (cjson writes an empty list as {})."""
    if isinstance(reply, Exception):
        return reply
    if not isinstance(reply, list):
        return []
    try:
        return [(reply[i], float(reply[i + 1])) for i in range(0, len(reply) - 1, 2)]
    except (TypeError, ValueError):
        return []


def _raise_unless_data_errors(replies: list[Any]) -> None:
    """A reply error about one key's data is that key's problem; anything else is the server's."""
    for reply in replies:
        if isinstance(reply, Exception) and "WRONGTYPE" not in str(reply):
            raise reply


def described(name: str, token: Any, pttl: Any, fields: Any, slotted: bool = False,
              now: datetime | None = None) -> Holder:
    """A holder from its lock token and its description (a hash, or an error reading it); ``now``
    is the server's TIME read with them, for the heartbeat's age."""
    problem = None
    if isinstance(token, bytes) and not is_utf8(token):
        # lockrun's owner tokens are hex: no lockrun lease holds this value.
        return Holder.from_fields(name, {}, token=token, ttl_remaining_s=expiry_s(pttl), slotted=slotted,
                                  foreign=not slotted, problem=NOT_A_TOKEN)
    if isinstance(fields, Exception):
        kind = "slot info key" if slotted else "info key"
        problem, fields = written_by_others(f"its {kind} is not a hash"), {}
    elif not fields:
        problem = NO_DESCRIPTION
    return Holder.from_fields(name, fields, token=token, ttl_remaining_s=expiry_s(pttl), slotted=slotted,
                              problem=problem, now=now)


class RedisInspection:
    """The read side of the lock keys: names, holders, and what is wrong with a key."""

    def __init__(self, connection: RedisConnection) -> None:
        self._connection = connection
        self.registry = NameRegistry(connection)
        self._prefix = connection.prefix
        # The fleet ``last`` (row, last_success_at) of each name a batch script read, for the
        # fleet record's ``lasts`` (status shows both): absent from it, a name has no last run.
        self.prefetched_lasts: dict[str, tuple[object, object]] = {}

    def _keys(self, name: str) -> LockKeys:
        return lock_keys(self._prefix, name)

    def lock_names(self) -> list[str]:
        """Names of every held lock, plain or slotted."""
        return sorted(self._connection.call(lambda: scan_names(self._connection.client, self._prefix,
                                                                ("lock", "slots"))))

    def is_slotted(self, name: str) -> bool:
        return bool(self._connection.call(lambda: self._connection.client.exists(self._keys(name).slots)))

    def busy_holder(self, name: str, slots: int, pttl: Any, flat: Any) -> Holder:
        """The holder a busy acquire found: the script's PTTL and the holder's info as a flat list."""
        fields = pairs(flat)
        problem, foreign = None, False
        if slots == 1 and int_or_none(pttl) == -1:  # lockrun always sets a TTL: look closer (rare)
            problem, foreign = self._lock_key_problem(self._keys(name))
        elif not fields:
            problem = NO_DESCRIPTION
        return Holder.from_fields(name, fields, ttl_remaining_s=expiry_s(pttl), slotted=slots > 1,
                                  problem=problem, foreign=foreign)

    def _lock_key_problem(self, keys: LockKeys) -> tuple[str | None, bool]:
        """Why a lock key without a TTL is not a lockrun lease: (problem, foreign)."""
        kind = text(self._connection.call(lambda: self._connection.client.type(keys.lock)))
        if kind == "none":
            return None, False  # gone meanwhile
        if kind != "string":
            return _wrong_type(keys.lock, kind, "string"), True
        return NO_EXPIRY, False

    def holders(self, names: list[str] | None = None) -> list[Holder]:
        """Every holder: one per plain lock, one per live slot of a --slots lock."""
        if names is not None:
            wanted = list(names)
            return self._connection.call(lambda: self._holders(wanted, set(wanted)))
        if not self._connection.is_cluster:  # every registered name; the free ones show nothing
            every = sorted(self.registry.names(("lock", "slots")))
            return self._connection.call(lambda: self._holders(every, set(every)))
        # Listing every lock: the SCAN already tells which names have a slots key, so the
        # plain locks (nearly all of them) are read without asking for slots they do not have.
        slotted_names = self._connection.call(
            lambda: scan_names(self._connection.client, self._prefix, ("slots",)))
        plain_names = self._connection.call(lambda: scan_names(self._connection.client, self._prefix, ("lock",)))
        return self._connection.call(lambda: self._holders(sorted(plain_names | slotted_names), slotted_names))

    def _holders(self, names: list[str], may_have_slots: set[str]) -> list[Holder]:
        client = self._connection.client
        cluster = self._connection.is_cluster
        seconds, micros = client.time()
        now_ms = seconds * 1000 + micros // 1000
        found: list[Holder] = []
        for start in range(0, len(names), SCAN_BATCH):
            batch = names[start : start + SCAN_BATCH]
            read = self._read_batch(batch)
            clock: dict[str, datetime | None] = {}  # each name's server TIME, read with its keys
            if read is None:
                pipe = client.pipeline(transaction=False)
                for name in batch:
                    keys = self._keys(name)
                    pipe.get(keys.lock)
                    pipe.pttl(keys.lock)
                    pipe.hgetall(keys.info)
                    if name in may_have_slots:
                        pipe.zrangebyscore(keys.slots, now_ms + 1, "+inf", withscores=True)
                    if cluster:
                        pipe.execute_command("EVAL", TIME_SCRIPT, 1, keys.lock)  # (no .eval in a cluster pipeline)
                if not cluster:
                    pipe.time()
                replies = pipe.execute(raise_on_error=False)
                if not cluster:
                    clock = dict.fromkeys(batch, server_time(replies.pop()))
            else:
                replies, now = read
                clock = dict.fromkeys(batch, now)
            _raise_unless_data_errors(replies)
            slotted: list[tuple[str, str, float]] = []
            odd: list[tuple[str, str, Any]] = []  # (name, which key, its PTTL reply)
            at = 0
            per_name: dict[str, list[Any]] = {}
            for name in batch:
                listed_slots = read is not None or name in may_have_slots  # the script lists every name's
                width = 3 + listed_slots + (read is None and cluster)
                token, pttl, fields = per_name[name] = replies[at : at + 3]
                rest = replies[at + 3 : at + width]
                at += width
                slots = rest[0] if listed_slots else None
                if read is None and cluster:
                    clock[name] = server_time(rest[-1])
                if isinstance(token, Exception) or int_or_none(pttl) == -1:
                    odd.append((name, "lock", pttl))
                elif token is not None:
                    found.append(described(name, token, pttl, fields, now=clock[name]))
                if isinstance(slots, Exception):
                    odd.append((name, "slots", None))
                else:
                    slotted += [(name, text(member), score) for member, score in slots or []]
            found += self._odd_holders(odd, per_name, clock)
            found += self._slot_holders(slotted, now_ms)
        return found

    def _read_batch(self, batch: list[str]) -> tuple[list[Any], datetime | None] | None:
        """The replies the pipeline gives for a batch of names (GET, PTTL, HGETALL and the live
        slots of each) and the server's TIME, read by READ_LOCKS_SCRIPT in one call, which also
        reads each name's fleet ``last`` into :attr:`prefetched_lasts`; None where the script
        cannot serve (a Redis Cluster, a server without it, values that are not UTF-8): the
        caller pipelines."""
        if self._connection.is_cluster:
            return None
        keys = [key for keys_of in map(self._keys, batch)
                for key in (keys_of.lock, keys_of.info, keys_of.last, keys_of.slots)]
        try:
            rows, now = json.loads(self._connection.client.eval(READ_LOCKS_SCRIPT, len(keys), *keys))
        except (ResponseError, ValueError, TypeError):  # ValueError: json.loads of text that is not UTF-8
            return None
        if not isinstance(rows, list) or len(rows) != len(batch):
            return None
        replies: list[Any] = []
        for name, row in zip(batch, rows, strict=True):
            if not (isinstance(row, list) and len(row) == 6):
                return None
            token, pttl, info, last_row, last_success, slots = (_as_reply(value) for value in row)
            replies += [token, pttl, info, _live_slots(slots)]
            self.prefetched_lasts[name] = (last_row, last_success)
        return replies, server_time(now)

    def _slot_holders(self, slotted: list[tuple[str, str, float]], now_ms: int) -> list[Holder]:
        """One holder per live slot (name, owner token, expiry score): its info hash, pipelined,
        with the server's TIME after it (in a Redis Cluster, each slot's node's)."""
        if not slotted:
            return []
        cluster = self._connection.is_cluster
        pipe = self._connection.client.pipeline(transaction=False)
        for name, member, _ in slotted:
            info_key = self._keys(name).slot_info(member)
            pipe.hgetall(info_key)
            if cluster:
                pipe.execute_command("EVAL", TIME_SCRIPT, 1, info_key)
        if not cluster:
            pipe.time()
        replies = pipe.execute(raise_on_error=False)
        _raise_unless_data_errors(replies)
        if cluster:
            slot_fields, times = replies[0::2], [server_time(reply) for reply in replies[1::2]]
        else:
            slot_fields, times = replies[:-1], [server_time(replies[-1])] * len(slotted)
        return [described(name, member, int(score) - now_ms, fields, slotted=True, now=now)
                for (name, member, score), fields, now in zip(slotted, slot_fields, times, strict=True)]

    def _odd_holders(self, odd: list[tuple[str, str, Any]], per_name: dict[str, list[Any]],
                     clock: dict[str, datetime | None]) -> list[Holder]:
        """Holders for lock keys of another type or without a TTL, and slots keys of another type."""
        if not odd:
            return []
        pipe = self._connection.client.pipeline(transaction=False)
        for name, which, _ in odd:
            keys = self._keys(name)
            pipe.type(keys.lock if which == "lock" else keys.slots)
        kinds = [text(kind) for kind in pipe.execute()]
        found = []
        for (name, which, pttl), kind in zip(odd, kinds, strict=True):
            keys = self._keys(name)
            if which == "slots":
                if kind not in ("none", "zset"):
                    found.append(Holder.from_fields(
                        name, {}, slotted=True, foreign=True, problem=_wrong_type(keys.slots, kind, "sorted set")))
                continue
            if kind == "none":
                continue  # released meanwhile
            if kind != "string":
                found.append(Holder.from_fields(
                    name, {}, ttl_remaining_s=expiry_s(pttl), foreign=True,
                    problem=_wrong_type(keys.lock, kind, "string")))
                continue
            token, _, fields = per_name[name][:3]
            found.append(described(name, token, pttl, fields, now=clock.get(name)).with_problem(NO_EXPIRY))
        return found
