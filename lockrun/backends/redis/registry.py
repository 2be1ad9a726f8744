"""The registry of names (docs/redis.md "Redis keys", docs/fleet.md "One fleet, one memory"): which
names to read.

The acquire and release scripts add their name to one sorted set, scored by the server's TIME
of the write, and drop the names whose last write is older than ``fleet_keep_days`` (no round
trip of their own). ``status``, ``history --fleet``, ``metrics --fleet`` and ``timeline
--fleet`` read that set instead of walking the keyspace, so their cost grows with lockrun's
names, not with the other keys of a shared Redis. A key of another type where the registry
belongs (someone else's) is walked around: the readers SCAN the keyspace (never KEYS) instead.
A Redis Cluster has no registry (one key cannot share every name's slot): there the readers
SCAN each node with MATCH.
"""

from __future__ import annotations

from redis.exceptions import ResponseError

from lockrun.backends.redis.client import RedisConnection
from lockrun.backends.redis.keys import registry_key, scan_every_name, scan_names
from lockrun.backends.redis.replies import text


def _usable(name: str) -> bool:
    return bool(name) and "{" not in name and "}" not in name


class NameRegistry:
    """The names of one Redis' locks and fleet records, from the registry (or SCAN on a Cluster)."""

    def __init__(self, connection: RedisConnection) -> None:
        self._connection = connection
        self._names: set[str] | None = None  # read once per command

    def names(self, kinds: tuple[str, ...]) -> set[str]:
        """Every registered name (on a Cluster: every name with a key of one of ``kinds``). A
        registered name may have none of its keys left: readers find nothing under it."""
        if self._connection.is_cluster:
            return set(self._connection.call(lambda: scan_names(self._connection.client, self._connection.prefix,
                                                                kinds)))
        if self._names is None:
            self._names = self._connection.call(self._read)
        return set(self._names)

    def _read(self) -> set[str]:
        client = self._connection.client
        key = registry_key(self._connection.prefix)
        try:
            members = {text(member) for member in client.zrange(key, 0, -1)}
        except ResponseError:  # not a sorted set: someone else's key; walk the keyspace every time
            return {name for name in scan_every_name(client, self._connection.prefix) if _usable(name)}
        return {name for name in members if _usable(name)}
