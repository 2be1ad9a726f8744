"""The deployment behind a Redis URL, for ``lockrun doctor``: which servers a name may land on
(the server; the master the Sentinels name; every master of a Cluster), and what the Sentinels or
the Cluster say of themselves. Read-only: SENTINEL and CLUSTER are only asked.
"""

from __future__ import annotations

from typing import Any, cast

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from lockrun.backends.audit import ClusterFacts, SentinelFacts, Topology, Unread
from lockrun.backends.redis.client import REDIS_ERRORS, RedisConnection
from lockrun.backends.redis.raw import RawCalls
from lockrun.backends.redis.replies import int_or_none, text
from lockrun.backends.redis.server_facts import parse_info


def _address(client: redis.Redis) -> str:
    options = client.connection_pool.connection_kwargs
    return f"{options.get('host', '?')}:{options.get('port', '?')}"


def masters(connection: RedisConnection) -> list[tuple[str, redis.Redis]]:
    """(where, a client of it) for every master a name may land on: one, or each of a Cluster's."""
    client = connection.client
    if not isinstance(client, RedisCluster):
        return [(connection.redacted, client)]
    return [(node.name, client.get_redis_connection(node)) for node in masters_of(client)]


def _pairs(reply: object) -> dict[str, object]:
    if not isinstance(reply, list):
        return {}
    return {text(key): value for key, value in zip(reply[0::2], reply[1::2], strict=False)}


def _sentinel(connection: RedisConnection, service: str) -> SentinelFacts:
    sentinel: Any = connection.sentinel
    clients = cast(list[redis.Redis], sentinel.sentinels)
    given = tuple(_address(client) for client in clients)
    silent: list[tuple[str, str]] = []
    found_masters: list[str] = []
    master: dict[str, object] = {}
    replicas: int | None = None
    for client in clients:
        try:
            address, facts, listed = RawCalls(client).batch([
                ("SENTINEL", "GET-MASTER-ADDR-BY-NAME", service), ("SENTINEL", "MASTER", service),
                ("SENTINEL", "REPLICAS", service)])
        except REDIS_ERRORS as exc:
            silent.append((_address(client), str(exc) or type(exc).__name__))
            continue
        if isinstance(address, ResponseError) or not isinstance(address, list) or len(address) != 2:
            silent.append((_address(client), str(address) if isinstance(address, ResponseError)
                           else f"it does not know {service!r}"))
            continue
        named = f"{text(address[0])}:{text(address[1])}"
        if named not in found_masters:
            found_masters.append(named)
        if not master:
            master = _pairs(facts)
            replicas = len(listed) if isinstance(listed, list) else None
    return SentinelFacts(
        service=service, given=given, silent=tuple(silent), masters=tuple(found_masters),
        quorum=int_or_none(master.get("quorum")), flags=text(master.get("flags", "")), replicas=replicas,
        sentinels_known=(n + 1 if (n := int_or_none(master.get("num-other-sentinels"))) is not None else None),
    )


def _cluster(client: RedisCluster) -> ClusterFacts:
    nodes = masters_of(client)
    first = client.get_redis_connection(nodes[0]) if nodes else None
    state: str | Unread = Unread("no master in the slot map")
    ok = None
    if first is not None:
        (reply,) = RawCalls(first).batch([("CLUSTER", "INFO")])
        if isinstance(reply, ResponseError):
            state = Unread(str(reply))
        else:
            fields = parse_info(reply)
            state = fields.get("cluster_state") or Unread("CLUSTER INFO names no cluster_state")
            ok = int_or_none(fields.get("cluster_slots_ok"))
    return ClusterFacts(state=state, slots_ok=ok, masters=tuple(node.name for node in nodes))


def masters_of(client: RedisCluster) -> list[Any]:
    """A Cluster's masters (redis-py's ClusterNode), by address, as its slot map names them."""
    return sorted(client.get_primaries(), key=lambda node: node.name)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated


def topology(connection: RedisConnection) -> Topology:
    """What kind of deployment the URL names, and what it says of itself. Raises REDIS_ERRORS."""
    client = connection.client
    if isinstance(client, RedisCluster):
        return Topology("cluster", cluster=_cluster(client))
    if connection.sentinel is not None and connection.topology is not None and connection.topology.service:
        return Topology("sentinel", sentinel=_sentinel(connection, connection.topology.service))
    return Topology("standalone")
