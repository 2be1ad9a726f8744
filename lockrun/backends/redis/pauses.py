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
    def __init__(self, connection: RedisConnection, keep_ms: int, registry: str | None) -> None:
        self._connection = connection
        self._keep_ms = keep_ms
        self._registry = registry

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
                names = sorted(NameRegistry(connection, self._keep_ms).names(("paused",)))
        found: dict[str, Paused] = {}
        for name, (kind, value, pttl) in present_keys(connection, names, "paused").items():
            key = lock_keys(connection.prefix, name).paused
            if kind != "hash":
                found[name] = Paused(name=name, problem=written_by_others(f"{key} is a {kind}, not a hash"))
                continue
            fields = pairs(value)
            problem = None
            if "until_ms" not in {_key(k) for k in fields}:
                problem = written_by_others(f"{key} has no until_ms")
            elif (int_or_none(pttl) or -1) < 0:
                problem = written_by_others(f"{key} has no expiry")
            found[name] = Paused.from_fields(name, fields, problem)
        return found


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


def present_keys(connection: RedisConnection, names: list[str], kind: str) -> dict[str, tuple[str, Any, Any]]:
    """For each name whose ``kind`` key (``paused``, ``cadence``) exists: (its type, its value, its
    PTTL); one script call per batch of names (a pipeline of TYPE, HGETALL/GET and PTTL on a Cluster)."""
    keys = [getattr(lock_keys(connection.prefix, name), kind) for name in names]
    found: dict[str, tuple[str, Any, Any]] = {}

    def run() -> None:
        for start in range(0, len(keys), SCAN_BATCH):
            batch = keys[start : start + SCAN_BATCH]
            if not connection.is_cluster:
                for entry in connection.client.eval(READ_PRESENT_SCRIPT, len(batch), *batch):
                    index, what, value, pttl = entry
                    found[names[start + int(index) - 1]] = (text(what), value, pttl)
                continue
            pipe = connection.client.pipeline(transaction=False)
            for key in batch:
                pipe.type(key)
            kinds = [text(reply) for reply in pipe.execute(raise_on_error=False)]
            pipe = connection.client.pipeline(transaction=False)
            present = [(i, what) for i, what in enumerate(kinds) if what not in ("none", "")]
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
                found[names[start + i]] = (what, value if what in ("hash", "string") else "", pttl)

    connection.call(run)
    return found


def read_cadences(connection: RedisConnection, names: list[str]) -> dict[str, object]:
    """Each name's declared cadence as stored (raw: core/cadence parses it); a key of another type
    reads as nothing declared."""
    return {name: value for name, (kind, value, _pttl) in present_keys(connection, names, "cadence").items()
            if kind == "string"}


def _key(field: object) -> str:
    return field.decode("utf-8", "replace") if isinstance(field, bytes) else str(field)
