"""``Backend.audit`` for Redis: the deployment, every master a name may land on, and (asked for)
the live probe, gathered read-only (docs/operating.md "Checking the setup: lockrun doctor").
``views/doctor.py`` judges what this finds.
"""

from __future__ import annotations

from collections.abc import Callable

from redis.connection import parse_url

from lockrun.backends.audit import BackendAudit, ProbeFacts
from lockrun.backends.redis.client import REDIS_ERRORS, RedisConnection
from lockrun.backends.redis.needs import needs, trial_keys
from lockrun.backends.redis.server_facts import server_facts
from lockrun.backends.redis.topology import masters, topology


def _url_user(connection: RedisConnection) -> str | None:
    """The ACL user the URL names (None: the default user, or the URL does not say)."""
    if connection.topology is not None:
        return connection.topology.username or None
    try:
        options = parse_url(connection.url)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
    except ValueError:
        return None
    user = options.get("username")
    return str(user) if user else None


def audit(connection: RedisConnection, replicas: bool, probe: Callable[[], ProbeFacts] | None) -> BackendAudit:
    """What the deployment and each of its masters say (``unreachable`` when one could not be
    asked), and what ``probe`` finds, when given. ``replicas``: runs are configured to wait for them."""
    where = connection.redacted
    needed = needs(replicas=replicas)
    keys = trial_keys(connection.prefix, connection.is_cluster)
    try:
        found = topology(connection)
        servers = tuple(server_facts(client, place, needed, keys, _url_user(connection))
                        for place, client in masters(connection))
    except REDIS_ERRORS as exc:
        return BackendAudit("redis", where, unreachable=str(connection.unavailable(exc)))
    return BackendAudit("redis", where, topology=found, servers=servers, probe=probe() if probe else None)
