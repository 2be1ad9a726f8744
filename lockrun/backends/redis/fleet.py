"""Reading the fleet record back from Redis (docs/fleet.md "One fleet, one memory").

The record is written by the lock scripts in redis.py (no round trip of its own); this
module only reads it: the names (the registry, registry.py; SCAN on a Cluster), pages of a
name's ``runs`` stream, its runs in progress (``open``), its ``last`` and ``counts`` hashes.
Every read of many names is pipelined in batches. Stream entries come back as the fields of an
``end`` event and ``open`` entries as those of a ``start`` event (record_format.py); a stream
entry that is not in that layout is no run of lockrun's and is left out; everything else comes
back raw, and views/fleet.py parses it defensively.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from lockrun.backends.redis.keys import SCAN_BATCH, lock_keys
from lockrun.backends.redis.record_format import SKIPS_KEPT, decode_event, decode_open, is_compact, vals_by_number
from lockrun.backends.redis.registry import NameRegistry
from lockrun.backends.redis.replies import pairs, text
from lockrun.backends.values import FleetEvent as Event
from lockrun.backends.values import PageRequest
from lockrun.core.readers import text_of
from lockrun.core.run_ids import run_id_digits

if TYPE_CHECKING:
    from redis.client import Pipeline
    from redis.cluster import ClusterPipeline

    from lockrun.backends.redis.client import RedisConnection
    from lockrun.backends.redis.keys import LockKeys

    AnyPipeline = Pipeline | ClusterPipeline


Item = TypeVar("Item")
Pipe = TypeVar("Pipe", bound="AnyPipeline")  # _find_page's queue needs a plain Pipeline's eval


# The entries of one page of a name's stream (newest first, from ARGV[2], at most ARGV[3])
# whose run id (``r``) starts with the hex digits ARGV[1]
# (dashes ignored: core/run_ids), and the ``last`` hash if it describes such a run (for its
# output tail). Scanning happens in Redis, so only the matches cross the network; pages keep
# each call short, so a long stream never holds up the renewals of every other host.
# KEYS: runs, last. ARGV: run id prefix, "+" or "(ID", page size.
# Returns {entries, last-as-flat-list or {}, ID of the page's oldest entry or "" at the end}.
FIND_RUN_SCRIPT = """
local function digits(id) return (string.gsub(id, '%-', '')) end
local found = {}
local ok, entries = pcall(redis.call, 'XREVRANGE', KEYS[1], ARGV[2], '-', 'COUNT', ARGV[3])
if not ok then
  return {found, {}, ''}
end
for _, entry in ipairs(entries) do
  local fields = entry[2]
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'r' then
      if string.sub(digits(fields[i + 1]), 1, #ARGV[1]) == ARGV[1] then found[#found + 1] = entry end
      break
    end
  end
end
local last = {}
if #found > 0 then
  local got, run_id = pcall(redis.call, 'HGET', KEYS[2], 'run_id')
  if got and type(run_id) == 'string' and string.sub(digits(run_id), 1, #ARGV[1]) == ARGV[1] then
    last = redis.call('HGETALL', KEYS[2])  -- HGET worked: it is a hash
  end
end
local oldest = ''
if #entries == tonumber(ARGV[3]) then oldest = entries[#entries][1] end
return {found, last, oldest}
"""
FIND_PAGE = 2000  # stream entries one call of FIND_RUN_SCRIPT looks at: about a millisecond of Redis


class RedisFleetRecord:
    """The fleet record of one Redis (plain, Sentinel or Cluster), read through its connection."""

    def __init__(self, connection: RedisConnection,
                 prefetched_lasts: dict[str, tuple[object, object]] | None = None) -> None:
        self._connection = connection
        self._client = connection.client
        self._prefix = connection.prefix
        # Lasts that the holders' batch reads already brought (redis_inspect.py): not read twice.
        self._prefetched = prefetched_lasts or {}
        self._registry = NameRegistry(connection)
        self._vals: dict[str, dict[str, tuple[str, str]]] = {}  # each name's ``vals``, read once

    def names(self, kinds: tuple[str, ...] = ("runs", "last", "counts")) -> list[str]:
        """Every registered name (registry.py); on a Cluster, every name with a fleet record of
        these kinds (``runs``, ``last``, ``counts``), by SCAN."""
        return sorted(self._registry.names(kinds))

    def opens(self, names: list[str]) -> dict[str, list[Event]]:
        """The runs in progress (started, not ended) of each name, as ``start`` events at their
        server start time, newest first; entries lockrun did not write are left out."""
        replies = self._pipelined(names, lambda pipe, name: pipe.hgetall(lock_keys(self._prefix, name).open))
        found: dict[str, list[Event]] = {}
        for name, reply in zip(names, replies, strict=True):
            if not isinstance(reply, dict):
                continue
            events = [event for run_id, value in reply.items() if (event := decode_open(run_id, value))]
            if events:
                found[name] = sorted(events, key=lambda event: -int(event[0].split("-", 1)[0]))
        return found

    def _decoded(self, name: str, reply: Any) -> list[Event]:
        """Stream entries as (ID, an end event's fields); entries not in the layout are left out."""
        events = [(entry_id, fields) for entry_id, fields in _events(reply) if is_compact(fields)]
        if not events:
            return []
        vals = self._vals_of([name])[name]
        return [(entry_id, decode_event(entry_id, fields, vals)) for entry_id, fields in events]

    def _vals_of(self, names: list[str]) -> dict[str, dict[str, tuple[str, str]]]:
        unread = [name for name in dict.fromkeys(names) if name not in self._vals]
        if unread:
            replies = self._pipelined(unread, lambda pipe, name: pipe.hgetall(lock_keys(self._prefix, name).vals))
            for name, reply in zip(unread, replies, strict=True):
                self._vals[name] = vals_by_number(reply if isinstance(reply, dict) else None)
        return {name: self._vals[name] for name in names}

    def _pipe(self) -> AnyPipeline:
        return self._client.pipeline(transaction=False)

    def _pipelined(self, items: Sequence[Item], queue: Callable[[AnyPipeline, Item], object]) -> list[Any]:
        """Run ``queue(pipe, item)`` for every item in batches; one reply per item."""
        return self._batched(items, queue, self._pipe)

    def _batched(self, items: Sequence[Item], queue: Callable[[Pipe, Item], object],
                 new_pipe: Callable[[], Pipe]) -> list[Any]:
        """:meth:`_pipelined` on pipelines from ``new_pipe``."""
        replies: list[Any] = []

        def run() -> None:
            for start in range(0, len(items), SCAN_BATCH):
                pipe = new_pipe()
                for item in items[start : start + SCAN_BATCH]:
                    queue(pipe, item)
                # A key of the wrong type answers with an error, not an exception for the batch.
                replies.extend(pipe.execute(raise_on_error=False))

        self._connection.call(run)
        return replies

    def pages(self, requests: Sequence[PageRequest]) -> list[list[Event]]:
        """One page of events per request (name, before, oldest, count: fleet.PageRequest),
        newest first; a stream that cannot be read (a key of another type) reads as empty."""
        replies = self._pipelined(
            requests,
            lambda pipe, r: pipe.xrevrange(lock_keys(self._prefix, r.name).runs, max=r.before, min=r.oldest,
                                           count=r.size),
        )
        compact = [r.name for r, reply in zip(requests, replies, strict=True)
                   if any(is_compact(fields) for _, fields in _events(reply))]
        self._vals_of(compact)  # one pipeline for every name that needs its vals
        return [self._decoded(r.name, reply) for r, reply in zip(requests, replies, strict=True)]

    def after(self, name: str, entry_id: str) -> list[Event]:
        """Every event of ``name`` newer than ``entry_id``, oldest first (a late end event)."""
        reply = self._pipelined(
            [name], lambda pipe, n: pipe.xrange(lock_keys(self._prefix, n).runs, min=f"({entry_id}")
        )[0]
        return self._decoded(name, reply)

    def lasts(self, names: list[str]) -> dict[str, tuple[object, object]]:
        """``(row as JSON, last_success_at)`` from the ``last`` hash of each name that has one
        (not its output tail: status asks this of thousands of names)."""
        found = {name: pair for name in names if (pair := self._prefetched.get(name)) is not None and any(pair)}
        unread = [name for name in names if name not in self._prefetched]
        replies = self._pipelined(
            unread, lambda pipe, name: pipe.hmget(lock_keys(self._prefix, name).last, "row", "last_success_at")
        )
        found.update({name: (reply[0], reply[1]) for name, reply in zip(unread, replies, strict=True)
                      if isinstance(reply, list) and len(reply) == 2 and any(reply)})
        return found

    def counts(self, names: list[str]) -> dict[str, dict[object, object]]:
        """The ``counts`` hash of each name that has one."""
        replies = self._pipelined(names, lambda pipe, name: pipe.hgetall(lock_keys(self._prefix, name).counts))
        return {name: reply for name, reply in zip(names, replies, strict=True) if isinstance(reply, dict) and reply}

    def skips(self, names: list[str]) -> dict[str, list[object]]:
        """The ``skips`` list of each name that has one, raw, newest first (views/fleet.py reads it):
        the newest SKIPS_KEPT only, all lockrun keeps, however long another writer made the list."""
        replies = self._pipelined(
            names, lambda pipe, name: pipe.lrange(lock_keys(self._prefix, name).skips, 0, SKIPS_KEPT - 1))
        return {name: reply for name, reply in zip(names, replies, strict=True) if isinstance(reply, list) and reply}

    def find_run(self, names: list[str], run_id_prefix: str) -> list[tuple[str, list[Event], dict[object, object]]]:
        """(name, matching events newest first, ``last`` if it is that run) for each name with a match."""
        events: dict[str, list[Event]] = {}
        lasts: dict[str, dict[object, object]] = {}
        cursors = dict.fromkeys(names, "+")
        while cursors:
            asked = list(cursors)
            replies = self._find_page([(lock_keys(self._prefix, n), cursors[n]) for n in asked], run_id_prefix)
            cursors = {}
            for name, reply in zip(asked, replies, strict=True):
                if not isinstance(reply, list) or len(reply) != 3:
                    continue  # this name's keys are not what lockrun wrote
                matched = self._decoded(name, [(entry[0], pairs(entry[1])) for entry in reply[0] or []
                                               if isinstance(entry, list)])
                if matched:
                    events.setdefault(name, []).extend(matched)
                    lasts[name] = lasts.get(name) or pairs(reply[1])
                if reply[2]:
                    cursors[name] = f"({text(reply[2])}"
        for name, opened in self.opens(names).items():  # runs in progress, with a start only
            matched = [event for event in opened
                       if run_id_digits(text_of(event[1].get("run_id", ""))).startswith(run_id_digits(run_id_prefix))]
            if matched:
                events.setdefault(name, []).extend(matched)
        return [(name, events[name], lasts.get(name, {})) for name in names if name in events]

    def _find_page(self, pages: list[tuple[LockKeys, str]], run_id_prefix: str) -> list[Any]:
        """One FIND_RUN_SCRIPT call per (keys, cursor): pipelined, or one by one on a Cluster,
        whose pipelines cannot carry scripts."""
        args = (run_id_digits(run_id_prefix),)
        client = self._client
        if not isinstance(client, redis.RedisCluster):
            return self._batched(pages, lambda pipe, page: pipe.eval(
                FIND_RUN_SCRIPT, 2, page[0].runs, page[0].last, *args, page[1], FIND_PAGE),
                lambda: client.pipeline(transaction=False))

        def one_by_one() -> list[Any]:
            replies: list[Any] = []
            for keys, cursor in pages:
                try:
                    replies.append(self._client.eval(FIND_RUN_SCRIPT, 2, keys.runs, keys.last, *args, cursor,
                                                     FIND_PAGE))
                except redis.ResponseError as exc:  # this name's keys are not what lockrun wrote
                    replies.append(exc)
            return replies

        return self._connection.call(one_by_one)


def _events(reply: Any) -> list[Event]:
    """Stream entries as (ID, fields); a reply that is no list (a key of another type) is none."""
    return [(text(entry_id), fields) for entry_id, fields in reply] if isinstance(reply, list) else []
