"""The Lua scripts of the Redis backend, as data, and the KEYS/ARGV each one is called with.

One script per lease operation, so that each is one atomic round trip. Each script's
comment says what it does, its KEYS and ARGV and what it returns; the ``*_call``
functions below build exactly those, so the layout of a script's arguments lives
beside the script and nowhere else. A --slots lease's scripts are in ``slot_scripts.py``
(the calls here send such a lease there); what several scripts' arguments share, and
``ScriptCall`` itself, in ``script_call.py``.
"""

from __future__ import annotations

from lockrun.backends.pause import PauseRequest
from lockrun.backends.redis.keys import LockKeys
from lockrun.backends.redis.lua_parts import (
    ACQUIRE_PIECES,
    ATTEMPT_LUA,
    FLEET_COMMON_LUA,
    FLEET_END_LUA,
    FLEET_START_LUA,
    HEARTBEAT_LUA,
    RELEASE_LUA,
    WAKE_LUA,
)
from lockrun.backends.redis.script_call import (
    WAKE_TTL_MS,
    Arg,
    ScriptCall,
    acquire_args,
    done_args,
    flat_pairs,
    ms,
    once_keys,
    record_args,
)
from lockrun.backends.values import FleetRecord, FleetRetention, Lease, OnceKey

# Take the lock, advance the fence and describe the holder, all or nothing; record the start (or
# count a busy or duplicate outcome) in the fleet record. KEYS: lock, info, fence, preempt, slots,
# runs, counts, open, names (the registry, or the lock key again: none), then [done[, once_tz]].
# ARGV: token, ttl_ms, last_try ('1': a busy answer is this run's outcome, count it), maxlen,
# keep_ms, allow_eviction ('1': run on an evicting server all the same), zone (of a time-derived
# --once key, with once_tz), remember_ms, once_every_ms ('0': none; --once-every, judged against
# the ``success_ms`` that the release scripts keep in the name's ``last`` hash, KEYS[6]'s
# sibling), then info field/value pairs (the start event takes the ones that are not secret).
# Returns {1, fence, evicting} when taken (a preemption request meant for the previous holder is
# dropped, and so are wake-ups left in the wake list, KEYS[1]'s sibling ``...:wake``; evicting:
# the policy of a server that may evict and was allowed to, '?' when it could not tell, else '');
# {2} when the --once key (KEYS[10]) is already done, and {5, success_ms, now_ms} when the name's
# last success started less than once_every_ms ago (both by the server's clock), in which cases
# the lock is given straight back; {3, pause-hash-as-flat-list} when the name is paused
# (PAUSE_LUA: read under the lock just taken, which is given straight back, or beside the holder
# of a busy one: a paused name's run neither waits nor asks a holder to stop; counted as
# 'paused'); a taken lock's reply carries, 4th, what sits at the pause key when it is no pause
# lockrun wrote ('' when none); {-1, n} when the name is in use with --slots n; {-2, policy,
# maxmemory, why} when the server may evict keys (see ACQUIRE_CHECKS_LUA); {-3, zone, length} when
# the name's --once periods are recorded in another zone, {-4, kind} when once_tz is not a string;
# else {0, pttl, info-hash-as-flat-list}. The fence is max(counter + 1, server TIME in µs), stored
# back: it never goes back, not even after a restart without persistence, a lossy failover or a
# FLUSHALL, as long as the server clocks do not (µs since 1970 fit a Lua double exactly). INCRBY 0
# reads the counter and fails, as INCR did, on one that is no number: never reset.
ACQUIRE_SCRIPT = ACQUIRE_PIECES + """
if redis.replicate_commands then redis.replicate_commands() end  -- Redis < 7 needs it; not every server has it
local evicts = eviction()
local refusal = refused(evicts, ARGV[6])
if refusal then return refusal end
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {SLOTS_MISMATCH, tonumber(redis.call('GET', KEYS[5] .. ':n') or 0)}
end
local conflict = zone_conflict(KEYS[11], ARGV[7])
if conflict then return refused_zone(conflict) end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local pause = pause_of(string.sub(KEYS[1], 1, -5) .. 'paused')
  if pause and pause[1] == 1 then
    redis.call('DEL', KEYS[1])
    record_count(KEYS[7], KEYS[9], ARGV[5], 'paused', info_value(10, 'host'))
    return {PAUSED, pause[2]}
  end
  if KEYS[10] and redis.call('EXISTS', KEYS[10]) == 1 then
    redis.call('DEL', KEYS[1])
    record_count(KEYS[7], KEYS[9], ARGV[5], 'duplicate', info_value(10, 'host'))
    return {DUPLICATE}
  end
  local every = tonumber(ARGV[9]) or 0
  if every > 0 then
    local success = redis.pcall('HGET', string.sub(KEYS[6], 1, -5) .. 'last', 'success_ms')
    -- only what the release script writes counts: whole ms, at most 14 digits (EPOCH_S_LIMIT);
    -- 'inf', '1e300' or a time past the year 9999 is foreign, as unreadable as 'abc': the job runs
    local success_ms = type(success) == 'string' and #success <= 14 and string.match(success, '^%d+$')
      and tonumber(success) or nil
    local now_ms = fleet_now()
    if success_ms and now_ms - success_ms < every then
      redis.call('DEL', KEYS[1])
      record_count(KEYS[7], KEYS[9], ARGV[5], 'duplicate', info_value(10, 'host'))
      return {TOO_SOON, string.format('%.0f', success_ms), string.format('%.0f', now_ms)}
    end
  end
  keep_zone(KEYS[11], ARGV[7], tonumber(ARGV[8]) + tonumber(ARGV[2]))
  local now = redis.call('TIME')
  local fence = math.max(redis.call('INCRBY', KEYS[3], 0) + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('SET', KEYS[3], string.format('%.0f', fence))
  -- the preemption request and the info of the previous holder, and the wake-ups nobody popped:
  -- the lock is held again, so they are stale (a waiter would pop them only to find it busy)
  redis.call('DEL', KEYS[2], KEYS[4], string.sub(KEYS[1], 1, -5) .. 'wake')
  redis.call('HSET', KEYS[2], 'fencing_token', string.format('%.0f', fence), unpack(ARGV, 10))
  heartbeat(KEYS[2])  -- the first heartbeat: the server's TIME (HEARTBEAT_LUA)
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  record_start(KEYS[8], KEYS[9], ARGV[5], fence, 10, tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000), 1)
  declare_cadence(string.sub(KEYS[1], 1, -5) .. 'cadence', 10, ARGV[5])
  return {TAKEN, fence, evicting_policy(evicts), pause_problem(pause)}
end
local paused = pause_of(string.sub(KEYS[1], 1, -5) .. 'paused')  -- a busy name that is paused: a paused skip
if paused and paused[1] == 1 then
  record_count(KEYS[7], KEYS[9], ARGV[5], 'paused', info_value(10, 'host'))
  return {PAUSED, paused[2]}
end
if ARGV[3] == '1' then
  record_count(KEYS[7], KEYS[9], ARGV[5], 'busy', info_value(10, 'host'))
end
return {BUSY, redis.call('PTTL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
"""

# Reset (never add to) the lease if the token is still ours; stamp the heartbeat with the
# server's TIME (HEARTBEAT_LUA; TIME before a write needs effects replication on Redis < 5).
# KEYS: lock, info, preempt. ARGV: token, ttl_ms, child_pid.
# Returns 1 renewed, 2 renewed but another run asked to replace us (--replace), 0 lost.
RENEW_SCRIPT = HEARTBEAT_LUA + """
if redis.replicate_commands then redis.replicate_commands() end  -- Redis < 7 needs it; not every server has it
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('HSET', KEYS[2], 'child_pid', ARGV[3])
  heartbeat(KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  if redis.call('EXISTS', KEYS[3]) == 1 then
    return 2
  end
  return 1
end
return 0
"""

# If the token is still ours, either keep the lock taken for the rest of --min-hold ("cooling":
# its TTL becomes the remainder, nobody is woken) or delete it and wake one waiter (BLPOP); mark
# the --once key done (if given) and keep the name's zone as long; then record the run's end in
# the fleet record, whether the token was still ours or not (a lost lease ended a run too).
# KEYS: lock, info, wake, runs, last, counts, open, vals, names (or the lock key again), then
# [done[, once_tz]]. ARGV: token,
# wake_ttl_ms, hold_ms, cooling_until, remember_ms, done_value, zone, then the record (see
# FLEET_END_LUA) from ARGV[8]. Returns 1 released (or cooling), 0 not ours (expired, evicted,
# stolen, cleared). A done mark does not depend on the token: the command did succeed, even if
# its lease was lost under --on-lost continue. The lock goes first: a write that may not grow
# memory (DEL, PEXPIRE), so that a full noeviction server, which refuses a script whose first
# write would need memory, still lets the release mark the key done.
RELEASE_SCRIPT = FLEET_END_LUA + RELEASE_LUA + """
if redis.replicate_commands then redis.replicate_commands() end  -- Redis < 7 needs it; not every server has it
local released = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  released = 1
  if tonumber(ARGV[3]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    redis.call('HSET', KEYS[2], 'cooling_until', ARGV[4], 'child_pid', '')
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  else
    redis.call('DEL', KEYS[1], KEYS[2])
    wake(KEYS[3], ARGV[2])
  end
end
mark_done(KEYS[10], ARGV[6], ARGV[5])
keep_zone_for(KEYS[11], ARGV[7], ARGV[5])
record_end(KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], 8, released)
return released
"""

# A --retry attempt is over and the run pauses, keeping the lock: renew it and mark the holder
# as retrying (ATTEMPT_LUA), and record the attempt's end in the fleet record, as a release
# would, whether the lock was still ours or not. KEYS: lock (or slots), info (or the slot's),
# preempt (or slots:n), runs, last, counts, open, vals, names (or KEYS[1] again).
# ARGV: token, ttl_ms, slotted, n, n holder field/value pairs, then the record (FLEET_END_LUA)
# from ARGV[5 + 2n]. Returns 1 renewed, 2 renewed but preempted (--replace), 0 lost.
ATTEMPT_OVER_SCRIPT = FLEET_END_LUA + HEARTBEAT_LUA + ATTEMPT_LUA + """
if redis.replicate_commands then redis.replicate_commands() end  -- Redis < 7 needs it; not every server has it
local kept = renewed_for_attempt(5)
record_end(KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], 5 + 2 * tonumber(ARGV[4]), kept > 0 and 1 or 0)
return kept
"""

# The next --retry attempt starts under the same lock: renew it, set the holder's run id and
# attempt (ATTEMPT_LUA), and record the attempt's start among the fleet record's open runs.
# KEYS: lock (or slots), info (or the slot's), preempt (or slots:n), open, names (or KEYS[1]).
# ARGV: token, ttl_ms, slotted, n, keep_ms, fence, slots, n holder field/value pairs, then the
# start's field/value pairs (record_start). Returns 1 renewed, 2 renewed but preempted, 0 lost.
ATTEMPT_BEGINS_SCRIPT = FLEET_START_LUA + HEARTBEAT_LUA + ATTEMPT_LUA + """
if redis.replicate_commands then redis.replicate_commands() end  -- Redis < 7 needs it; not every server has it
local kept = renewed_for_attempt(8)
if kept > 0 then
  record_start(KEYS[4], KEYS[5], ARGV[5], tonumber(ARGV[6]), 8 + 2 * tonumber(ARGV[4]), fleet_now(), tonumber(ARGV[7]))
end
return kept
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

# Delete the keys of one lock that hold what lockrun never writes there (a lock key that is
# not a string, or a string with bytes no owner token has, lockrun's being hex; an info hash,
# a slots sorted set, a slot count, a wake list or a preemption request of another type or
# shape): no lockrun lease can live under them, so `unlock` may clear them. The fence counter
# is never touched: it must only grow. Wakes one waiter.
# KEYS: lock, info, slots, slots:n, preempt, wake. ARGV: wake_ttl_ms. Returns how many keys
# were deleted.
CLEAR_FOREIGN_SCRIPT = WAKE_LUA + """
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
  wake(KEYS[6], ARGV[1])
end
return deleted
"""

def acquire_call(
    keys: LockKeys, token: str, ttl: float, info: dict[str, str], once: OnceKey | None, slots: int,
    last_try: bool, retention: FleetRetention, allow_eviction: bool = False, registry: str | None = None,
    once_every: float | None = None,
) -> ScriptCall:
    """ACQUIRE_SCRIPT, or SLOTS_ACQUIRE_SCRIPT for one of ``slots`` > 1; ``registry``: the key of
    the registry of names (None on a Cluster: there is none)."""
    if slots > 1:
        from lockrun.backends.redis.slot_scripts import slots_acquire_call  # a plain lease never loads them

        return slots_acquire_call(keys, token, ttl, info, once, slots, last_try, retention, allow_eviction, registry)
    plain_keys = [keys.lock, keys.info, keys.fence, keys.preempt, keys.slots, keys.runs, keys.counts, keys.open,
                  registry or keys.lock, *once_keys(keys, once)]
    return ScriptCall(ACQUIRE_SCRIPT, plain_keys, [token, ms(ttl), int(last_try),
                                                   *acquire_args(retention, allow_eviction, once),
                                                   ms(once_every) if once_every else 0, *flat_pairs(info)])


def renew_call(keys: LockKeys, lease: Lease, heartbeat_at: str, child_pid: int | None) -> ScriptCall:
    """RENEW_SCRIPT, or SLOTS_RENEW_SCRIPT for a --slots lease. ``heartbeat_at`` (the holder's own
    clock, which the local backend records) is not sent: the script stamps the server's TIME."""
    del heartbeat_at
    if lease.slots > 1:
        from lockrun.backends.redis.slot_scripts import slots_renew_call  # a plain lease never loads them

        return slots_renew_call(keys, lease, child_pid)
    return ScriptCall(RENEW_SCRIPT, [keys.lock, keys.info, keys.preempt], [lease.token, ms(lease.ttl), child_pid or ""])


def release_call(
    keys: LockKeys, token: str, slotted: bool, retention: FleetRetention, done: OnceKey | None = None,
    hold_s: float = 0.0, hold_until: str = "", record: FleetRecord | None = None, registry: str | None = None,
) -> ScriptCall:
    """RELEASE_SCRIPT, or SLOTS_RELEASE_SCRIPT for a slot: compare-and-delete, wake one waiter,
    mark ``done`` (and keep its zone as long), add ``record`` to the fleet record."""
    if slotted:
        from lockrun.backends.redis.slot_scripts import slots_release_call  # a plain lease never loads them

        return slots_release_call(keys, token, retention, done, record, registry)
    fleet_keys, fleet_args = record_args(keys, record, retention)
    script_keys = [keys.lock, keys.info, keys.wake, *fleet_keys, registry or keys.lock, *once_keys(keys, done)]
    args: list[Arg] = [token, WAKE_TTL_MS, max(0, int(hold_s * 1000)), hold_until, *done_args(done), *fleet_args]
    return ScriptCall(RELEASE_SCRIPT, script_keys, args)


def _attempt_keys(keys: LockKeys, lease: Lease) -> list[str]:
    """KEYS[1..3] of ATTEMPT_LUA: the lock, its info hash, its preemption request (or the slot's)."""
    if lease.slots > 1:
        return [keys.slots, keys.slot_info(lease.token), keys.slot_count]
    return [keys.lock, keys.info, keys.preempt]


def attempt_over_call(
    keys: LockKeys, lease: Lease, holder: dict[str, str], record: FleetRecord, retention: FleetRetention,
    registry: str | None = None,
) -> ScriptCall:
    """ATTEMPT_OVER_SCRIPT: renew, mark the holder ``holder``, add ``record`` to the fleet record."""
    lock_keys_ = _attempt_keys(keys, lease)
    fleet_keys, fleet_args = record_args(keys, record, retention)
    return ScriptCall(ATTEMPT_OVER_SCRIPT, [*lock_keys_, *fleet_keys, registry or lock_keys_[0]],
                      [lease.token, ms(lease.ttl), int(lease.slots > 1), len(holder), *flat_pairs(holder),
                       *fleet_args])


def attempt_begins_call(
    keys: LockKeys, lease: Lease, holder: dict[str, str], start: dict[str, str], retention: FleetRetention,
    registry: str | None = None,
) -> ScriptCall:
    """ATTEMPT_BEGINS_SCRIPT: renew, mark the holder ``holder``, open ``start`` in the fleet record."""
    lock_keys_ = _attempt_keys(keys, lease)
    return ScriptCall(ATTEMPT_BEGINS_SCRIPT, [*lock_keys_, keys.open, registry or lock_keys_[0]],
                      [lease.token, ms(lease.ttl), int(lease.slots > 1), len(holder), retention.keep_ms,
                       lease.fencing_token, lease.slots, *flat_pairs(holder), *flat_pairs(start)])


def preempt_call(keys: LockKeys, requester: str, ttl: float) -> ScriptCall:
    return ScriptCall(PREEMPT_SCRIPT, [keys.lock, keys.preempt], [requester, ms(ttl)])


def clear_foreign_call(keys: LockKeys) -> ScriptCall:
    script_keys = [keys.lock, keys.info, keys.slots, keys.slot_count, keys.preempt, keys.wake]
    return ScriptCall(CLEAR_FOREIGN_SCRIPT, script_keys, [WAKE_TTL_MS])


# ``status`` over many locks: one call per batch reads each lock's token, PTTL, info hash, fleet
# ``last`` (row, last_success_at) and live --slots holders, and returns the whole batch as one
# JSON text. Ten thousand locks are then ten replies that json.loads reads in C, instead of forty
# thousand that redis-py parses one by one in Python (bench/NOTES.md, "Status with last runs"). A
# key of the wrong type reads as {"err": ...} (lock, info, slots) or as no last run. KEYS: lock,
# info, last, slots of each name. Not for a Redis Cluster (the names' keys live in different
# slots); a value that is not UTF-8 makes json.loads fail, and the caller then reads that batch
# the ordinary way. Returns {rows, TIME}: the server's clock at the read, which the heartbeats'
# ages are measured against; each row's slots are a flat member, score list of the unexpired ones.
READ_LOCKS_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS, 4 do
  local token = redis.pcall('GET', KEYS[i])
  if type(token) == 'table' and token.err then token = {err = token.err} end
  local flat = redis.pcall('HGETALL', KEYS[i + 1])
  local info
  if flat.err then
    info = {err = flat.err}
  else
    info = {}
    for j = 1, #flat, 2 do info[flat[j]] = flat[j + 1] end
  end
  local last = redis.pcall('HMGET', KEYS[i + 2], 'row', 'last_success_at')
  if last.err then last = {false, false} end
  local slots = redis.pcall('ZRANGEBYSCORE', KEYS[i + 3], string.format('%.0f', now + 1), '+inf', 'WITHSCORES')
  if slots.err then slots = {err = slots.err} end
  out[#out + 1] = {token, redis.call('PTTL', KEYS[i]), info, last[1], last[2], slots}
end
return cjson.encode({out, t})
"""


# ``lockrun pause`` (docs/operating.md "Pausing a job"): replace the name's pause with a new one
# that expires at its end (PEXPIREAT), and register the name. The end is ARGV[1] ms from the
# server's TIME (--for), else ARGV[2], epoch ms (--until). KEYS: paused, names (the registry, or
# the paused key again: none). ARGV: for_ms or '', until_ms or '', who, where, reason, keep_ms.
# Returns {1, the pause as a flat list}, or {0, now_ms} when its end is not after the server's now.
PAUSE_SCRIPT = FLEET_COMMON_LUA + HEARTBEAT_LUA + """
if redis.replicate_commands then redis.replicate_commands() end  -- Redis < 7 needs it; not every server has it
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = tonumber(ARGV[2])
if ARGV[1] ~= '' then until_ms = now + tonumber(ARGV[1]) end
if not until_ms or until_ms <= now then return {0, string.format('%.0f', now)} end
local ends = math.floor(until_ms / 1000)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'who', ARGV[3], 'where', ARGV[4], 'reason', ARGV[5],
  'when', iso_utc(tonumber(t[1]), tonumber(t[2])), 'until', iso_utc(ends, (until_ms - ends * 1000) * 1000),
  'until_ms', string.format('%.0f', until_ms))
redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', until_ms))
register(KEYS[2], ARGV[6], now)
return {1, redis.call('HGETALL', KEYS[1])}
"""


def pause_call(keys: LockKeys, request: PauseRequest, keep_ms: int, registry: str | None) -> ScriptCall:
    """PAUSE_SCRIPT for one name: its end by the server's clock (--for) or at a time (--until)."""
    for_ms: Arg = ms(request.for_s) if request.for_s is not None else ""
    until_ms: Arg = int(request.until_epoch_s * 1000) if request.until_epoch_s is not None else ""
    return ScriptCall(PAUSE_SCRIPT, [keys.paused, registry or keys.paused],
                      [for_ms, until_ms, request.who, request.where, request.reason, keep_ms])
