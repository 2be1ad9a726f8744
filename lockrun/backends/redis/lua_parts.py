"""The Lua pieces the Redis backend's scripts are built from (``scripts.py`` and ``slot_scripts.py``
join them).

Each piece is a set of local functions with a comment saying what it reads and writes; a
script is some of these pieces and its own body, sent as one text and so run atomically.
"""

from __future__ import annotations

from enum import IntEnum

from lockrun.backends.redis.record_format import OPEN_SPARE, SKIPS_KEPT, VALS_MAX


class Acquired(IntEnum):
    """What an acquire script's reply begins with (scripts.py's ACQUIRE_SCRIPT says what follows
    each): the numbers are written here only, the Lua knows them by these names."""

    BUSY = 0
    TAKEN = 1
    DUPLICATE = 2  # the --once key is done
    PAUSED = 3
    TOO_SOON = 5  # --once-every: the last success is too recent
    SLOTS_MISMATCH = -1
    EVICTING = -2
    ZONE_MISMATCH = -3
    ZONE_NOT_A_STRING = -4


#: The replies' names as Lua locals, first in every acquire script.
ACQUIRE_REPLIES_LUA = "local {} = {}\n".format(", ".join(reply.name for reply in Acquired),
                                               ", ".join(str(int(reply)) for reply in Acquired))

# The fleet record (docs/fleet.md "One fleet, one memory"), written inside the lock scripts so that
# it costs no round trip. Every write goes through redis.pcall: a record that cannot be
# written (a key of the wrong type, no memory) never fails the lock operation around it.
# Its layout is record_format.py's: one ``runs`` entry per finished run, the same fields every
# time; host names and commands stored once in ``vals``; the runs in progress in ``open``.
#
# record_end(runs, last, counts, open, vals, names, a, released): ARGV[a..] = maxlen, keep_ms,
# status ('' records nothing), output_tail, ended_at, at_once ('1': a row that is over at once,
# an unlock: recorded only if the script cleared something), run_id, the row as JSON in three
# parts (``last`` keeps it so: status reads thousands): its head, then the tail to append when
# the lock was still the run's and the one when it was not (its note and lock_lost_at_release
# say so; '': no such variant), the note of each, then the entry's field/value pairs
# (record_format.event_pairs: ``h`` and ``c`` raw, ``n``, ``l`` and ``k`` filled in here). A
# release that found the lock no longer the run's counts it in ``counts`` under
# record.LOST_AT_RELEASE_COUNT (not a status: readers of statuses skip it).
# A run is recorded once: its ``open`` entry goes in the same step, so a release retried after
# a lost reply finds none, and then finds its own entry among the newest: nothing twice. A run
# with no ``open`` entry and no entry of its own among the newest 200 is recorded all the same:
# its ``open`` entry went with the server's data (a restart without persistence, a failover that
# lost it) or was pruned (prune_open) while the run held on.
# names: the registry (keys.registry_key), or KEYS[1] again where there is none (a Cluster).
# The acquire scripts take FLEET_START_LUA (record_start, record_count), the release scripts
# FLEET_END_LUA (record_end): EVAL sends a script's whole text every time.
FLEET_COMMON_LUA = """
local function fleet_touch(keep, ...)
  for _, key in ipairs({...}) do redis.pcall('PEXPIRE', key, keep) end
end
local function fleet_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function register(names, keep, now)
  if names == KEYS[1] then return end
  local name = string.match(KEYS[1], '{([^{}]*)}:[^{}]*$')
  if not name then return end
  redis.pcall('ZADD', names, now, name)
  redis.pcall('ZREMRANGEBYSCORE', names, '-inf', '(' .. string.format('%.0f', now - tonumber(keep)))
  redis.pcall('PEXPIRE', names, keep)
end
"""
FLEET_END_LUA = FLEET_COMMON_LUA + """
local function fleet_ref(vals, kind, value)
  if value == '' then return '' end
  local known = redis.pcall('HGET', vals, kind .. value)
  if type(known) == 'string' then return known end
  if type(known) == 'table' then return '=' .. value end
  local n = redis.pcall('HLEN', vals)
  if type(n) ~= 'number' or n >= """ + str(VALS_MAX) + """ then return '=' .. value end
  redis.pcall('HSET', vals, kind .. value, n + 1)
  return tostring(n + 1)
end
local function not_recorded_yet(runs, run_id)
  local ok, entries = pcall(redis.call, 'XREVRANGE', runs, '+', '-', 'COUNT', 200)
  if not ok then return true end
  for _, entry in ipairs(entries) do
    local f = {}
    for i = 1, #entry[2] - 1, 2 do f[entry[2][i]] = entry[2][i + 1] end
    if f['r'] == run_id then return false end
  end
  return true
end
local function record_end(runs, last, counts, open, vals, names, a, released)
  local status = ARGV[a + 2]
  local at_once = ARGV[a + 5] == '1'
  if status == '' or (at_once and released == 0) then return end
  local run_id = ARGV[a + 6]
  local opened = redis.pcall('HGET', open, run_id)
  local start_ms = nil
  if type(opened) == 'string' then
    redis.pcall('HDEL', open, run_id)
    start_ms = tonumber(string.match(opened, '^(%d+) '))
  elseif not at_once and not not_recorded_yet(runs, run_id) then
    return
  end
  local now = fleet_now()
  local maxlen, keep = ARGV[a], ARGV[a + 1]
  local decided = ARGV[a + 9] ~= ''
  local lost = decided and released == 0
  local note = ARGV[a + 10]
  if lost then note = ARGV[a + 11] end
  local fields = {}
  for i = a + 12, #ARGV - 1, 2 do
    local field, value = ARGV[i], ARGV[i + 1]
    if field == 'h' or field == 'c' then value = fleet_ref(vals, field, value)
    elseif field == 'n' then value = note
    elseif field == 'l' then value = decided and (lost and '1' or '0') or ''
    elseif field == 'k' then  -- an unlock starts and ends at once; a start no longer in open: ''
      if at_once then value = '0' else value = start_ms and string.format('%.0f', math.max(0, now - start_ms)) or '' end
    end
    fields[#fields + 1] = field
    fields[#fields + 1] = value
  end
  local row = ARGV[a + 7] .. ARGV[a + 8]
  if lost then row = ARGV[a + 7] .. ARGV[a + 9] end
  redis.pcall('XADD', runs, 'MAXLEN', '~', maxlen, '*', unpack(fields))
  redis.pcall('XTRIM', runs, 'MINID', '~', string.format('%.0f', now - tonumber(keep)))
  if not at_once then  -- an unlock is not a run: the last run stays the last run
    local success = redis.pcall('HGET', last, 'last_success_at')
    local success_ms = redis.pcall('HGET', last, 'success_ms')
    if status == 'succeeded' then
      success = ARGV[a + 4]
      -- when it started, by the server's clock (the end's if its start is unknown: later, so
      -- --once-every never runs early), for the acquire script's --once-every
      success_ms = string.format('%.0f', start_ms or now)
    end
    redis.pcall('DEL', last)
    redis.pcall('HSET', last, 'run_id', run_id, 'row', row)
    if type(success) == 'string' then redis.pcall('HSET', last, 'last_success_at', success) end
    if type(success_ms) == 'string' then redis.pcall('HSET', last, 'success_ms', success_ms) end
    if ARGV[a + 3] ~= '' then redis.pcall('HSET', last, 'output_tail', ARGV[a + 3]) end
  end
  redis.pcall('HINCRBY', counts, status, 1)
  if lost then redis.pcall('HINCRBY', counts, 'flag:lock_lost_at_release', 1) end
  fleet_touch(keep, runs, last, counts, vals, open)
  register(names, keep, now)
end
"""
FLEET_START_LUA = FLEET_COMMON_LUA + """
local function prune_open(open, cap)
  local n = redis.pcall('HLEN', open)
  if type(n) ~= 'number' or n <= cap then return end
  local flat = redis.call('HGETALL', open)
  local entries = {}
  for i = 1, #flat, 2 do
    entries[#entries + 1] = {tonumber(string.match(flat[i + 1], '^(%d+) ') or '0') or 0, flat[i]}
  end
  table.sort(entries, function(x, y) return x[1] < y[1] end)
  for i = 1, n - cap do redis.call('HDEL', open, entries[i][2]) end
end
local function record_start(open, names, keep, fence, first, now, slots)
  local shared = {host = true, pid = true, command = true, started_at = true, ttl_ms = true}
  local info, run_id = {}, nil
  for i = first, #ARGV - 1, 2 do
    if ARGV[i] == 'run_id' then run_id = ARGV[i + 1]
    elseif shared[ARGV[i]] then info[ARGV[i]] = ARGV[i + 1] end
  end
  if run_id then
    local start = string.format('%.0f %.0f ', now, fence)
    if next(info) == nil then start = start .. '{}' else start = start .. cjson.encode(info) end
    redis.pcall('HSET', open, run_id, start)
    prune_open(open, """ + str(OPEN_SPARE) + """ + slots)
  end
  fleet_touch(keep, open)
  register(names, keep, now)
end
local function info_value(first, field)
  for i = first, #ARGV - 1, 2 do
    if ARGV[i] == field then return ARGV[i + 1] end
  end
  return nil
end
local function record_count(counts, names, keep, status, host)
  redis.pcall('HINCRBY', counts, status, 1)
  local now = fleet_now()
  -- the skip's time and host, so that timeline --fleet can place it: the newest SKIPS_KEPT only
  -- (the same script's keys share the name's slot: ...:counts and ...:skips)
  local skips = string.sub(counts, 1, -8) .. ':skips'
  redis.pcall('LPUSH', skips, string.format('%.0f', now) .. ' ' .. status .. ' ' .. (host or ''))
  redis.pcall('LTRIM', skips, 0, """ + str(SKIPS_KEPT - 1) + """)
  fleet_touch(keep, counts, skips)
  register(names, keep, now)
end
"""

# Wake one waiter: a release pushes to the name's wake list, where waiters BLPOP (a list of at
# most 64 wake-ups, gone after ARGV's wake TTL when nobody waits).
WAKE_LUA = """
local function wake(key, ttl_ms)
  redis.call('LPUSH', key, '1')
  redis.call('LTRIM', key, 0, 63)
  redis.call('PEXPIRE', key, ttl_ms)
end
"""

# A release marks the --once key done (if the run has one: its key comes after the fleet
# record's), keeps the name's recorded time zone at least as long as that mark (if the key is
# time-derived: the zone's key comes last, docs/guarantees.md "One zone per name"), and wakes one waiter.
RELEASE_LUA = WAKE_LUA + """
local function mark_done(key, value, remember_ms)
  if key then redis.call('SET', key, value, 'PX', remember_ms) end
end
local function keep_zone_for(key, zone, keep_ms)
  if key and redis.call('GET', key) == zone then
    redis.call('PEXPIRE', key, math.max(redis.call('PTTL', key), tonumber(keep_ms)))
  end
end
"""

# What the acquire scripts check before anything else (docs/guarantees.md "A Redis that evicts keys",
# "One zone per name"), without a round trip of their own:
#
# eviction(): INFO memory, read by the script itself (scripts may call INFO; CONFIG is refused
# to them, and hosted Redis often renames it). nil when the server keeps every key: maxmemory
# 0, or maxmemory-policy noeviction. Otherwise {policy, maxmemory, why}, policy '' when it
# cannot tell (INFO refused, e.g. by an ACL; no maxmemory_policy line): every other policy,
# allkeys-* and volatile-* alike, may evict lockrun's keys, which all have a TTL.
#
# zone_conflict(key, zone): {'string', first 65 bytes, length} of the time zone recorded for
# the name's --once periods when it is not ``zone`` (a record of any size costs the reply 65
# bytes), or {kind} when the key is not a string at all; nil when they agree or nothing is
# recorded. keep_zone(key, zone, keep_ms) records ``zone`` with at least keep_ms
# to live. No key (a run whose --once key does not depend on the time): nothing to check.
ACQUIRE_CHECKS_LUA = """
local function info_field(info, name, pattern)
  -- a plain find, then a match anchored there: an unanchored pattern over the whole reply
  -- would cost the script as much again as INFO itself (bench/eviction_check.py)
  local at = string.find(info, '\\n' .. name .. ':', 1, true)
  if not at then return nil end
  return string.match(info, pattern, at + #name + 2)
end
local function eviction()
  local info = redis.pcall('INFO', 'memory')
  if type(info) ~= 'string' then
    local why = 'no reply'
    if type(info) == 'table' and info.err then why = info.err end
    return {'', 0, why}
  end
  local limit = tonumber(info_field(info, 'maxmemory', '^(%d+)') or '')
  local policy = info_field(info, 'maxmemory_policy', '^([%w%-]+)')
  if not limit or not policy then return {'', 0, 'INFO memory names no maxmemory_policy'} end
  if limit == 0 or policy == 'noeviction' then return nil end
  return {policy, limit, ''}
end
local function zone_conflict(key, zone)
  if not key then return nil end
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'none' and kind ~= 'string' then return {kind} end
  local recorded = redis.call('GET', key)
  if recorded and recorded ~= zone then
    return {'string', string.sub(recorded, 1, 65), #recorded}
  end
  return nil
end
local function keep_zone(key, zone, keep_ms)
  if key then redis.call('SET', key, zone, 'PX', math.max(redis.call('PTTL', key), keep_ms)) end
end
local function refused(evicts, allowed)
  if evicts and allowed ~= '1' then return {EVICTING, evicts[1], evicts[2], evicts[3]} end
  return nil
end
local function refused_zone(conflict)
  if conflict[1] ~= 'string' then return {ZONE_NOT_A_STRING, conflict[1]} end
  return {ZONE_MISMATCH, conflict[2], conflict[3]}
end
local function evicting_policy(evicts)
  if not evicts then return '' end
  if evicts[1] == '' then return '?' end
  return evicts[1]
end
"""

# The holder's heartbeat is the server's TIME, never the holder's clock: heartbeat(info_key)
# writes it to the info hash as ISO 8601 UTC (microseconds), which `status` and `unlock` measure
# against the server's TIME of their own inspection, so that no two hosts' clocks are compared
# (docs/redis.md "Redis keys"). The civil date of a day count: H. Hinnant's civil_from_days.
HEARTBEAT_LUA = """
local function iso_utc(s, us)
  local rest = s % 86400
  local z = (s - rest) / 86400 + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local day = doy - math.floor((153 * mp + 2) / 5) + 1
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400 + (month <= 2 and 1 or 0)
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%06dZ', year, month, day,
    math.floor(rest / 3600), math.floor(rest % 3600 / 60), rest % 60, us)
end
local function heartbeat(key)
  local t = redis.call('TIME')
  redis.call('HSET', key, 'heartbeat_at', iso_utc(tonumber(t[1]), tonumber(t[2])))
end
"""

# pause_of(key): the name's pause (``lockrun pause``, docs/operating.md "Pausing a job"), which the
# acquire scripts read under the lock they just took, in the same EVAL (no round trip of its own).
# nil: none; {1, hash as a flat list}: a pause lockrun wrote (a hash with until_ms in whole ms and an
# expiry: PEXPIREAT its end); {0, why}: something else sits there, which is not honoured (the run
# goes on and says so: a pause whose end nobody can read would silence the job for good). The key
# is the lock key's sibling, as the wake list is: KEYS[1] (or KEYS[5] of a --slots acquire) with
# ``paused`` for ``lock``, in the same hash slot. Its fields are judged as the readers judge them
# (backends/pause.py Paused.from_fields, redis/pauses.py), so that a pause status calls malformed
# is never one a run honours: when and until lockrun's ISO 8601 UTC form of a real date, until
# present, who/where/reason at most MAX_TEXT (1024) characters (UTF-8 lead bytes counted).
PAUSE_LUA = """
local function iso_time(value)
  local y, mo, d, h, mi, s = string.match(value, '^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)')
  if not y then return false end
  local rest = string.sub(value, 20)
  if rest ~= 'Z' and not string.match(rest, '^%.%d+Z$') then return false end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  local days = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
  if y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0) then days[2] = 29 end
  return y >= 1 and mo >= 1 and mo <= 12 and d >= 1 and d <= days[mo] and tonumber(h) <= 23
    and tonumber(mi) <= 59 and tonumber(s) <= 59
end
local function pause_of(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then return nil end
  if kind ~= 'hash' then return {0, 'a ' .. kind .. ', not a hash'} end
  local f = redis.call('HMGET', key, 'until_ms', 'until', 'when', 'who', 'where', 'reason')
  local ms = f[1]
  if not (ms and #ms <= 15 and string.match(ms, '^%d+$')) then return {0, 'a hash without until_ms in whole ms'} end
  if redis.call('PTTL', key) < 0 then return {0, 'a hash without an expiry'} end
  if not (f[2] and iso_time(f[2])) or (f[3] and f[3] ~= '' and not iso_time(f[3])) then
    return {0, 'a hash whose when or until is not an ISO 8601 UTC time'}
  end
  for i = 4, 6 do
    if f[i] and select(2, string.gsub(f[i], '[^\\128-\\191]', '')) > 1024 then
      return {0, 'a hash with a field over 1024 characters'}
    end
  end
  return {1, redis.call('HGETALL', key)}
end
local function pause_problem(pause)
  if pause and pause[1] == 0 then return pause[2] end
  return ''
end
"""

# declare_cadence(key, first, keep): the cadence a run declares (--every/--schedule, --grace; docs/
# operating.md "Declaring a cadence"), an info pair ``cadence`` among ARGV[first..], kept with the
# name in ``key`` (the lock key's sibling ``cadence``, as PAUSE_LUA's): written only when it
# changed, so that a run that declares what the last one did costs the fleet record no memory;
# its expiry follows the fleet record's (keep ms from the newest declaring run).
CADENCE_LUA = """
local function declare_cadence(key, first, keep)
  for i = first, #ARGV - 1, 2 do
    if ARGV[i] == 'cadence' then
      if redis.pcall('GET', key) == ARGV[i + 1] then
        redis.pcall('PEXPIRE', key, keep)
      else
        redis.pcall('SET', key, ARGV[i + 1], 'PX', keep)
      end
      return
    end
  end
end
"""

# Between two --retry attempts (docs/operating.md "Retries and jitter"), the lock stays the run's:
# renewed_for_attempt(first) renews it as RENEW_SCRIPT or SLOTS_RENEW_SCRIPT would (if the token
# is still ours: a reset, never an addition) and sets ARGV[4] holder field/value pairs, from
# ARGV[first], on its info hash (the attempt, when the next one starts), with a heartbeat
# (HEARTBEAT_LUA). KEYS[1]: the lock (or the slots set, ARGV[3] = '1'), KEYS[2]: its info hash,
# KEYS[3]: the preemption request (or the slot count). ARGV[1]: token, ARGV[2]: ttl_ms.
# Returns 1 renewed, 2 renewed but another run asked to replace this one (--replace), 0 lost.
ATTEMPT_LUA = """
local function renewed_for_attempt(first)
  local slotted = ARGV[3] == '1'
  if slotted then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
    if not score or tonumber(score) <= now then return 0 end
    redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
    local keep = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
    redis.call('PEXPIRE', KEYS[1], keep)
    redis.call('PEXPIRE', KEYS[3], keep)
  else
    if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  local n = tonumber(ARGV[4])
  if n > 0 then redis.call('HSET', KEYS[2], unpack(ARGV, first, first + 2 * n - 1)) end
  heartbeat(KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  if not slotted and redis.call('EXISTS', KEYS[3]) == 1 then return 2 end
  return 1
end
"""

#: What both acquire scripts are built on: their replies' names (Acquired) first.
ACQUIRE_PIECES = ACQUIRE_REPLIES_LUA + FLEET_START_LUA + ACQUIRE_CHECKS_LUA + HEARTBEAT_LUA + PAUSE_LUA + CADENCE_LUA
