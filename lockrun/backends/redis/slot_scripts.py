"""--slots N: up to N holders of a name at once (docs/operating.md), as Lua scripts kept as data,
each beside the function that builds its KEYS and ARGV. ``scripts.py``'s acquire, renew and
release send a --slots lease here.
"""

from __future__ import annotations

from lockrun.backends.redis.keys import LockKeys
from lockrun.backends.redis.lua_parts import ACQUIRE_PIECES, FLEET_END_LUA, HEARTBEAT_LUA, RELEASE_LUA
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

# --slots N: up to N holders at once, a sorted set of owner tokens scored by expiry on
# Redis' own clock (TIME), swept on every acquire. Each holder has its own info hash.
# KEYS: slots, slots:n, fence, our info, lock (the plain lock: a conflict), runs, counts, open,
# names (or the slots key again), then [done[, once_tz]]. ARGV: token, ttl_ms, n, last_try,
# maxlen, keep_ms, allow_eviction, zone, remember_ms, then info field/value pairs.
# Returns {1, fence, evicting, pause problem}; {2} for a done --once key; {3, pause} for a paused
# name; {-1, n} when the name is in use with
# another N (1: as a plain lock); {-2, ...}, {-3, zone, length} and {-4, kind} as the plain acquire;
# {0, ms until the soonest holder expires, its info}.
# The fence follows the plain lock's rule: max(counter + 1, server TIME in µs).
SLOTS_ACQUIRE_SCRIPT = ACQUIRE_PIECES + """
if redis.replicate_commands then redis.replicate_commands() end  -- Redis < 7 needs it; not every server has it
local evicts = eviction()
local refusal = refused(evicts, ARGV[7])
if refusal then return refusal end
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {SLOTS_MISMATCH, 1}
end
local n = tonumber(ARGV[3])
local stored = redis.call('GET', KEYS[2])
if stored and tonumber(stored) ~= n and redis.call('ZCARD', KEYS[1]) > 0 then
  return {SLOTS_MISMATCH, tonumber(stored)}
end
local conflict = zone_conflict(KEYS[11], ARGV[8])
if conflict then return refused_zone(conflict) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= n then
  local paused = pause_of(string.sub(KEYS[5], 1, -5) .. 'paused')
  if paused and paused[1] == 1 then
    record_count(KEYS[7], KEYS[9], ARGV[6], 'paused', info_value(10, 'host'))
    return {PAUSED, paused[2]}
  end
  if ARGV[4] == '1' then
    record_count(KEYS[7], KEYS[9], ARGV[6], 'busy', info_value(10, 'host'))
  end
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local other = string.sub(KEYS[4], 1, #KEYS[4] - #ARGV[1]) .. first[1]
  return {BUSY, tonumber(first[2]) - now, redis.call('HGETALL', other)}
end
local pause = pause_of(string.sub(KEYS[5], 1, -5) .. 'paused')
if pause and pause[1] == 1 then
  record_count(KEYS[7], KEYS[9], ARGV[6], 'paused', info_value(10, 'host'))
  return {PAUSED, pause[2]}
end
if KEYS[10] and redis.call('EXISTS', KEYS[10]) == 1 then
  record_count(KEYS[7], KEYS[9], ARGV[6], 'duplicate', info_value(10, 'host'))
  return {DUPLICATE}
end
keep_zone(KEYS[11], ARGV[8], tonumber(ARGV[9]) + tonumber(ARGV[2]))
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('SET', KEYS[2], n)
local keep = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
local fence = math.max(redis.call('INCRBY', KEYS[3], 0) + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('SET', KEYS[3], string.format('%.0f', fence))
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[4], 'fencing_token', string.format('%.0f', fence), unpack(ARGV, 10))
heartbeat(KEYS[4])  -- the first heartbeat: the server's TIME (HEARTBEAT_LUA)
redis.call('PEXPIRE', KEYS[4], ARGV[2])
record_start(KEYS[8], KEYS[9], ARGV[6], fence, 10, now, n)
declare_cadence(string.sub(KEYS[5], 1, -5) .. 'cadence', 10, ARGV[6])
return {TAKEN, fence, evicting_policy(evicts), pause_problem(pause)}
"""

# Renew one slot: reset its expiry (never add to it) if it is still ours and unexpired; stamp
# the heartbeat with the server's TIME (HEARTBEAT_LUA).
# KEYS: slots, slots:n, our info. ARGV: token, ttl_ms, child_pid. Returns 1 or 0.
SLOTS_RENEW_SCRIPT = HEARTBEAT_LUA + """
if redis.replicate_commands then redis.replicate_commands() end  -- Redis < 7 needs it; not every server has it
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
redis.call('HSET', KEYS[3], 'child_pid', ARGV[3])
heartbeat(KEYS[3])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return 1
"""

# Give a slot back (release, or unlock of exactly that token) and wake one waiter; mark the
# --once key done and keep the name's zone as long; record the run's end in the fleet record
# (also when the slot was no longer ours).
# KEYS: slots, slots:n, that holder's info, wake, runs, last, counts, open, vals, names (or the
# slots key again), then [done[, once_tz]].
# ARGV: token, wake_ttl_ms, remember_ms, done_value, zone, then the record (see FLEET_END_LUA) from
# ARGV[6]. Returns 1 if the slot was ours, 0 if not: swept by another acquire, cleared, or
# expired (by Redis' clock) even if nobody swept it yet, as a plain lock's key would have.
# The slot goes first, as in RELEASE_SCRIPT (ZREM may not grow memory).
SLOTS_RELEASE_SCRIPT = FLEET_END_LUA + RELEASE_LUA + """
if redis.replicate_commands then redis.replicate_commands() end  -- Redis < 7 needs it; not every server has it
local released = 0
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  local t = redis.call('TIME')
  if tonumber(score) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then released = 1 end
  redis.call('DEL', KEYS[3])
  if redis.call('ZCARD', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[1], KEYS[2])
  end
  wake(KEYS[4], ARGV[2])
end
mark_done(KEYS[11], ARGV[4], ARGV[3])
keep_zone_for(KEYS[12], ARGV[5], ARGV[3])
record_end(KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], 6, released)
return released
"""


def slots_acquire_call(
    keys: LockKeys, token: str, ttl: float, info: dict[str, str], once: OnceKey | None, slots: int,
    last_try: bool, retention: FleetRetention, allow_eviction: bool, registry: str | None,
) -> ScriptCall:
    """SLOTS_ACQUIRE_SCRIPT: one of ``slots`` holders (``registry``: as scripts.acquire_call)."""
    slot_keys = [keys.slots, keys.slot_count, keys.fence, keys.slot_info(token), keys.lock, keys.runs,
                 keys.counts, keys.open, registry or keys.slots, *once_keys(keys, once)]
    return ScriptCall(SLOTS_ACQUIRE_SCRIPT, slot_keys, [token, ms(ttl), slots, int(last_try),
                                                        *acquire_args(retention, allow_eviction, once),
                                                        *flat_pairs(info)])


def slots_renew_call(keys: LockKeys, lease: Lease, child_pid: int | None) -> ScriptCall:
    args: list[Arg] = [lease.token, ms(lease.ttl), child_pid or ""]
    return ScriptCall(SLOTS_RENEW_SCRIPT, [keys.slots, keys.slot_count, keys.slot_info(lease.token)], args)


def slots_release_call(
    keys: LockKeys, token: str, retention: FleetRetention, done: OnceKey | None, record: FleetRecord | None,
    registry: str | None,
) -> ScriptCall:
    """SLOTS_RELEASE_SCRIPT: give the slot back, wake one waiter, mark ``done``, add ``record``."""
    fleet_keys, fleet_args = record_args(keys, record, retention)
    script_keys = [keys.slots, keys.slot_count, keys.slot_info(token), keys.wake, *fleet_keys,
                   registry or keys.slots, *once_keys(keys, done)]
    return ScriptCall(SLOTS_RELEASE_SCRIPT, script_keys, [token, WAKE_TTL_MS, *done_args(done), *fleet_args])
