"""Pauses in Redis (``lockrun pause``, docs/operating.md "Pausing a job"): the hash
``prefix{NAME}:paused``, written by one script (PAUSE_SCRIPT) that also registers the name, and
expiring at the pause's end. The acquire scripts read it themselves (PAUSE_LUA): no run pays a
round trip for it. Readers (``status``, ``check``) read the registered names' pause keys in
pipelined batches (SCAN for ``:paused`` keys on a Cluster, which has no registry).
"""

from __future__ import annotations

from typing import Any

from lockrun.backends.pause import Paused, PauseRequest
from lockrun.backends.redis.client import RedisConnection
from lockrun.backends.redis.keys import SCAN_BATCH, lock_keys, scan_names
from lockrun.backends.redis.registry import NameRegistry
from lockrun.backends.redis.replies import int_or_none, pairs, script_int, text
from lockrun.backends.redis.scripts import pause_call
from lockrun.core.errors import UsageError
from lockrun.core.readers import written_by_others


class RedisPauses:
    """Pauses, and the declared cadences read with them: ``status`` asks for both of the same names,
    and gets them from one script call per batch (READ_PRESENT_SCRIPT)."""

    def __init__(self, connection: RedisConnection, keep_ms: int, registry: str | None,
                 names: NameRegistry | None = None) -> None:
        self._connection = connection
        self._keep_ms = keep_ms
        self._registry = registry
        self._names = names or NameRegistry(connection)  # the inspection's: the registry read once
        self._cadences: dict[str, object] = {}  # read beside the pauses, by name
        self._cadences_read: set[str] = set()

    def pause(self, name: str, request: PauseRequest) -> Paused:
        reply = self._connection.eval(pause_call(lock_keys(self._connection.prefix, name), request, self._keep_ms,
                                                 self._registry))
        if script_int(reply[0]) != 1:
            raise UsageError(f"cannot pause {name!r}: its end is not after the Redis server's clock")
        return Paused.from_fields(name, pairs(reply[1]))

    def resume(self, name: str) -> bool:
        key = lock_keys(self._connection.prefix, name).paused
        return bool(self._connection.call(lambda: self._connection.client.delete(key), key))

    def read(self, names: list[str] | None) -> dict[str, Paused]:
        """The pauses of ``names`` (None: of every registered name), as recorded: a key of another
        type, or a hash without until_ms or an expiry, reads as a malformed pause."""
        connection = self._connection
        if names is None:
            if connection.is_cluster:
                names = sorted(connection.call(lambda: scan_names(connection.client, connection.prefix, ("paused",))))
            else:
                names = sorted(self._names.names(("paused",)))
        present = present_keys(connection, names, ("paused", "cadence"))
        self._keep_cadences(names, present)
        found: dict[str, Paused] = {}
        for (name, kind_of_key), (kind, value, pttl) in present.items():
            if kind_of_key != "paused":
                continue
            key = lock_keys(connection.prefix, name).paused
            if kind != "hash":
                found[name] = Paused(name=name, problem=written_by_others(f"{key} is a {kind}, not a hash"))
                continue
            fields = pairs(value)
            problem = None
            if not _whole_ms(fields):
                problem = written_by_others(f"{key} has no until_ms in whole ms")
            elif (int_or_none(pttl) or -1) < 0:
                problem = written_by_others(f"{key} has no expiry")
            found[name] = Paused.from_fields(name, fields, problem)
        return found

    def cadences(self, names: list[str]) -> dict[str, object]:
        """Each name's declared cadence as stored (raw: core/cadence parses it); a key of another
        type reads as nothing declared. Those read beside the pauses are not read again."""
        unread = [name for name in names if name not in self._cadences_read]
        if unread:
            self._keep_cadences(unread, present_keys(self._connection, unread, ("cadence",)))
        return {name: self._cadences[name] for name in names if name in self._cadences}

    def _keep_cadences(self, names: list[str], present: dict[tuple[str, str], tuple[str, Any, Any]]) -> None:
        self._cadences_read.update(names)
        for (name, kind_of_key), (kind, value, _pttl) in present.items():
            if kind_of_key == "cadence" and kind == "string":
                self._cadences[name] = value


# Which of KEYS exist, and what they hold, in one reply that is small when few do (most names have
# no pause and no cadence): {i, type, value (a hash as a flat list, a string as is; else ''), PTTL}
# for each that exists. Not for a Redis Cluster (the names' keys live in different slots).
READ_PRESENT_SCRIPT = """
local out = {}
for i = 1, #KEYS do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind ~= 'none' then
    local value = ''
    if kind == 'hash' then value = redis.call('HGETALL', KEYS[i])
    elseif kind == 'string' then value = redis.call('GET', KEYS[i]) end
    out[#out + 1] = {i, kind, value, redis.call('PTTL', KEYS[i])}
  end
end
return out
"""


def present_keys(connection: RedisConnection, names: list[str],
                 kinds: tuple[str, ...]) -> dict[tuple[str, str], tuple[str, Any, Any]]:
    """For each name and each of its ``kinds`` of key (``paused``, ``cadence``) that exists: (its
    type, its value, its PTTL); one script call per batch of keys (a pipeline of TYPE, HGETALL/GET
    and PTTL on a Cluster)."""
    wanted = [(name, kind) for name in names for kind in kinds]
    keys = [getattr(lock_keys(connection.prefix, name), kind) for name, kind in wanted]
    found: dict[tuple[str, str], tuple[str, Any, Any]] = {}

    def run() -> None:
        for start in range(0, len(keys), SCAN_BATCH):
            batch = keys[start : start + SCAN_BATCH]
            if not connection.is_cluster:
                for entry in connection.client.eval(READ_PRESENT_SCRIPT, len(batch), *batch):
                    index, what, value, pttl = entry
                    found[wanted[start + int(index) - 1]] = (text(what), value, pttl)
                continue
            pipe = connection.client.pipeline(transaction=False)
            for key in batch:
                pipe.type(key)
            kinds_found = [text(reply) for reply in pipe.execute(raise_on_error=False)]
            pipe = connection.client.pipeline(transaction=False)
            present = [(i, what) for i, what in enumerate(kinds_found) if what not in ("none", "")]
            for i, what in present:
                if what == "hash":
                    pipe.hgetall(batch[i])
                elif what == "string":
                    pipe.get(batch[i])
                else:
                    pipe.exists(batch[i])
                pipe.pttl(batch[i])
            replies = pipe.execute(raise_on_error=False) if present else []
            for (i, what), value, pttl in zip(present, replies[0::2], replies[1::2], strict=True):
                if isinstance(value, dict):  # the pipeline's HGETALL: as the script's flat list
                    value = [item for pair in value.items() for item in pair]
                found[wanted[start + i]] = (what, value if what in ("hash", "string") else "", pttl)

    connection.call(run)
    return found


def _key(field: object) -> str:
    return field.decode("utf-8", "replace") if isinstance(field, bytes) else str(field)


def _whole_ms(fields: dict[Any, Any]) -> bool:
    """Whether ``until_ms`` is whole ms (at most 15 digits), as the acquire scripts require (PAUSE_LUA)."""
    for key, value in fields.items():
        if _key(key) == "until_ms":
            raw = _key(value)
            return len(raw) <= 15 and raw.isascii() and raw.isdigit()
    return False
