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
from lockrun.backends.redis.replies import int_or_none, pairs, script_int
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
        type reads as a malformed pause."""
        connection = self._connection
        if names is None:
            if connection.is_cluster:
                names = sorted(connection.call(lambda: scan_names(connection.client, connection.prefix, ("paused",))))
            else:
                names = sorted(NameRegistry(connection, self._keep_ms).names(("paused",)))
        wanted = names
        replies: list[Any] = []

        def run() -> None:
            for start in range(0, len(wanted), SCAN_BATCH):
                pipe = connection.client.pipeline(transaction=False)
                for name in wanted[start : start + SCAN_BATCH]:
                    key = lock_keys(connection.prefix, name).paused
                    pipe.hgetall(key)
                    pipe.pttl(key)
                replies.extend(pipe.execute(raise_on_error=False))

        connection.call(run)
        found: dict[str, Paused] = {}
        for name, reply, pttl in zip(wanted, replies[0::2], replies[1::2], strict=True):
            if isinstance(reply, Exception):
                kind = "not a hash" if "WRONGTYPE" in str(reply) else str(reply)
                found[name] = Paused(name=name, problem=written_by_others(f"{lock_keys(connection.prefix, name).paused}"
                                                                          f" is {kind}"))
            elif reply:
                fields = reply if isinstance(reply, dict) else {}
                problem = None
                if "until_ms" not in {_key(k) for k in fields}:
                    problem = written_by_others("no until_ms")
                elif int_or_none(pttl) is None or (int_or_none(pttl) or 0) < 0:
                    problem = written_by_others("no expiry")
                found[name] = Paused.from_fields(name, fields, problem)
        return found


def read_cadences(connection: RedisConnection, names: list[str]) -> dict[str, object]:
    """Each name's declared cadence as stored (raw: core/cadence parses it), pipelined in batches;
    a key of another type reads as nothing declared."""
    replies: list[Any] = []

    def run() -> None:
        for start in range(0, len(names), SCAN_BATCH):
            pipe = connection.client.pipeline(transaction=False)
            for name in names[start : start + SCAN_BATCH]:
                pipe.get(lock_keys(connection.prefix, name).cadence)
            replies.extend(pipe.execute(raise_on_error=False))

    connection.call(run)
    return {name: reply for name, reply in zip(names, replies, strict=True)
            if reply is not None and not isinstance(reply, Exception)}


def _key(field: object) -> str:
    return field.decode("utf-8", "replace") if isinstance(field, bytes) else str(field)
