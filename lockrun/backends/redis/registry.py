"""The registry of names (README "Redis keys", "One fleet, one memory"): which names to read.

The acquire and release scripts add their name to one sorted set, scored by the server's TIME
of the write, and drop the names whose last write is older than ``fleet_keep_days`` (no round
trip of their own). ``status``, ``history --fleet``, ``metrics --fleet`` and ``timeline
--fleet`` read that set instead of walking the keyspace, so their cost grows with lockrun's
names, not with the other keys of a shared Redis.

Upgrade: names an older lockrun wrote are in no registry. The first reader that finds the
registry without its REGISTRY_SEEDED member walks the keyspace once (SCAN, never KEYS), adds
every name it finds and that member; after that, never again, until the registry itself
expires (no lockrun wrote for ``fleet_keep_days``). A Redis Cluster has no registry (one key
cannot share every name's slot): there the readers SCAN each node with MATCH, as before.
"""

from __future__ import annotations

from redis.exceptions import ResponseError

from lockrun.backends.redis.client import RedisConnection
from lockrun.backends.redis.keys import REGISTRY_SEEDED, registry_key, scan_every_name, scan_names
from lockrun.backends.redis.replies import text

# Add the names a SCAN found without lowering a newer score (NX), mark the registry seeded, and
# give it the retention's TTL if it has none. KEYS: registry. ARGV: keep_ms, '1' to mark it seeded
# (the last batch), then names.
SEED_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 3, #ARGV do redis.call('ZADD', KEYS[1], 'NX', now, ARGV[i]) end
if ARGV[2] == '1' then redis.call('ZADD', KEYS[1], '+inf', '""" + REGISTRY_SEEDED + """') end
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
"""
SEED_BATCH = 1000


def _usable(name: str) -> bool:
    return bool(name) and "{" not in name and "}" not in name


class NameRegistry:
    """The names of one Redis' locks and fleet records, from the registry (or SCAN on a Cluster)."""

    def __init__(self, connection: RedisConnection, keep_ms: int) -> None:
        self._connection = connection
        self._keep_ms = keep_ms
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
        if REGISTRY_SEEDED not in members:
            found = {name for name in scan_every_name(client, self._connection.prefix) if _usable(name)}
            listed = sorted(found)
            try:
                starts = range(0, max(len(listed), 1), SEED_BATCH)
                for start in starts:
                    client.eval(SEED_SCRIPT, 1, key, self._keep_ms, int(start == starts[-1]),
                                *listed[start : start + SEED_BATCH])
            except ResponseError:  # refused (an ACL, a read-only server): the next reader walks again
                pass
            members |= found
        return {name for name in members if _usable(name)}
