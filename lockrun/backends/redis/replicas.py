"""--replicas: a lease that counts only once enough replicas have it (docs/redis.md
"Leases that survive a failover: --replicas").

Redis replicates asynchronously: a master that fails over right after granting a lock can
hand it out again from a replica that never saw it. With ``--replicas N`` every acquire
and renewal is followed by ``WAIT N t`` on the same connection, in the same round trip,
and a grant or renewal that fewer replicas acknowledged does not count. ``--replicas
all`` asks the deployment how many replicas there are.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import redis

from lockrun.backends.redis.client import REDIS_ERRORS, Client, RedisConnection
from lockrun.backends.redis.keys import lock_keys
from lockrun.backends.redis.replies import script_int, text
from lockrun.backends.redis.script_call import ScriptCall
from lockrun.backends.redis.scripts import renew_call
from lockrun.backends.values import Lease
from lockrun.core.clock import utc_now_iso
from lockrun.core.defaults import ALL_REPLICAS
from lockrun.core.errors import ReplicasMissing

#: With --replicas, WAIT may block for this share of the call timeout, less WAIT_LATE, so
#: that its reply always arrives before the socket's read timeout gives up on it.
WAIT_SHARE = 0.75
#: Redis notices that a WAIT ran out of time only at its next cron tick (hz 10: up to 100 ms
#: late); acknowledgements, on the other hand, end a WAIT at once.
WAIT_LATE = 0.1


class Acknowledged(NamedTuple):
    """A script's reply and what WAIT (and ROLE, when asked) said right behind it."""

    reply: Any  # the script's reply, as redis-py gives it
    acks: int  # replicas that have every write this connection made, script included
    in_sync: int | None = None  # replicas in sync with the master, as ROLE lists them


def _replicas_word(count: int) -> str:
    return "replica" if count == 1 else "replicas"


def _in_sync(role: Any) -> int:
    """How many replicas ROLE lists as in sync (0 when the node is not a master)."""
    if not isinstance(role, list) or len(role) < 3 or text(role[0]) != "master":
        return 0
    return len(role[2]) if isinstance(role[2], list) else 0


class ReplicaWait:
    """Scripts followed by WAIT, and the verdict on what the replicas acknowledged."""

    def __init__(self, connection: RedisConnection, replicas: int | str) -> None:
        self._connection = connection
        self.replicas = replicas  # --replicas: a number, or ALL_REPLICAS

    @property
    def every(self) -> bool:
        return self.replicas == ALL_REPLICAS

    def known(self, key: str) -> int:
        """How many replicas the deployment manager knows for the master of ``key``, in sync or
        not: what the Sentinels list (not down), or the Cluster's slot map; 0 for a plain master.

        ROLE lists only the replicas in sync with the master *now*; a replica that the Sentinels
        are promoting has already left that list while the old master still takes writes, and
        its other replicas acknowledge them, only to lose them when they follow the new master.
        """
        connection, client = self._connection, self._connection.client
        if connection.sentinel is not None and connection.topology is not None and connection.topology.service:
            # Through Any: redis-py annotates discover_slaves from 8.x only (see client.py).
            sentinel: Any = connection.sentinel
            service = connection.topology.service
            return connection.call(lambda: len(sentinel.discover_slaves(service)))
        if isinstance(client, redis.RedisCluster):
            slot: int = client.keyslot(key)  # type: ignore[no-untyped-call]  # redis-py leaves keyslot unannotated
            return connection.call(lambda: max(0, len(client.nodes_manager.slots_cache.get(slot, [])) - 1))
        return 0

    def _master_of(self, key: str) -> Client:
        """A client of the master that holds ``key``: on a Cluster, the node owning its slot."""
        client = self._connection.client
        if not isinstance(client, redis.RedisCluster):
            return client
        return client.get_redis_connection(client.get_node_from_key(key))  # type: ignore[no-untyped-call]  # redis-py leaves get_node_from_key unannotated

    def eval_then_wait(self, call: ScriptCall, replicas: int, ask_role: bool = False,
                       budget: float | None = None) -> Acknowledged:
        """EVAL, then ``WAIT replicas t`` behind it in one pipeline: still one round trip.

        WAIT counts the replicas that have every write *this connection* made, so it must
        follow the script on the same connection, which a pipeline guarantees; on a Cluster
        both go to the node that owns the keys' slot, so each name's own master is asked
        about its own replicas. ``t`` is a share of ``budget`` (the call timeout), so the
        reply comes before the socket gives up. With ``ask_role``, ROLE goes first and
        says how many replicas are in sync with that master (``--replicas all``).
        """
        wait_ms = self.wait_ms(budget)
        key = call.keys[0]
        client = self._master_of(key)
        for attempt in (1, 2):
            pipe = client.pipeline(transaction=False)
            if ask_role:
                pipe.execute_command("ROLE")
            pipe.eval(call.script, len(call.keys), *call.keys, *call.args)
            pipe.execute_command("WAIT", replicas, wait_ms)
            try:
                replies = pipe.execute()
            except redis.exceptions.MovedError as exc:
                cluster = self._connection.client
                if attempt == 1 and isinstance(cluster, redis.RedisCluster):
                    cluster.nodes_manager.initialize()  # the slot moved: learn the map again, ask its new owner
                    client = self._master_of(key)
                    continue
                raise self._connection.unavailable(exc, key) from None
            except REDIS_ERRORS as exc:
                raise self._connection.unavailable(exc, key) from None
            finally:
                pipe.reset()
            in_sync = _in_sync(replies.pop(0)) if ask_role else None
            return Acknowledged(reply=replies[0], acks=script_int(replies[1]), in_sync=in_sync)
        raise AssertionError("unreachable")  # pragma: no cover

    def wait_ms(self, budget: float | None = None) -> int:
        """WAIT's timeout: its reply must come back within ``budget``, the call timeout."""
        timeout = self._connection.timeout if budget is None else budget
        return max(1, round((timeout * WAIT_SHARE - WAIT_LATE) * 1000))

    def too_few(self, what: str, acks: int, needed: int) -> str:
        within = self.wait_ms() / 1000
        return f"only {acks} of {needed} {_replicas_word(needed)} acknowledged the {what} within {within:g}s"

    def confirmed(self, lease: Lease, prefix: str, got: Acknowledged, known: int) -> Lease:
        """The lease, once as many replicas as --replicas asks have it; else ReplicasMissing
        (and the caller gives the lock back: nothing may run under it). ``known``: the replicas
        the Sentinels or the Cluster know (--replicas all)."""
        if not self.every:
            needed = int(self.replicas)
        else:
            needed = max(known, got.in_sync or 0)
            if needed == 0:
                raise ReplicasMissing(
                    f"--replicas all, but the master of {lease.name!r} has no replica in sync (ROLE lists none);"
                    " the command did not run (--replicas 0 is for a Redis without replicas)", 0, 0,
                )
        lease = lease._replace(replicas=needed)
        acks = got.acks
        if self.every and acks < needed and needed > max(1, known):
            # --replicas all waited for fewer replicas than ROLE then listed, and they had not all
            # acknowledged by the time WAIT returned: wait for all of them behind a renewal, on
            # whichever connection (the renewal's write follows the grant's in the replication
            # stream: a replica that has one has both).
            left = self._connection.timeout - (time.monotonic() - lease.sent_at)
            if left * WAIT_SHARE - WAIT_LATE > 0.005:
                renewal = renew_call(lock_keys(prefix, lease.name), lease, utc_now_iso(), None)
                again = self.eval_then_wait(renewal, needed, budget=left)
                acks = again.acks if script_int(again.reply) in (1, 2) else 0
        if acks < needed:
            too_few = self.too_few(f"lock on {lease.name!r}", acks, needed)
            raise ReplicasMissing(f"{too_few} (--replicas {self.replicas}); the command did not run", acks, needed)
        return lease
