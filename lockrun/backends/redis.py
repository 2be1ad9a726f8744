"""The Redis backend: one Lua script per operation, every call bounded in time.

Keys (README, "Redis keys") are hash-tagged with ``{NAME}`` so that every key of one lock
lives in one Redis Cluster slot and a script may touch all of them.
"""

from __future__ import annotations

import importlib.util
import time
from typing import NamedTuple

import redis
from redis.backoff import NoBackoff
from redis.connection import ConnectionPool, parse_url
from redis.retry import Retry

from lockrun.backends import (
    ALL_REPLICAS,
    LOST,
    PREEMPTED,
    RENEWED,
    Duplicate,
    FleetRecord,
    FleetRetention,
    Holder,
    Lease,
    OnceKey,
)
from lockrun.backends.redis_url import CLUSTER_SCHEMES, SENTINEL_SCHEMES, parse_cluster_url, redact_url
from lockrun.clock import utc_now_iso
from lockrun.errors import BackendUnavailable, ForeignData, ReplicasMissing, SlotsMismatch, UsageError
from lockrun.record import fields_from_row, row_json, tail_for_fleet

# The fleet record (README "One fleet, one memory"), written inside the lock scripts so that
# it costs no round trip. Every write goes through redis.pcall: a record that cannot be
# written (a key of the wrong type, no memory) never fails the lock operation around it.
#
# record_end(runs, last, counts, ended, a, released): ARGV[a..] = maxlen, keep_ms, status
# ('' records nothing), output_tail, ended_at, at_once ('1': a row that is over at once, an
# unlock: recorded with a start event before its end, and only if the script cleared
# something), run_id, the row as JSON (``last`` keeps it so: status reads thousands), then
# the run's field/value pairs (the stream keeps those, for people reading it with redis-cli).
# The ``ended`` marker makes a release that is retried after a lost reply record it once.
FLEET_LUA = """
local function fleet_touch(keep, ...)
  for _, key in ipairs({...}) do redis.pcall('PEXPIRE', key, keep) end
end
local function record_end(runs, last, counts, ended, a, released)
  local status = ARGV[a + 2]
  if status == '' or (ARGV[a + 5] == '1' and released == 0) then return end
  local fresh = redis.pcall('SET', ended, '1', 'NX', 'PX', 600000)
  if type(fresh) ~= 'table' or not fresh.ok then return end
  local maxlen, keep = ARGV[a], ARGV[a + 1]
  local fields = {}
  for i = a + 8, #ARGV do fields[#fields + 1] = ARGV[i] end
  if ARGV[a + 5] == '1' then
    redis.pcall('XADD', runs, 'MAXLEN', '~', maxlen, '*', 'event', 'start', unpack(fields))
  end
  redis.pcall('XADD', runs, 'MAXLEN', '~', maxlen, '*', 'event', 'end', unpack(fields))
  if ARGV[a + 5] ~= '1' then  -- an unlock is not a run: the last run stays the last run
    local success = redis.pcall('HGET', last, 'last_success_at')
    if status == 'succeeded' then success = ARGV[a + 4] end
    redis.pcall('DEL', last)
    redis.pcall('HSET', last, 'run_id', ARGV[a + 6], 'row', ARGV[a + 7])
    if type(success) == 'string' then redis.pcall('HSET', last, 'last_success_at', success) end
    if ARGV[a + 3] ~= '' then redis.pcall('HSET', last, 'output_tail', ARGV[a + 3]) end
  end
  redis.pcall('HINCRBY', counts, status, 1)
  fleet_touch(keep, runs, last, counts)
end
local function record_start(runs, maxlen, keep, fence, first)
  local shared = {run_id = true, host = true, pid = true, command = true, started_at = true, ttl_ms = true}
  local fields = {'fencing_token', fence}
  for i = first, #ARGV - 1, 2 do
    if shared[ARGV[i]] then
      fields[#fields + 1] = ARGV[i]
      fields[#fields + 1] = ARGV[i + 1]
    end
  end
  redis.pcall('XADD', runs, 'MAXLEN', '~', maxlen, '*', 'event', 'start', unpack(fields))
  fleet_touch(keep, runs)
end
local function record_count(counts, keep, status)
  redis.pcall('HINCRBY', counts, status, 1)
  fleet_touch(keep, counts)
end
"""

# Take the lock, advance the fence and describe the holder, all or nothing; record the start
# (or count a busy or duplicate outcome) in the fleet record.
# KEYS: lock, info, fence, preempt, slots, runs, counts[, done]. ARGV: token, ttl_ms,
# last_try ('1': a busy answer is this run's outcome, count it), maxlen, keep_ms, then info
# field/value pairs (the start event takes the ones that are not secret).
# Returns {1, fence} when taken (a preemption request meant for the previous holder is
# dropped); {2} when the --once key (KEYS[8]) is already done, in which case the lock is
# given straight back; {-1, n} when the name is in use with --slots n; else {0, pttl,
# info-hash-as-flat-list}. The fence is max(counter + 1, server TIME in µs), stored back:
# it never goes back, not even after a restart without persistence, a lossy failover or a
# FLUSHALL, as long as the server clocks do not (µs since 1970 fit a Lua double exactly).
# INCRBY 0 reads the counter and fails, as INCR did, on one that is no number: never reset.
ACQUIRE_SCRIPT = FLEET_LUA + """
redis.replicate_commands()
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {-1, tonumber(redis.call('GET', KEYS[5] .. ':n') or 0)}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if KEYS[8] and redis.call('EXISTS', KEYS[8]) == 1 then
    redis.call('DEL', KEYS[1])
    record_count(KEYS[7], ARGV[5], 'duplicate')
    return {2}
  end
  local now = redis.call('TIME')
  local fence = math.max(redis.call('INCRBY', KEYS[3], 0) + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('SET', KEYS[3], string.format('%.0f', fence))
  redis.call('DEL', KEYS[2], KEYS[4])
  redis.call('HSET', KEYS[2], 'fencing_token', string.format('%.0f', fence), unpack(ARGV, 6))
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  record_start(KEYS[6], ARGV[4], ARGV[5], fence, 6)
  return {1, fence}
end
if ARGV[3] == '1' then
  record_count(KEYS[7], ARGV[5], 'busy')
end
return {0, redis.call('PTTL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
"""

# Reset (never add to) the lease if the token is still ours; record the heartbeat.
# KEYS: lock, info, preempt. ARGV: token, ttl_ms, heartbeat_at, child_pid.
# Returns 1 renewed, 2 renewed but another run asked to replace us (--replace), 0 lost.
RENEW_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('HSET', KEYS[2], 'heartbeat_at', ARGV[3], 'child_pid', ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  if redis.call('EXISTS', KEYS[3]) == 1 then
    return 2
  end
  return 1
end
return 0
"""

# Mark the --once key done (if given); then, if the token is still ours, either keep the
# lock taken for the rest of --min-hold ("cooling": its TTL becomes the remainder, nobody
# is woken) or delete it and wake one waiter (BLPOP); then record the run's end in the
# fleet record, whether the token was still ours or not (a lost lease ended a run too).
# KEYS: lock, info, wake, runs, last, counts, ended[, done]. ARGV: token, wake_ttl_ms,
# hold_ms, cooling_until, remember_ms, done_value, then the record (see FLEET_LUA) from
# ARGV[7]. Returns 1 released (or cooling), 0 not ours. A done mark does not depend on the
# token: the command did succeed, even if its lease was lost under --on-lost continue.
RELEASE_SCRIPT = FLEET_LUA + """
if KEYS[8] then
  redis.call('SET', KEYS[8], ARGV[6], 'PX', ARGV[5])
end
local released = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  released = 1
  if tonumber(ARGV[3]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    redis.call('HSET', KEYS[2], 'cooling_until', ARGV[4], 'child_pid', '')
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  else
    redis.call('DEL', KEYS[1], KEYS[2])
    redis.call('LPUSH', KEYS[3], '1')
    redis.call('LTRIM', KEYS[3], 0, 63)
    redis.call('PEXPIRE', KEYS[3], ARGV[2])
  end
end
record_end(KEYS[4], KEYS[5], KEYS[6], KEYS[7], 7, released)
return released
"""

# Ask the holder to stop (--replace): its keeper sees the flag at its next renewal.
# KEYS: lock, preempt. ARGV: requester run id, ttl_ms. Returns 1 if a holder was asked, 0 if free.
PREEMPT_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

# --slots N: up to N holders at once, a sorted set of owner tokens scored by expiry on
# Redis' own clock (TIME), swept on every acquire. Each holder has its own info hash.
# KEYS: slots, slots:n, fence, our info, lock (the plain lock: a conflict), runs, counts[,
# done]. ARGV: token, ttl_ms, n, last_try, maxlen, keep_ms, then info field/value pairs.
# Returns {1, fence}; {2} for a done --once key; {-1, n} when the name is in use with
# another N (1: as a plain lock); {0, ms until the soonest holder expires, its info}.
# The fence follows the plain lock's rule: max(counter + 1, server TIME in µs).
SLOTS_ACQUIRE_SCRIPT = FLEET_LUA + """
redis.replicate_commands()
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {-1, 1}
end
local n = tonumber(ARGV[3])
local stored = redis.call('GET', KEYS[2])
if stored and tonumber(stored) ~= n and redis.call('ZCARD', KEYS[1]) > 0 then
  return {-1, tonumber(stored)}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= n then
  if ARGV[4] == '1' then
    record_count(KEYS[7], ARGV[6], 'busy')
  end
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local other = string.sub(KEYS[4], 1, #KEYS[4] - #ARGV[1]) .. first[1]
  return {0, tonumber(first[2]) - now, redis.call('HGETALL', other)}
end
if KEYS[8] and redis.call('EXISTS', KEYS[8]) == 1 then
  record_count(KEYS[7], ARGV[6], 'duplicate')
  return {2}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('SET', KEYS[2], n)
local keep = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
local fence = math.max(redis.call('INCRBY', KEYS[3], 0) + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('SET', KEYS[3], string.format('%.0f', fence))
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[4], 'fencing_token', string.format('%.0f', fence), unpack(ARGV, 7))
redis.call('PEXPIRE', KEYS[4], ARGV[2])
record_start(KEYS[6], ARGV[5], ARGV[6], fence, 7)
return {1, fence}
"""

# Renew one slot: reset its expiry (never add to it) if it is still ours and unexpired.
# KEYS: slots, slots:n, our info. ARGV: token, ttl_ms, heartbeat_at, child_pid. Returns 1 or 0.
SLOTS_RENEW_SCRIPT = """
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
local keep = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
redis.call('HSET', KEYS[3], 'heartbeat_at', ARGV[3], 'child_pid', ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return 1
"""

# Give a slot back (release, or unlock of exactly that token) and wake one waiter; record
# the run's end in the fleet record (also when the slot was no longer ours).
# KEYS: slots, slots:n, that holder's info, wake, runs, last, counts, ended[, done].
# ARGV: token, wake_ttl_ms, remember_ms, done_value, then the record (see FLEET_LUA) from
# ARGV[5]. Returns 1 if the slot was ours, 0 if not.
SLOTS_RELEASE_SCRIPT = FLEET_LUA + """
if KEYS[9] then
  redis.call('SET', KEYS[9], ARGV[4], 'PX', ARGV[3])
end
local released = 0
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  released = 1
  redis.call('DEL', KEYS[3])
  if redis.call('ZCARD', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[1], KEYS[2])
  end
  redis.call('LPUSH', KEYS[4], '1')
  redis.call('LTRIM', KEYS[4], 0, 63)
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
end
record_end(KEYS[5], KEYS[6], KEYS[7], KEYS[8], 5, released)
return released
"""

# Delete the keys of one lock that hold what lockrun never writes there (a lock key that is
# not a string, or a string with bytes no owner token has, lockrun's being hex; an info hash,
# a slots sorted set, a slot count, a wake list or a preemption request of another type or
# shape): no lockrun lease can live under them, so `unlock` may clear them. The fence counter
# is never touched: it must only grow. Wakes one waiter.
# KEYS: lock, info, slots, slots:n, preempt, wake. ARGV: wake_ttl_ms. Returns how many keys
# were deleted.
CLEAR_FOREIGN_SCRIPT = """
local deleted = 0
local expected = {'string', 'hash', 'zset', 'string', 'string', 'list'}
for i = 1, 6 do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  local foreign = kind ~= 'none' and kind ~= expected[i]
  if i == 1 and kind == 'string' then
    foreign = string.find(redis.call('GET', KEYS[1]), '[\\128-\\255]') ~= nil
  elseif i == 4 and kind == 'string' then
    foreign = tonumber(redis.call('GET', KEYS[4])) == nil
  end
  if foreign then
    deleted = deleted + redis.call('DEL', KEYS[i])
  end
end
if deleted > 0 then
  redis.call('LPUSH', KEYS[6], '1')
  redis.call('LTRIM', KEYS[6], 0, 63)
  redis.call('PEXPIRE', KEYS[6], ARGV[1])
end
return deleted
"""

# Everything redis-py raises for a server that cannot serve us (RedisClusterException is
# not a RedisError: it says a cluster's slot map could not be had).
REDIS_ERRORS = (redis.RedisError, redis.exceptions.RedisClusterException)

WAKE_TTL_MS = 5000
SCAN_BATCH = 1000
#: With --replicas, WAIT may block for this share of the call timeout, less WAIT_LATE, so
#: that its reply always arrives before the socket's read timeout gives up on it.
WAIT_SHARE = 0.75
#: Redis notices that a WAIT ran out of time only at its next cron tick (hz 10: up to 100 ms
#: late); acknowledgements, on the other hand, end a WAIT at once.
WAIT_LATE = 0.1


class Acknowledged(NamedTuple):
    """A script's reply and what WAIT (and ROLE, when asked) said right behind it."""

    reply: object
    acks: int  # replicas that have every write this connection made, script included
    in_sync: int | None = None  # replicas in sync with the master, as ROLE lists them


def _replicas_word(count: int) -> str:
    return "replica" if count == 1 else "replicas"


class LockKeys(NamedTuple):
    lock: str
    info: str
    fence: str
    wake: str
    preempt: str
    slots: str
    runs: str  # the fleet record: start and end events of recent runs (a stream)
    last: str  # the fleet record: the newest finished run (a hash)
    counts: str  # the fleet record: outcomes by status (a hash)
    base: str

    def done(self, key: str) -> str:
        return f"{self.base}:done:{key}"

    def ended(self, run_id: str) -> str:
        """A short-lived marker: this run's end is recorded (a retried release records it once)."""
        return f"{self.base}:ended:{run_id}"

    def slot_info(self, token: str) -> str:
        return f"{self.base}:slot:{token}"

    @property
    def slot_count(self) -> str:
        return f"{self.slots}:n"


def lock_keys(prefix: str, name: str) -> LockKeys:
    """Every Redis key of one lock, built in this one place."""
    base = f"{prefix}{{{name}}}"
    return LockKeys(
        lock=f"{base}:lock", info=f"{base}:info", fence=f"{base}:fence", wake=f"{base}:wake",
        preempt=f"{base}:preempt", slots=f"{base}:slots", runs=f"{base}:runs", last=f"{base}:last",
        counts=f"{base}:counts", base=base,
    )


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _no_client_setinfo() -> dict:
    """Skip CLIENT SETINFO on connect: two fewer round trips before the first real command."""
    if importlib.util.find_spec("redis.driver_info") is not None:  # redis-py with driver_info
        return {"driver_info": None}
    return {"lib_name": None, "lib_version": None}


def _connection_pool(
    url: str, timeout: float, ca: str | None = None, connect_timeout: float | None = None,
    password: str | None = None,
) -> ConnectionPool:
    # Build the pool from parse_url ourselves: ConnectionPool.from_url lets a
    # ?socket_timeout= in the URL win over our bound, and an unbounded call
    # against a paused Redis would let the command outlive its lease.
    options = parse_url(url)
    if password is not None and "password" not in options:
        options["password"] = password  # from a password file: a password in the URL says it more precisely
    options.update(
        socket_timeout=timeout,
        socket_connect_timeout=connect_timeout or timeout,
        retry=Retry(NoBackoff(), 0),  # retries are the keeper's business, within the lease
        health_check_interval=0,
        # RESP2: no HELLO (nor the maintenance-notification handshake RESP3 brings) before
        # the first real command, and it works with every Redis version.
        protocol=2,
        **_no_client_setinfo(),
    )
    options.pop("retry_on_timeout", None)
    if ca and url.startswith("rediss://"):
        options.setdefault("ssl_ca_certs", ca)  # a ?ssl_ca_certs= in the URL says it more precisely
    pool = ConnectionPool(**options)
    try:
        # A connection object is built lazily, at the first command; build one now (it does not
        # connect) so that a URL parameter the connection cannot take is a usage error here.
        pool.connection_class(**pool.connection_kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a query parameter does not fit this kind of connection ({exc})") from None
    return pool


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _int_or_none(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _expiry_s(pttl) -> float | None:
    """The lease left in seconds from a PTTL reply; None for no expiry (-1) or no key (-2)."""
    pttl = _int_or_none(pttl)
    return pttl / 1000.0 if pttl is not None and pttl >= 0 else None


#: What a key that is not lockrun's own says in ``status`` and on a busy skip.
NO_EXPIRY = "the lock key has no expiry (lockrun always sets one): written by something other than lockrun"
NO_DESCRIPTION = "no holder description (its info hash is missing)"


NOT_A_TOKEN = "the lock's value is not UTF-8 text, so no lockrun owner token: written by something other than lockrun"


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _wrong_type(key: str, kind: str, expected: str) -> str:
    return f"{key} is a {kind}, not a {expected}: written by something other than lockrun"


class RedisBackend:
    name = "redis"

    def __init__(
        self, url: str, prefix: str, timeout: float, ca: str | None = None, connect_timeout: float | None = None,
        fleet: FleetRetention = FleetRetention(),
        password: str | None = None,
        replicas: int | str = 0,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.fleet = fleet
        self.timeout = timeout
        self.replicas = replicas  # --replicas: a number, or ALL_REPLICAS
        self.connect_timeout = connect_timeout or timeout
        self.ca = ca
        self._redacted = redact_url(url)
        scheme = url.split("://", 1)[0]
        self._cluster = parse_cluster_url(url) if scheme in CLUSTER_SCHEMES + SENTINEL_SCHEMES else None
        if self._cluster is not None and self._cluster.password is None and password is not None:
            self._cluster = self._cluster._replace(password=password)
        self._is_cluster = scheme in CLUSTER_SCHEMES
        self._sentinel = None  # with redis+sentinel://: the Sentinels, who also know the replicas
        try:
            in_url = self._cluster.password if self._cluster else parse_url(url).get("password")
            self._password = in_url or password
            self._client = self._make_client(timeout)
        except ValueError as exc:
            raise UsageError(f"invalid Redis URL {self._redacted!r}: {exc}") from None
        self._waiter = None

    @property
    def is_cluster(self) -> bool:
        """A Redis Cluster (not Sentinel): its pipelines split by node and cannot carry scripts."""
        return self._cluster is not None and self._cluster.service is None

    def _make_client(self, timeout: float):
        """A client whose every call is bounded by ``timeout``: plain Redis, or a Redis Cluster."""
        if self._cluster is None:
            return redis.Redis(
                connection_pool=_connection_pool(self.url, timeout, self.ca, self.connect_timeout, self._password)
            )
        if self._cluster.service is not None:
            return self._sentinel_master(timeout)
        from redis.cluster import ClusterNode, RedisCluster

        options = dict(
            startup_nodes=[ClusterNode(host, port) for host, port in self._cluster.nodes],
            username=self._cluster.username, password=self._cluster.password,
            socket_timeout=timeout, socket_connect_timeout=self.connect_timeout, retry=Retry(NoBackoff(), 0),
            protocol=2, ssl=self._cluster.tls, **_no_client_setinfo(),
        )
        if self._cluster.tls and self.ca:
            options["ssl_ca_certs"] = self.ca
        try:
            # Connects at once to learn the slot map; a cluster that cannot be reached is a 69.
            return RedisCluster(**options)
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from None

    def _sentinel_master(self, timeout: float):
        """The master the Sentinels name; after a failover, the next connection finds the new one."""
        from redis.sentinel import Sentinel

        bounded = dict(socket_timeout=timeout, socket_connect_timeout=self.connect_timeout,
                       retry=Retry(NoBackoff(), 0), protocol=2, **_no_client_setinfo())
        sentinel = Sentinel(self._cluster.nodes, sentinel_kwargs=dict(bounded), **bounded)
        self._sentinel = sentinel
        master = dict(bounded, username=self._cluster.username, password=self._cluster.password,
                      db=self._cluster.db, ssl=self._cluster.tls)
        if self._cluster.tls and self.ca:
            master["ssl_ca_certs"] = self.ca
        return sentinel.master_for(self._cluster.service, **master)

    # -- error mapping -------------------------------------------------------------

    def _name_of(self, key: str) -> str:
        """The lock name inside one of its keys (``prefix{NAME}:...``; names hold no braces)."""
        start = len(self.prefix) + 1
        end = key.find("}", start)
        return key[start:end] if key.startswith(self.prefix + "{") and end > start else "NAME"

    def _unavailable(self, exc: Exception, key: str | None = None) -> BackendUnavailable:
        reason = str(exc) or type(exc).__name__
        if self._password:
            reason = reason.replace(self._password, "***")
        if "unauthenticated" in reason or "NOAUTH" in reason or "Authentication required" in reason:
            # Redis 7 answers an unauthenticated client's long command with a protocol error.
            return BackendUnavailable(
                f"Redis at {self._redacted} requires a password and none was given: put it in the URL"
                " (redis://:PASSWORD@host...), or better in a file named by redis_password_file in the config"
                " or LOCKRUN_REDIS_PASSWORD_FILE"
            )
        if "WRONGTYPE" in reason or "not an integer" in reason:
            return self._foreign_data(self._name_of(key) if key else None, reason.split(" script: ")[0])
        return BackendUnavailable(f"Redis at {self._redacted} is unavailable: {reason}")

    def _foreign_data(self, name: str | None, reason: str) -> ForeignData:
        """A script failed on a key lockrun did not write: say which key, and how to get rid of it."""
        odd = self._odd_keys(name) if name else []
        where = "; ".join(text for text, _ in odd) or reason
        message = f"Redis at {self._redacted} holds data for lock {name or '?'!r} that lockrun did not write ({where})"
        if any(not clearable for _, clearable in odd):
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
            pipe = self._client.pipeline(transaction=False)
            for key, _ in expected:
                pipe.type(key)
            kinds = [_text(kind) for kind in pipe.execute()]
            fence = self._client.get(keys.fence) if kinds[2] == "string" else None
        except REDIS_ERRORS:
            return []  # the server said enough already: the generic line will do
        odd = [(f"{key} is a {kind}, not a {want}", key != keys.fence)
               for (key, want), kind in zip(expected, kinds) if kind not in ("none", want)]
        if fence is not None and _int_or_none(fence) is None:
            odd.append((f"{keys.fence} holds {_text(fence)[:40]!r}, not a number", False))
        return odd

    def _eval(self, script: str, keys: list[str], args: list) -> object:
        # EVAL (not EVALSHA + load) keeps every operation at exactly one round trip,
        # even on a Redis that just restarted with an empty script cache.
        try:
            return self._client.eval(script, len(keys), *keys, *args)
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc, keys[0] if keys else None) from None

    def _replicas_known(self, key: str) -> int:
        """How many replicas the deployment manager knows for the master of ``key``, in sync or
        not: what the Sentinels list (not down), or the Cluster's slot map; 0 for a plain master.

        ROLE lists only the replicas in sync with the master *now*; a replica that the Sentinels
        are promoting has already left that list while the old master still takes writes, and
        its other replicas acknowledge them, only to lose them when they follow the new master.
        """
        try:
            if self._sentinel is not None:
                return len(self._sentinel.discover_slaves(self._cluster.service))
            if self._is_cluster:
                return max(0, len(self._client.nodes_manager.slots_cache.get(self._client.keyslot(key), [])) - 1)
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from None
        return 0

    def _master_of(self, key: str):
        """A client of the master that holds ``key``: on a Cluster, the node owning its slot."""
        if not self._is_cluster:
            return self._client
        return self._client.get_redis_connection(self._client.get_node_from_key(key))

    def _eval_then_wait(self, script: str, keys: list[str], args: list, replicas: int, ask_role: bool = False,
                        budget: float | None = None) -> Acknowledged:
        """EVAL, then ``WAIT replicas t`` behind it in one pipeline: still one round trip.

        WAIT counts the replicas that have every write *this connection* made, so it must
        follow the script on the same connection, which a pipeline guarantees; on a Cluster
        both go to the node that owns the keys' slot, so each name's own master is asked
        about its own replicas. ``t`` is a share of ``budget`` (the call timeout), so the
        reply comes before the socket gives up. With ``ask_role``, ROLE goes first and
        says how many replicas are in sync with that master (``--replicas all``).
        """
        wait_ms = self._wait_ms(budget)
        client = self._master_of(keys[0])
        for attempt in (1, 2):
            pipe = client.pipeline(transaction=False)
            if ask_role:
                pipe.execute_command("ROLE")
            pipe.eval(script, len(keys), *keys, *args)
            pipe.execute_command("WAIT", replicas, wait_ms)
            try:
                replies = pipe.execute()
            except redis.exceptions.MovedError as exc:
                if attempt == 1 and self._is_cluster:  # the slot moved: learn the map again, ask its new owner
                    self._client.nodes_manager.initialize()
                    client = self._master_of(keys[0])
                    continue
                raise self._unavailable(exc, keys[0]) from None
            except REDIS_ERRORS as exc:
                raise self._unavailable(exc, keys[0]) from None
            finally:
                pipe.reset()
            in_sync = None
            if ask_role:
                role = replies.pop(0)
                in_sync = len(role[2]) if _text(role[0]) == "master" and len(role) > 2 else 0
            return Acknowledged(reply=replies[0], acks=int(replies[1]), in_sync=in_sync)
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait_ms(self, budget: float | None = None) -> int:
        """WAIT's timeout: its reply must come back within ``budget``, the call timeout."""
        return max(1, round(((self.timeout if budget is None else budget) * WAIT_SHARE - WAIT_LATE) * 1000))

    def _too_few(self, what: str, acks: int, needed: int) -> str:
        within = self._wait_ms() / 1000
        return f"only {acks} of {needed} {_replicas_word(needed)} acknowledged the {what} within {within:g}s"

    def _confirmed(self, lease: Lease, got: Acknowledged, known: int) -> Lease:
        """The lease, once as many replicas as --replicas asks have it; else ReplicasMissing
        (and the caller gives the lock back: nothing may run under it). ``known``: the replicas
        the Sentinels or the Cluster know (--replicas all)."""
        if self.replicas != ALL_REPLICAS:
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
        if self.replicas == ALL_REPLICAS and acks < needed and needed > max(1, known):
            # --replicas all waited for fewer replicas than ROLE then listed, and they had not all
            # acknowledged by the time WAIT returned: wait for all of them behind a renewal, on
            # whichever connection (the renewal's write follows the grant's in the replication
            # stream: a replica that has one has both).
            left = self.timeout - (time.monotonic() - lease.sent_at)
            if left * WAIT_SHARE - WAIT_LATE > 0.005:
                renewal = self._renew_script(lease, utc_now_iso(), None)
                again = self._eval_then_wait(*renewal, needed, budget=left)
                acks = again.acks if int(again.reply) in (1, 2) else 0
        if acks < needed:
            too_few = self._too_few(f"lock on {lease.name!r}", acks, needed)
            raise ReplicasMissing(f"{too_few} (--replicas {self.replicas}); the command did not run", acks, needed)
        return lease

    # -- lease operations -----------------------------------------------------------

    def acquire(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None = None,
        slots: int = 1, last_try: bool = True,
    ) -> Lease | Holder | Duplicate:
        keys = lock_keys(self.prefix, name)
        ttl_ms = max(1, int(ttl * 1000))
        pairs: list[str] = []
        for key, value in info.items():
            pairs += [key, value]
        done = [keys.done(once.key)] if once else []
        retention = [self.fleet.max_events, self.fleet.keep_ms]
        if slots > 1:
            script = SLOTS_ACQUIRE_SCRIPT
            script_keys = [keys.slots, keys.slot_count, keys.fence, keys.slot_info(token), keys.lock, keys.runs,
                           keys.counts, *done]
            args = [token, ttl_ms, slots, int(last_try), *retention, *pairs]
        else:
            script = ACQUIRE_SCRIPT
            script_keys = [keys.lock, keys.info, keys.fence, keys.preempt, keys.slots, keys.runs, keys.counts, *done]
            args = [token, ttl_ms, int(last_try), *retention, *pairs]
        every = self.replicas == ALL_REPLICAS
        known = self._replicas_known(keys.lock) if every else 0
        sent_at = time.monotonic()
        got = None
        if self.replicas:
            # --replicas all: ROLE says how many replicas are in sync; WAIT first for as many as
            # the Sentinels or the Cluster know (at least one), and for the rest if ROLE lists more.
            got = self._eval_then_wait(script, script_keys, args, max(1, known) if every else int(self.replicas),
                                       ask_role=every)
            reply = got.reply
        else:
            reply = self._eval(script, script_keys, args)
        if int(reply[0]) == 1:
            lease = Lease(name=name, token=token, fencing_token=int(reply[1]), ttl=ttl, sent_at=sent_at, once=once,
                          slots=slots)
            return self._confirmed(lease, got, known) if got is not None else lease
        if int(reply[0]) == 2:
            return Duplicate(name=name, key=once.key)
        if int(reply[0]) == -1:
            raise SlotsMismatch(name, int(reply[1]), slots)
        flat = reply[2] if isinstance(reply[2], list) else []
        fields = dict(zip(flat[0::2], flat[1::2]))
        problem, foreign = None, False
        if slots == 1 and _int_or_none(reply[1]) == -1:  # lockrun always sets a TTL: look closer (rare)
            problem, foreign = self._lock_key_problem(keys)
        elif not fields:
            problem = NO_DESCRIPTION
        return Holder.from_fields(name, fields, ttl_remaining_s=_expiry_s(reply[1]), slotted=slots > 1,
                                  problem=problem, foreign=foreign)

    def _lock_key_problem(self, keys: LockKeys) -> tuple[str | None, bool]:
        """Why a lock key without a TTL is not a lockrun lease: (problem, foreign)."""
        try:
            kind = _text(self._client.type(keys.lock))
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from None
        if kind == "none":
            return None, False  # gone meanwhile
        if kind != "string":
            return _wrong_type(keys.lock, kind, "string"), True
        return NO_EXPIRY, False

    def _renew_script(self, lease: Lease, heartbeat_at: str, child_pid: int | None) -> tuple[str, list[str], list]:
        keys = lock_keys(self.prefix, lease.name)
        args = [lease.token, max(1, int(lease.ttl * 1000)), heartbeat_at, child_pid or ""]
        if lease.slots > 1:
            return SLOTS_RENEW_SCRIPT, [keys.slots, keys.slot_count, keys.slot_info(lease.token)], args
        return RENEW_SCRIPT, [keys.lock, keys.info, keys.preempt], args

    def renew(self, lease: Lease, heartbeat_at: str, child_pid: int | None) -> str:
        script, keys, args = self._renew_script(lease, heartbeat_at, child_pid)
        if not lease.replicas:
            return {1: RENEWED, 2: PREEMPTED}.get(int(self._eval(script, keys, args)), LOST)
        got = self._eval_then_wait(script, keys, args, lease.replicas)
        found = {1: RENEWED, 2: PREEMPTED}.get(int(got.reply), LOST)
        if found == RENEWED and got.acks < lease.replicas:
            # The master reset the TTL, but a replica promoted now might not know it: this
            # renewal must not push the deadline on. (A lost or preempted lease ends anyway.)
            too_few = self._too_few("renewal", got.acks, lease.replicas)
            raise ReplicasMissing(f"{too_few}, --replicas {self.replicas}", got.acks, lease.replicas)
        return found

    def _record_args(self, keys: LockKeys, record: FleetRecord | None) -> tuple[list[str], list]:
        """The fleet-record KEYS and ARGV of a release or clear script (FLEET_LUA's record_end)."""
        run_id = record.row.get("run_id") if record else None
        fleet_keys = [keys.runs, keys.last, keys.counts, keys.ended(run_id or "-")]
        if record is None or not run_id:
            return fleet_keys, [0, 0, "", "", "", 0, "", ""]
        args = [self.fleet.max_events, self.fleet.keep_ms, record.row["status"], tail_for_fleet(record.output_tail),
                record.row.get("ended_at") or "", int(record.at_once), run_id, row_json(record.row),
                *fields_from_row(record.row)]
        return fleet_keys, args

    def release(
        self, lease: Lease, succeeded: bool = False, hold_s: float = 0.0, hold_until: str = "",
        record: FleetRecord | None = None,
    ) -> bool:
        done = lease.once if succeeded else None
        return self._release(lease.name, lease.token, lease.slots > 1, done=done, hold_s=hold_s, hold_until=hold_until,
                             record=record)

    def release_token(self, name: str, token: str, slots: int = 1) -> bool:
        return self._release(name, token, slots > 1)

    def clear(self, name: str, token: str, record: FleetRecord | None = None) -> bool:
        """Delete the lock (or the slot) only if it still holds ``token``, and wake one waiter.

        ``record`` (the unlock's own row) goes to the fleet record only when something was cleared.
        """
        return self._release(name, token, self._is_slotted(lock_keys(self.prefix, name)), record=record)

    def _release(
        self, name: str, token: str, slotted: bool, done: OnceKey | None = None, hold_s: float = 0.0,
        hold_until: str = "", record: FleetRecord | None = None,
    ) -> bool:
        """The release script: compare-and-delete, wake one waiter, mark ``done``, add ``record``."""
        keys = lock_keys(self.prefix, name)
        done_key = [keys.done(done.key)] if done else []
        done_args = [max(1, int(done.remember_s * 1000)), utc_now_iso()] if done else [0, ""]
        fleet_keys, fleet_args = self._record_args(keys, record)
        if slotted:
            script_keys = [keys.slots, keys.slot_count, keys.slot_info(token), keys.wake, *fleet_keys, *done_key]
            args = [token, WAKE_TTL_MS, *done_args, *fleet_args]
            return int(self._eval(SLOTS_RELEASE_SCRIPT, script_keys, args)) == 1
        script_keys = [keys.lock, keys.info, keys.wake, *fleet_keys, *done_key]
        args = [token, WAKE_TTL_MS, max(0, int(hold_s * 1000)), hold_until, *done_args, *fleet_args]
        return int(self._eval(RELEASE_SCRIPT, script_keys, args)) == 1

    def clear_foreign(self, name: str) -> bool:
        """Delete the keys of ``name`` that are of a type lockrun never writes there; wake one waiter."""
        keys = lock_keys(self.prefix, name)
        script_keys = [keys.lock, keys.info, keys.slots, keys.slot_count, keys.preempt, keys.wake]
        return int(self._eval(CLEAR_FOREIGN_SCRIPT, script_keys, [WAKE_TTL_MS])) > 0

    def preempt(self, name: str, requester: str, ttl: float) -> bool:
        keys = lock_keys(self.prefix, name)
        return int(self._eval(PREEMPT_SCRIPT, [keys.lock, keys.preempt], [requester, max(1, int(ttl * 1000))])) == 1

    def wait_for_release(self, name: str, timeout: float) -> None:
        """BLPOP the wake list; a release pushes to it, so one waiter wakes at once.

        Waits at most a second per call: callers poll again after it, which is how
        a crashed holder's expired lease is noticed (nobody pushes for it).
        """
        timeout = min(timeout, 1.0)
        if timeout < 0.01:  # BLPOP rounds to milliseconds, and 0 would block forever
            return
        if self._waiter is None:
            # A client of its own: its read timeout must outlast the BLPOP timeout.
            self._waiter = self._make_client(self.timeout + 1.0)
        try:
            self._waiter.blpop([lock_keys(self.prefix, name).wake], timeout=timeout)
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from None

    # -- inspection -----------------------------------------------------------------

    def fleet_record(self):
        """The fleet record every host writes into this Redis (read side: redis_fleet.py)."""
        from lockrun.backends.redis_fleet import RedisFleetRecord

        return RedisFleetRecord(self)

    def _is_slotted(self, keys: LockKeys) -> bool:
        try:
            return bool(self._client.exists(keys.slots))
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from None

    def lock_names(self) -> list[str]:
        """Names of every held lock, plain or slotted, by SCAN (never KEYS)."""
        head = f"{self.prefix}{{"
        names = set()
        try:
            for tail in ("}:lock", "}:slots"):
                pattern = _glob_escape(self.prefix) + "{*" + tail
                for key in self._client.scan_iter(match=pattern, count=SCAN_BATCH):
                    key = _text(key)
                    if key.startswith(head) and key.endswith(tail):
                        names.add(key[len(head) : -len(tail)])
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from None
        return sorted(names)

    def holders(self, names: list[str] | None = None) -> list[Holder]:
        """Every holder: one per plain lock, one per live slot of a --slots lock.

        Keys someone else wrote (another type, no TTL, no description) come back as
        holders with a ``problem``: one bad key must not hide every other lock.
        """
        names = self.lock_names() if names is None else list(names)
        found: list[Holder] = []
        try:
            seconds, micros = self._client.time()
            now_ms = seconds * 1000 + micros // 1000
            for start in range(0, len(names), SCAN_BATCH):
                batch = names[start : start + SCAN_BATCH]
                pipe = self._client.pipeline(transaction=False)
                for name in batch:
                    keys = lock_keys(self.prefix, name)
                    pipe.get(keys.lock)
                    pipe.pttl(keys.lock)
                    pipe.hgetall(keys.info)
                    pipe.zrangebyscore(keys.slots, now_ms + 1, "+inf", withscores=True)
                replies = pipe.execute(raise_on_error=False)
                self._raise_unless_data_errors(replies)
                slotted: list[tuple[str, str, float]] = []
                odd: list[tuple[str, str, object]] = []  # (name, which key, its PTTL reply)
                for i, name in enumerate(batch):
                    token, pttl, fields, slots = replies[4 * i : 4 * i + 4]
                    if isinstance(token, Exception) or _int_or_none(pttl) == -1:
                        odd.append((name, "lock", pttl))
                    elif token is not None:
                        found.append(self._described(name, token, pttl, fields))
                    if isinstance(slots, Exception):
                        odd.append((name, "slots", None))
                    else:
                        slotted += [(name, _text(member), score) for member, score in slots or []]
                found += self._odd_holders(odd, replies, batch)
                if slotted:
                    pipe = self._client.pipeline(transaction=False)
                    for name, member, _ in slotted:
                        pipe.hgetall(lock_keys(self.prefix, name).slot_info(member))
                    slot_fields = pipe.execute(raise_on_error=False)
                    self._raise_unless_data_errors(slot_fields)
                    for (name, member, score), fields in zip(slotted, slot_fields):
                        found.append(self._described(name, member, int(score) - now_ms, fields, slotted=True))
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from None
        return found

    @staticmethod
    def _raise_unless_data_errors(replies: list) -> None:
        """A reply error about one key's data is that key's problem; anything else is the server's."""
        for reply in replies:
            if isinstance(reply, Exception) and "WRONGTYPE" not in str(reply):
                raise reply

    def _described(self, name: str, token, pttl, fields, slotted: bool = False) -> Holder:
        """A holder from its lock token and its description (a hash, or an error reading it)."""
        problem = None
        if isinstance(token, bytes) and not _is_utf8(token):
            # lockrun's owner tokens are hex: no lockrun lease holds this value.
            return Holder.from_fields(name, {}, token=token, ttl_remaining_s=_expiry_s(pttl), slotted=slotted,
                                      foreign=not slotted, problem=NOT_A_TOKEN)
        if isinstance(fields, Exception):
            kind = "slot info key" if slotted else "info key"
            problem, fields = f"its {kind} is not a hash: written by something other than lockrun", {}
        elif not fields:
            problem = NO_DESCRIPTION
        return Holder.from_fields(name, fields, token=token, ttl_remaining_s=_expiry_s(pttl), slotted=slotted,
                                  problem=problem)

    def _odd_holders(self, odd: list[tuple[str, str, object]], replies: list, batch: list[str]) -> list[Holder]:
        """Holders for lock keys of another type or without a TTL, and slots keys of another type."""
        if not odd:
            return []
        pipe = self._client.pipeline(transaction=False)
        for name, which, _ in odd:
            keys = lock_keys(self.prefix, name)
            pipe.type(keys.lock if which == "lock" else keys.slots)
        kinds = [_text(kind) for kind in pipe.execute()]
        found = []
        for (name, which, pttl), kind in zip(odd, kinds):
            keys = lock_keys(self.prefix, name)
            if which == "slots":
                if kind not in ("none", "zset"):
                    found.append(Holder.from_fields(
                        name, {}, slotted=True, foreign=True, problem=_wrong_type(keys.slots, kind, "sorted set")))
                continue
            if kind == "none":
                continue  # released meanwhile
            if kind != "string":
                found.append(Holder.from_fields(
                    name, {}, ttl_remaining_s=_expiry_s(pttl), foreign=True,
                    problem=_wrong_type(keys.lock, kind, "string")))
                continue
            i = batch.index(name)
            token, _, fields, _ = replies[4 * i : 4 * i + 4]
            holder = self._described(name, token, pttl, fields)
            problem = "; ".join(filter(None, (NO_EXPIRY, holder.problem)))
            found.append(holder._replace(problem=problem))
        return found

    def close(self) -> None:
        for client in (self._client, self._waiter):
            if client is not None:
                try:
                    client.close()
                    if getattr(client, "connection_pool", None) is not None:  # a cluster client has none
                        client.connection_pool.disconnect()
                except REDIS_ERRORS:
                    pass
