"""Reading the fleet record back from Redis (README "One fleet, one memory").

The record is written by the lock scripts in redis.py (no round trip of its own); this
module only reads it: the names that have one (SCAN, never KEYS), pages of a name's
``runs`` stream, its ``last`` and ``counts`` hashes. Every read of many names is
pipelined in batches. What comes back is raw: lockrun/fleet.py parses it defensively.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis

from lockrun.backends.redis import REDIS_ERRORS, SCAN_BATCH, _glob_escape, _text, lock_keys

if TYPE_CHECKING:
    from lockrun.backends.redis import RedisBackend

#: A stream entry: its ID ("ms-seq") and its fields (bytes or str keys and values).
Event = tuple[str, dict]

# The entries of one page of a name's stream (newest first, from ARGV[2], at most ARGV[3])
# whose run id starts with ARGV[1], and the ``last`` hash if it describes such a run (for its
# output tail). Scanning happens in Redis, so only the matches cross the network; pages keep
# each call short, so a long stream never holds up the renewals of every other host.
# KEYS: runs, last. ARGV: run id prefix, "+" or "(ID", page size.
# Returns {entries, last-as-flat-list or {}, ID of the page's oldest entry or "" at the end}.
FIND_RUN_SCRIPT = """
local found = {}
local ok, entries = pcall(redis.call, 'XREVRANGE', KEYS[1], ARGV[2], '-', 'COUNT', ARGV[3])
if not ok then
  return {found, {}, ''}
end
for _, entry in ipairs(entries) do
  local fields = entry[2]
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'run_id' then
      if string.sub(fields[i + 1], 1, #ARGV[1]) == ARGV[1] then found[#found + 1] = entry end
      break
    end
  end
end
local last = {}
if #found > 0 then
  local got, run_id = pcall(redis.call, 'HGET', KEYS[2], 'run_id')
  if got and type(run_id) == 'string' and string.sub(run_id, 1, #ARGV[1]) == ARGV[1] then
    last = redis.call('HGETALL', KEYS[2])  -- HGET worked: it is a hash
  end
end
local oldest = ''
if #entries == tonumber(ARGV[3]) then oldest = entries[#entries][1] end
return {found, last, oldest}
"""
FIND_PAGE = 2000  # stream entries one call of FIND_RUN_SCRIPT looks at: about a millisecond of Redis


def _pairs(flat) -> dict:
    flat = flat or []
    return dict(zip(flat[0::2], flat[1::2]))


class RedisFleetRecord:
    """The fleet record of one Redis (plain, Sentinel or Cluster) behind a RedisBackend."""

    def __init__(self, backend: RedisBackend) -> None:
        self._backend = backend
        self._client = backend._client
        self._prefix = backend.prefix

    def _call(self, fn):
        try:
            return fn()
        except REDIS_ERRORS as exc:
            raise self._backend._unavailable(exc) from None

    def names(self, kinds: tuple[str, ...] = ("runs", "last", "counts")) -> list[str]:
        """Every name with a fleet record of these kinds (``runs``, ``last``, ``counts``), by SCAN."""
        head = f"{self._prefix}{{"
        found: set[str] = set()

        def scan() -> None:
            for tail in (f"}}:{kind}" for kind in kinds):
                pattern = _glob_escape(self._prefix) + "{*" + tail
                for key in self._client.scan_iter(match=pattern, count=SCAN_BATCH):
                    key = _text(key)
                    if key.startswith(head) and key.endswith(tail):
                        found.add(key[len(head) : -len(tail)])

        self._call(scan)
        return sorted(found)

    def _pipelined(self, items: list, queue) -> list:
        """Run ``queue(pipe, item)`` for every item in batches; one reply per item."""
        replies: list = []

        def run() -> None:
            for start in range(0, len(items), SCAN_BATCH):
                pipe = self._client.pipeline(transaction=False)
                for item in items[start : start + SCAN_BATCH]:
                    queue(pipe, item)
                # A key of the wrong type answers with an error, not an exception for the batch.
                replies.extend(pipe.execute(raise_on_error=False))

        self._call(run)
        return replies

    def pages(self, requests: list) -> list[list[Event]]:
        """One page of events per request (name, before, oldest, count: fleet.PageRequest),
        newest first; a stream that cannot be read (a key of another type) reads as empty."""
        replies = self._pipelined(
            requests,
            lambda pipe, r: pipe.xrevrange(lock_keys(self._prefix, r.name).runs, max=r.before, min=r.oldest,
                                           count=r.count),
        )
        return [
            [(_text(entry_id), fields) for entry_id, fields in reply] if isinstance(reply, list) else []
            for reply in replies
        ]

    def after(self, name: str, entry_id: str) -> list[Event]:
        """Every event of ``name`` newer than ``entry_id``, oldest first (a late end event)."""
        reply = self._pipelined(
            [name], lambda pipe, n: pipe.xrange(lock_keys(self._prefix, n).runs, min=f"({entry_id}")
        )[0]
        return [(_text(entry_id), fields) for entry_id, fields in reply] if isinstance(reply, list) else []

    def lasts(self, names: list[str]) -> dict[str, tuple]:
        """``(row as JSON, last_success_at)`` from the ``last`` hash of each name that has one
        (not its output tail: status asks this of thousands of names)."""
        replies = self._pipelined(
            names, lambda pipe, name: pipe.hmget(lock_keys(self._prefix, name).last, "row", "last_success_at")
        )
        return {name: tuple(reply) for name, reply in zip(names, replies)
                if isinstance(reply, list) and len(reply) == 2 and any(reply)}

    def counts(self, names: list[str]) -> dict[str, dict]:
        """The ``counts`` hash of each name that has one."""
        replies = self._pipelined(names, lambda pipe, name: pipe.hgetall(lock_keys(self._prefix, name).counts))
        return {name: reply for name, reply in zip(names, replies) if isinstance(reply, dict) and reply}

    def find_run(self, names: list[str], run_id_prefix: str) -> list[tuple[str, list[Event], dict]]:
        """(name, matching events newest first, ``last`` if it is that run) for each name with a match."""
        events: dict[str, list[Event]] = {}
        lasts: dict[str, dict] = {}
        cursors = dict.fromkeys(names, "+")
        while cursors:
            asked = list(cursors)
            replies = self._find_page([(lock_keys(self._prefix, n), cursors[n]) for n in asked], run_id_prefix)
            cursors = {}
            for name, reply in zip(asked, replies):
                if not isinstance(reply, list) or len(reply) != 3:
                    continue  # this name's keys are not what lockrun wrote
                matched = [(_text(entry[0]), _pairs(entry[1])) for entry in reply[0] or [] if isinstance(entry, list)]
                if matched:
                    events.setdefault(name, []).extend(matched)
                    lasts[name] = lasts.get(name) or _pairs(reply[1])
                if reply[2]:
                    cursors[name] = f"({_text(reply[2])}"
        return [(name, events[name], lasts.get(name, {})) for name in names if name in events]

    def _find_page(self, pages: list, run_id_prefix: str) -> list:
        """One FIND_RUN_SCRIPT call per (keys, cursor): pipelined, or one by one on a Cluster,
        whose pipelines cannot carry scripts."""
        args = (run_id_prefix,)
        if not self._backend.is_cluster:
            return self._pipelined(pages, lambda pipe, page: pipe.eval(
                FIND_RUN_SCRIPT, 2, page[0].runs, page[0].last, *args, page[1], FIND_PAGE))

        def one_by_one() -> list:
            replies: list = []
            for keys, cursor in pages:
                try:
                    replies.append(self._client.eval(FIND_RUN_SCRIPT, 2, keys.runs, keys.last, *args, cursor,
                                                     FIND_PAGE))
                except redis.ResponseError as exc:  # this name's keys are not what lockrun wrote
                    replies.append(exc)
            return replies

        return self._call(one_by_one)
