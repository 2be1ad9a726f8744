"""Talking to Redis: a client whose every call is bounded in time, and what its failures mean.

The URL decides the client: redis:// and rediss:// (TLS, with the configured CA), unix
sockets, redis+sentinel:// (the master the Sentinels name) and redis+cluster:// (a Redis
Cluster client that learns the slot map), each with an ACL user and a password from the
URL or from a password file (docs/redis.md "Several hosts: Redis"). Whatever goes wrong on a call becomes
one of lockrun's errors here, in one place: BackendUnavailable (exit 69, never a
traceback, never the password), or ForeignData that names the key someone else wrote.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar, cast

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import ConnectionPool, parse_url
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel

from lockrun.backends.redis.keys import lock_keys, name_in_key
from lockrun.backends.redis.replies import int_or_none, text
from lockrun.backends.redis.script_call import ScriptCall
from lockrun.core.errors import BackendUnavailable, ForeignData, NothingTaken, UsageError
from lockrun.core.printable import quoted
from lockrun.core.redis_url import CLUSTER_SCHEMES, SENTINEL_SCHEMES, ClusterURL, parse_cluster_url, redact_url

# Everything redis-py raises for a server that cannot serve us (RedisClusterException is
# not a RedisError: it says a cluster's slot map could not be had).
REDIS_ERRORS = (redis.RedisError, redis.exceptions.RedisClusterException)

#: A plain or Sentinel master client, or a Redis Cluster client.
Client = redis.Redis | RedisCluster
T = TypeVar("T")


def _no_client_setinfo() -> dict[str, None]:
    """Skip CLIENT SETINFO on connect: two fewer round trips before the first real command."""
    if importlib.util.find_spec("redis.driver_info") is not None:  # redis-py with driver_info
        return {"driver_info": None}
    return {"lib_name": None, "lib_version": None}


def _bounded(timeout: float, connect_timeout: float) -> dict[str, Any]:
    """The options that bound every call (and skip what costs a round trip), for any client."""
    return dict(
        socket_timeout=timeout, socket_connect_timeout=connect_timeout,
        retry=Retry(NoBackoff(), 0),  # retries are the keeper's business, within the lease
        # RESP2: no HELLO (nor the maintenance-notification handshake RESP3 brings) before
        # the first real command, and it works with every Redis version.
        protocol=2, **_no_client_setinfo(),
    )


def _tls_reading(tls: bool) -> dict[str, Any]:
    """On TLS, replies are read by redis-py's pure-Python parser. Before a new connection's first
    command, redis-py 8.2's hiredis parser asks the raw socket whether it holds data already; the
    session tickets a TLS 1.3 server sends after the handshake are such data (at the TLS layer, not
    Redis's), and about one connection in five was refused ("Connection not ready": exit 69). The
    reply to CLIENT SETINFO, which lockrun skips (_no_client_setinfo), would have consumed them; the
    Python parser asks the TLS layer, which does. A handful of short replies per run: no cost."""
    if not tls:
        return {}
    from redis._parsers import _RESP2Parser  # redis-py's own name for it, from 5.0 to 8.2 (the CI legs)

    return {"parser_class": _RESP2Parser}


def _url_options(url: str) -> dict[str, Any]:
    options: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
    return options


def _connection_pool(
    url: str, timeout: float, ca: str | None = None, connect_timeout: float | None = None,
    password: str | None = None,
) -> ConnectionPool:
    # Build the pool from parse_url ourselves: ConnectionPool.from_url lets a
    # ?socket_timeout= in the URL win over our bound, and an unbounded call
    # against a paused Redis would let the command outlive its lease.
    options = _url_options(url)
    if password is not None and "password" not in options:
        options["password"] = password  # from a password file: a password in the URL says it more precisely
    options.update(_bounded(timeout, connect_timeout or timeout), health_check_interval=0)
    options.pop("retry_on_timeout", None)
    if ca and url.startswith("rediss://"):
        options.setdefault("ssl_ca_certs", ca)  # a ?ssl_ca_certs= in the URL says it more precisely
    options.update(_tls_reading(url.startswith("rediss://")))
    pool = ConnectionPool(**options)
    try:
        # A connection object is built lazily, at the first command; build one now (it does not
        # connect) so that a URL parameter the connection cannot take is a usage error here.
        pool.connection_class(**pool.connection_kwargs)
    except (TypeError, ValueError, redis.RedisError) as exc:
        raise ValueError(f"a query parameter does not fit this kind of connection ({exc})") from None
    return pool


def pooled_connection(pool: ConnectionPool) -> Any:
    """The pool's idle connection (the one the last call used), or a new one."""
    try:
        return pool.get_connection()
    except TypeError:  # redis-py before 5.3 asks for a command name (and ignores it)
        return pool.get_connection("BLPOP")  # type: ignore[call-arg,unused-ignore]


class RedisConnection:
    """The clients of one Redis deployment, and the translation of their errors."""

    def __init__(
        self, url: str, prefix: str, timeout: float, ca: str | None = None, connect_timeout: float | None = None,
        password: str | None = None,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.timeout = timeout
        self.connect_timeout = connect_timeout or timeout
        self.ca = ca
        self.redacted = redact_url(url)
        scheme = url.split("://", 1)[0]
        # redis+sentinel:// and redis+cluster://: several nodes (and, for Sentinel, a service).
        self.topology = parse_cluster_url(url) if scheme in CLUSTER_SCHEMES + SENTINEL_SCHEMES else None
        if self.topology is not None and self.topology.password is None and password is not None:
            self.topology = self.topology._replace(password=password)
        self.sentinel: Sentinel | None = None  # with redis+sentinel://: the Sentinels, who also know the replicas
        try:
            in_url = self.topology.password if self.topology else _url_options(url).get("password")
            self._password = in_url or password
            self.client = self.make_client(timeout)
        except ValueError as exc:
            raise UsageError(f"invalid Redis URL {self.redacted!r}: {exc}") from None

    @property
    def is_cluster(self) -> bool:
        """A Redis Cluster (not Sentinel): its pipelines split by node and cannot carry scripts."""
        return self.topology is not None and self.topology.service is None

    def make_client(self, timeout: float) -> Client:
        """A client whose every call is bounded by ``timeout``: plain Redis, Sentinel's master or a Cluster."""
        if self.topology is None:
            pool = _connection_pool(self.url, timeout, self.ca, self.connect_timeout, self._password)
            return redis.Redis(connection_pool=pool)
        if self.topology.service is not None:
            return self._sentinel_master(self.topology, self.topology.service, timeout)
        return self._cluster(self.topology, timeout)

    def _tls(self, topology: ClusterURL) -> dict[str, Any]:
        return {**({"ssl_ca_certs": self.ca} if topology.tls and self.ca else {}), **_tls_reading(topology.tls)}

    def _cluster(self, topology: ClusterURL, timeout: float) -> RedisCluster:
        nodes = [ClusterNode(host, port) for host, port in topology.nodes]  # type: ignore[no-untyped-call]  # redis-py leaves ClusterNode unannotated
        try:
            # Connects at once to learn the slot map; a cluster that cannot be reached is a 69.
            return RedisCluster(
                startup_nodes=nodes, username=topology.username, password=topology.password, ssl=topology.tls,
                **_bounded(timeout, self.connect_timeout), **self._tls(topology),
            )
        except REDIS_ERRORS as exc:
            raise self.unavailable(exc) from None

    def _sentinel_master(self, topology: ClusterURL, service: str, timeout: float) -> redis.Redis:
        """The master the Sentinels name; after a failover, the next connection finds the new one."""
        bounded = _bounded(timeout, self.connect_timeout)
        # Called through Any: redis-py annotates Sentinel and master_for from 8.x only, and one
        # source must type-check against every redis-py that pyproject.toml admits.
        sentinel: Sentinel = cast(Any, Sentinel)(topology.nodes, sentinel_kwargs=dict(bounded), **bounded)
        self.sentinel = sentinel
        master: redis.Redis = cast(Any, sentinel).master_for(
            service, **bounded, username=topology.username, password=topology.password, db=topology.db,
            ssl=topology.tls, **self._tls(topology),
        )
        return master

    # -- calls and their errors ------------------------------------------------------

    def call(self, fn: Callable[[], T], key: str | None = None) -> T:
        """``fn()``, with whatever Redis raises translated (``key``: the key the call is about)."""
        try:
            return fn()
        except REDIS_ERRORS as exc:
            raise self.unavailable(exc, key) from None

    def eval(self, call: ScriptCall) -> Any:
        """One script, one round trip: its reply, as redis-py gives it."""
        # EVAL (not EVALSHA + load) keeps every operation at exactly one round trip,
        # even on a Redis that just restarted with an empty script cache.
        keys = call.keys
        return self.call(lambda: self.client.eval(call.script, len(keys), *keys, *call.args),
                         keys[0] if keys else None)

    def blocking_pop(
        self, key: str, timeout: float,
        interruptible: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> bool:
        """BLPOP ``key`` for up to ``timeout`` seconds on the connection every other call of this
        client uses (one connection per lockrun, waiting or not): True if it popped something.

        The read is bounded by ``timeout`` plus the call timeout: a server that has not answered
        its own BLPOP by then is paused, or the connection was cut on the way (a proxy that drops
        idle connections): it is dropped, and the caller's next call (an acquire, bounded as every
        call is) says which. ``interruptible()`` is entered around the read only (a signal may cut
        it short there): on any exception the connection is dropped too, since a reply to it may
        still be on its way, and the next call makes a new one.
        """
        client = self.client
        if isinstance(client, RedisCluster):  # the node that serves the key's slot, and its pool
            node_client = self.call(lambda: client.get_redis_connection(
                client.get_node_from_key(key)), key)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            pool = node_client.connection_pool
        else:
            pool = client.connection_pool
        seconds = f"{math.ceil(timeout * 1000) / 1000:.3f}"  # rounded up: BLPOP 0 would block for ever
        connection = self.call(lambda: pooled_connection(pool), key)
        try:
            self.call(lambda: connection.send_command("BLPOP", key, seconds), key)
            with interruptible():
                answered = self.call(lambda: connection.can_read(timeout + self.timeout), key)
            if not answered:
                connection.disconnect()
                return False
            popped = self.call(lambda: connection.read_response(), key)
        except BaseException:
            connection.disconnect()
            raise
        finally:
            pool.release(connection)
        return popped is not None

    def memory_infos(self) -> list[tuple[str, object]]:
        """``INFO memory`` of the server, or of every master of a Cluster (each decides for the
        locks it holds): (where, what redis-py parsed), one command per server. Raises REDIS_ERRORS."""
        client = self.client
        if not isinstance(client, RedisCluster):
            return [(self.redacted, client.info("memory"))]
        replies = client.info("memory", target_nodes=RedisCluster.PRIMARIES)
        if isinstance(replies, dict) and "maxmemory_policy" not in replies and replies:
            return [(f"{self.redacted} (node {text(node)})", info) for node, info in sorted(replies.items())]
        return [(self.redacted, replies)]

    def _cut_off_for_want_of_a_password(self, exc: Exception) -> bool:
        """Whether a connection the server cut was an unauthenticated one it would not serve.

        Redis 7 closes an unauthenticated connection that sends a long command (our scripts are
        long); when it closes before redis-py reads its error line, all that is left is a broken
        pipe. Only then, and only without a password, one PING on a new connection asks why: a
        failure costs a round trip, a run never does.
        """
        if self._password or not isinstance(exc, redis.exceptions.ConnectionError):
            return False
        reason = str(exc)
        if not any(cut in reason for cut in ("Broken pipe", "Connection reset", "Connection closed", "Error 32",
                                             "Error 104")):
            return False
        try:
            self.client.ping()
        except REDIS_ERRORS as probe:
            text = str(probe)
            return "NOAUTH" in text or "Authentication required" in text or "unauthenticated" in text
        return False

    def unavailable(self, exc: Exception, key: str | None = None) -> BackendUnavailable:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, MasterNotFoundError):
            reason = _no_master(reason)
        if self._password:
            reason = reason.replace(self._password, "***")
        if ("unauthenticated" in reason or "NOAUTH" in reason or "Authentication required" in reason
                or self._cut_off_for_want_of_a_password(exc)):
            # Redis 7 answers an unauthenticated client's long command with a protocol error.
            return BackendUnavailable(
                f"Redis at {self.redacted} requires a password and none was given: put it in the URL"
                " (redis://:PASSWORD@host...), or better in a file named by redis_password_file in the config"
                " or LOCKRUN_REDIS_PASSWORD_FILE"
            )
        if isinstance(exc, redis.exceptions.OutOfMemoryError) or "used memory > 'maxmemory'" in reason:
            # A full noeviction server refuses any script whose first write needs memory: nothing was taken.
            return NothingTaken(
                f"Redis at {self.redacted} is out of memory (used memory is above its maxmemory, and its"
                " maxmemory-policy refuses new keys rather than evicting any): free memory on the server or raise"
                " its maxmemory; the command did not run"
            )
        if "WRONGTYPE" in reason or "not an integer" in reason:
            name = (name_in_key(self.prefix, key) or "NAME") if key else None
            return self._foreign_data(name, reason.split(" script: ")[0])
        return BackendUnavailable(f"Redis at {self.redacted} is unavailable: {_short(reason)}")

    def _foreign_data(self, name: str | None, reason: str) -> ForeignData:
        """A script failed on a key lockrun did not write: say which key, and how to get rid of it."""
        odd = self._odd_keys(name) if name else []
        where = "; ".join(found for found, _ in odd) or reason
        message = f"Redis at {self.redacted} holds data for lock {name or '?'!r} that lockrun did not write ({where})"
        if name and any(not clearable for _, clearable in odd):
            keys = lock_keys(self.prefix, name)
            message += (f"; lockrun never resets a fence counter (fencing tokens must only grow): repair {keys.fence}"
                        " by hand, for example SET it to a number above every token handed out")
        elif name:
            message += f"; see lockrun status {name}, and clear it with lockrun unlock --force {name}"
        return ForeignData(message)

    def _odd_keys(self, name: str) -> list[tuple[str, bool]]:
        """(what is wrong, whether unlock can clear it) for each key of ``name`` of an unexpected type."""
        keys = lock_keys(self.prefix, name)
        expected = [(keys.lock, "string"), (keys.info, "hash"), (keys.fence, "string"), (keys.preempt, "string"),
                    (keys.slots, "zset"), (keys.slot_count, "string"), (keys.wake, "list")]
        try:
            pipe = self.client.pipeline(transaction=False)
            for key, _ in expected:
                pipe.type(key)
            kinds = [text(kind) for kind in pipe.execute()]
            fence = self.client.get(keys.fence) if kinds[2] == "string" else None
        except REDIS_ERRORS:
            return []  # the server said enough already: the generic line will do
        odd = [(f"{key} is a {kind}, not a {want}", key != keys.fence)
               for (key, want), kind in zip(expected, kinds, strict=True) if kind not in ("none", want)]
        if fence is not None and int_or_none(fence) is None:
            odd.append((f"{keys.fence} holds {quoted(text(fence), 40)}, not a number", False))
        return odd

    @staticmethod
    def close(client: Client | None) -> None:
        """Close ``client`` and drop its connections, quietly: we are done with it."""
        if client is None:
            return
        try:
            client.close()
            if isinstance(client, redis.Redis):  # a cluster client has no connection pool of its own
                client.connection_pool.disconnect()
        except REDIS_ERRORS:
            pass


#: How much of a client's own words a message keeps: one line a person reads, not a client's repr.
MAX_REASON = 300


def _short(reason: str) -> str:
    return reason if len(reason) <= MAX_REASON else reason[:MAX_REASON - 1] + "…"


def _no_master(reason: str) -> str:
    """redis-py's "No master found for 'm' : <repr of each Sentinel's client> - network:…" (2,800
    characters for four Sentinels) as what each Sentinel said: "no Sentinel named the master 'm'
    (127.0.0.1:26379: Connection refused; …)"."""
    service = re.search(r"No master found for ('[^']*')", reason)
    said = re.findall(r"connecting to (\S+?)\.? ([^.,]+)", reason)
    found = f"no Sentinel of the URL named the master {service.group(1) if service else ''}".rstrip()
    return found + (f" ({'; '.join(f'{where}: {why}' for where, why in said)})" if said else "")
