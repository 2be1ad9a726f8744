"""Every host's runs, read back from the fleet record (docs/fleet.md "One fleet, one memory").

The acquire script notes a run in progress in the name's ``open`` hash (a ``start``, as the
source gives it) and the release script moves it to the ``runs`` stream as one ``end`` event
carrying the run's final row and its start's server time; ``last`` holds the newest finished
run and ``counts`` the outcomes by status. This module turns those into the rows that
``history --json`` prints, newest first by the Redis server's clock at each run's start (one
clock for the whole fleet), and into the facts ``metrics --fleet`` and ``status`` show.

A ``start`` without an ``end`` is a run in progress while its holder still holds the
lock, and ``abandoned`` once it does not (its lockrun died without releasing).
"""

from __future__ import annotations

import heapq
import itertools
import re
from collections import deque
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import NamedTuple

from lockrun.backends.protocol import FleetSource
from lockrun.backends.values import FleetEvent, Holder, PageRequest
from lockrun.core.clock import ISO_FORMAT, parse_iso
from lockrun.core.errors import FleetReadError
from lockrun.core.readers import parse_int, text_of
from lockrun.core.record import LOST_AT_RELEASE_COUNT, Row, Status, fields_from_json, row_from_fields
from lockrun.ledger.metrics import JobFacts

FIRST_PAGE = 2  # most names contribute a row or two to a page of history
MAX_PAGE = 512
_STATUS_NAME = re.compile(r"[a-z_]{1,32}")


#: The fleet record's storage: what it answers, raw (backends/redis_fleet.py).
Source = FleetSource
#: Who holds the named locks now (``Backend.holders``): a start without an end is still running
#: while its run holds the lock.
HoldersOf = Callable[[list[str]], list[Holder]]


def _decoded(fields: Mapping[object, object] | None) -> dict[str, object]:
    return {text_of(key): value for key, value in (fields or {}).items()}


def id_ms(entry_id: str) -> int:
    """The server time, in ms, at which a stream entry was added."""
    head = entry_id.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def _iso_ms(iso: str | None) -> int | None:
    moment = parse_iso(iso)
    return int(moment.timestamp() * 1000) if moment else None


class Entry(NamedTuple):
    key: int  # ms on the server's clock at which the run started: the merge order
    row: Row
    open_at: str | None = None  # the start event's ID while no end event was seen


class StreamRows:
    """One name's runs, newest first: its ``end`` events read backwards page by page, and its runs
    in progress placed among them by their start.

    An end carries its start's server time, which gives the run its place in the order. An end
    without one (its ``open`` entry was gone at its end: lost with the server's data, or
    pruned) is placed by its own started_at once the stream is read to its oldest event.
    """

    def __init__(self, name: str, since_ms: int | None, opens: list[FleetEvent] | None = None) -> None:
        self.name = name
        # Runs in progress (the source's ``open`` entries), newest first: placed among the
        # stream's rows by their start.
        self._opens: deque[tuple[str, dict[str, object]]] = deque(
            (entry_id, _decoded(raw)) for entry_id, raw in opens or []
            if since_ms is None or id_ms(entry_id) >= since_ms)
        self.since_ms = since_ms
        self.before = "+"
        self.oldest = str(since_ms) if since_ms is not None else "-"
        self.page = FIRST_PAGE
        self.exhausted = False
        self._pending_ends: dict[str, dict[str, object]] = {}
        self._ready: deque[Entry] = deque()
        self._last_key: int | None = None  # the key of the last row made ready: keys never go up

    def request(self) -> PageRequest:
        return PageRequest(self.name, self.before, self.oldest, self.page)

    def feed(self, events: list[FleetEvent]) -> None:
        if len(events) < self.page:
            self.exhausted = True
        for _, raw in events:
            fields = _decoded(raw)
            run_id = text_of(fields.get("run_id", ""))
            if text_of(fields.get("event", "")) != "end" or not run_id:
                continue  # not an end lockrun wrote
            self._drop_open(run_id)
            if "start_ms" not in fields:
                self._pending_ends.setdefault(run_id, fields)  # reading backwards: the newest end
                continue
            key = id_ms(text_of(fields["start_ms"]) + "-0")
            if self.since_ms is not None and key < self.since_ms:
                continue  # ended in the window, started before it
            self._open_from(key)
            self._last_key = self._bounded(key)
            self._ready.append(Entry(self._last_key, row_from_fields(self.name, fields)))
        if events:
            self.before = "(" + events[-1][0]
        self.page = min(self.page * 2, MAX_PAGE)
        if self.exhausted:
            self._flush_lone_ends()

    def _drop_open(self, run_id: str) -> None:
        """An end read for a run the ``open`` entries still listed (it ended between the reads)."""
        self._opens = deque(item for item in self._opens if text_of(item[1].get("run_id", "")) != run_id)

    def _open_from(self, key: int) -> None:
        """Make ready the runs in progress that started at or after ``key`` (ms)."""
        while self._opens and id_ms(self._opens[0][0]) >= key:
            self._ready_open(*self._opens.popleft())

    def _ready_open(self, entry_id: str, fields: dict[str, object]) -> None:
        if not text_of(fields.get("run_id", "")):
            return
        row = row_from_fields(self.name, fields)
        row["status"] = Status.RUNNING  # for now: Judge decides
        self._last_key = self._bounded(id_ms(entry_id))
        self._ready.append(Entry(self._last_key, row, open_at=entry_id))

    def _flush_lone_ends(self) -> None:
        lone: list[tuple[int, Row, str | None]] = []
        for fields in self._pending_ends.values():
            row = row_from_fields(self.name, fields)
            started = _iso_ms(row["started_at"])
            if self.since_ms is not None and (started is None or started < self.since_ms):
                continue
            lone.append((started or 0, row, None))
        for entry_id, fields in self._opens:
            if text_of(fields.get("run_id", "")):
                row = row_from_fields(self.name, fields)
                lone.append((id_ms(entry_id), {**row, "status": Status.RUNNING}, entry_id))
        for started, row, open_at in sorted(lone, key=lambda item: -item[0]):
            self._last_key = self._bounded(started)
            self._ready.append(Entry(self._last_key, row, open_at=open_at))
        self._pending_ends.clear()
        self._opens.clear()

    def _bounded(self, key: int) -> int:
        return key if self._last_key is None else min(self._last_key, key)

    def take(self) -> Entry | None:
        return self._ready.popleft() if self._ready else None

    @property
    def needs_more(self) -> bool:
        return not self._ready and not self.exhausted


class Judge:
    """Settles runs whose start has no end: running while its holder holds the lock, else abandoned.

    The holders of a name are read once, before any later event of it is looked for, so a
    run that releases in between is seen either as a holder or by its end event.
    """

    def __init__(self, source: Source, holders_of: HoldersOf) -> None:
        self._source = source
        self._holders_of = holders_of
        self._holding: dict[str, set[str]] = {}

    def settle(self, entry: Entry) -> Row:
        if entry.open_at is None:
            return entry.row
        name, run_id = entry.row["name"], entry.row["run_id"]
        if name not in self._holding:
            self._holding[name] = {h.run_id for h in self._holders_of([name]) if h.run_id}
        for _, raw in self._source.after(name, entry.open_at):
            fields = _decoded(raw)
            if text_of(fields.get("event", "")) == "end" and text_of(fields.get("run_id", "")) == run_id:
                return row_from_fields(name, fields)
        return {**entry.row, "status": Status.RUNNING if run_id in self._holding[name] else Status.ABANDONED}


#: What a ``skips`` entry says: the server's ms (14 digits at most: before EPOCH_S_LIMIT, so a
#: time datetime can show), the status, the host (maybe empty).
_SKIP_ENTRY = re.compile(r"(\d{1,14}) ([a-z_]{1,32}) ?(.{0,255})", re.DOTALL)
#: The statuses a ``skips`` list may hold (busy, duplicate, paused skips; others, written by no lockrun, are left out).
SKIP_STATUSES = frozenset({Status.BUSY.value, Status.DUPLICATE.value, Status.PAUSED.value})


def skip_rows(source: Source, names: list[str], since_ms: int = 0) -> list[Row]:
    """The busy and duplicate skips the fleet record placed in time (each name's newest few:
    record_format.SKIPS_KEPT), as rows that start and end at once; entries lockrun did not
    write are left out. Older skips are only counted (``counts``)."""
    rows: list[Row] = []
    for name, entries in source.skips(names).items():
        for entry in entries:
            match = _SKIP_ENTRY.fullmatch(text_of(entry))
            if match is None or match[2] not in SKIP_STATUSES or int(match[1]) < since_ms:
                continue
            at = datetime.fromtimestamp(int(match[1]) / 1000, timezone.utc).strftime(ISO_FORMAT)
            rows.append({"name": name, "host": match[3] or None, "status": match[2], "started_at": at,
                         "ended_at": at, "duration_s": 0.0, "run_id": None})
    return rows


def history(
    source: Source,
    holders_of: HoldersOf,
    name: str | None = None,
    *,
    host: str | None = None,
    limit: int = 20,
    statuses: frozenset[str] | None = None,
    since_ms: int | None = None,
) -> list[Row]:
    """Every host's runs of ``name`` (or of every name), newest first, as ``history --json`` rows.

    A k-way merge over the names' streams, read backwards in pages that start small (most
    names contribute a row or two to a page of history) and double as a name keeps
    contributing, so the newest rows of a thousand names cost one pipelined read of a few
    events each, not a thousand histories.
    """
    names = [name] if name is not None else source.names(("runs",))
    opens = source.opens(names)  # before the stream: a run that ends meanwhile is then in both
    judge = Judge(source, holders_of)
    shown: set[tuple[str, str]] = set()  # (name, run id): a run read both in progress and ended
    heap: list[tuple[int, int, Entry, StreamRows]] = []
    order = itertools.count()
    rows: list[Row] = []

    def advance(streams: list[StreamRows]) -> None:
        """Read pages (one pipeline per round) until each stream has a row ready or is done."""
        while streams:
            for stream, events in zip(streams, source.pages([s.request() for s in streams]), strict=True):
                stream.feed(events)
            for stream in streams:
                entry = stream.take() if not stream.needs_more else None
                if entry is not None:
                    heapq.heappush(heap, (-entry.key, next(order), entry, stream))
            streams = [s for s in streams if s.needs_more]

    advance([StreamRows(n, since_ms, opens.get(n)) for n in names])
    while heap and len(rows) < limit:
        _, _, entry, stream = heapq.heappop(heap)
        following = stream.take()
        if following is not None:
            heapq.heappush(heap, (-following.key, next(order), following, stream))
        elif not stream.exhausted:
            advance([stream])
        if host is not None and entry.row["host"] != host:
            continue
        seen = (entry.row["name"], entry.row["run_id"])
        if seen[1] and seen in shown:
            continue
        shown.add(seen)
        row = judge.settle(entry)
        if statuses is None or row["status"] in statuses:
            rows.append(row)
    return rows


def find_run(
    source: Source, holders_of: HoldersOf, run_id_prefix: str
) -> tuple[Row, str | None, list[dict[str, object]]] | None:
    """The run whose id starts with ``run_id_prefix``: its row, its output tail if ``last``
    still holds it, and its events (oldest first). Raises FleetReadError for an ambiguous prefix."""
    matches = source.find_run(source.names(("runs",)), run_id_prefix)
    runs = {(name, text_of(_decoded(fields).get("run_id", ""))) for name, events, _ in matches for _, fields in events}
    if not runs:
        return None
    if len(runs) > 1:
        raise FleetReadError(f"run id prefix {run_id_prefix!r} matches several runs: give more of it")
    name, events, last = matches[0]
    events = sorted(events, key=lambda event: tuple(int(part) if part.isdigit() else 0 for part in event[0].split("-")))
    row = _run_row(source, holders_of, name, events)
    if row is None:
        return None
    return row, _tail_of(row, _decoded(last)), _listed(events)


def _run_row(source: Source, holders_of: HoldersOf, name: str, events: list[FleetEvent]) -> Row | None:
    """The run as its last ``end`` event says; else as its ``start`` does, judged as a running
    run; None with neither."""
    end = next((fields for _, fields in reversed(events) if text_of(_decoded(fields).get("event", "")) == "end"), None)
    if end is not None:
        return row_from_fields(name, _decoded(end))
    start = next(((entry_id, fields) for entry_id, fields in events
                  if text_of(_decoded(fields).get("event", "")) == "start"), None)
    if start is None:
        return None
    opened = row_from_fields(name, _decoded(start[1]))
    return Judge(source, holders_of).settle(Entry(id_ms(start[0]), {**opened, "status": Status.RUNNING}, start[0]))


def _tail_of(row: Row, last_fields: dict[str, object]) -> str | None:
    """The output tail ``last`` holds, if it is this run's."""
    tail = text_of(last_fields["output_tail"]) if "output_tail" in last_fields else None
    if tail is not None and text_of(last_fields.get("run_id", "")) != row["run_id"]:
        return None
    return tail


def _listed(events: list[FleetEvent]) -> list[dict[str, object]]:
    """The run's events, oldest first: each as it is, after the start a compact one holds."""
    listed: list[dict[str, object]] = []
    for entry_id, fields in events:
        decoded = _decoded(fields)
        start_ms = parse_int(decoded.get("start_ms"))
        if start_ms is not None and start_ms >= 0:  # one event per run: its start is in it
            listed.append({"event": "start", "id": f"{start_ms}-0", "at_ms": start_ms})
        listed.append({"event": text_of(decoded.get("event", "")), "id": entry_id, "at_ms": id_ms(entry_id)})
    return listed


def last_runs(source: Source, names: list[str]) -> dict[str, Row]:
    """The newest finished run of each name that the fleet record knows."""
    found = {}
    for name, (row, _) in source.lasts(names).items():
        fields = fields_from_json(row)
        if fields.get("run_id") is not None:
            found[name] = row_from_fields(name, fields)
    return found


def facts(source: Source) -> list[JobFacts]:
    """Every name's newest run, last success and outcome counts, fleet-wide."""
    names = source.names(("last", "counts"))
    lasts = source.lasts(names)
    counted = source.counts(names)
    found = []
    for name in names:
        if name not in lasts and name not in counted:
            continue  # a registered name whose record holds no outcome (yet, or any more)
        row, success_at = lasts.get(name, (None, None))
        last_fields = fields_from_json(row)
        success = text_of(success_at) if success_at is not None else None
        counts, flags = {}, {}
        for status, value in _decoded(counted.get(name, {})).items():
            number = parse_int(value)
            if number is None or number < 0:
                continue
            if _STATUS_NAME.fullmatch(status):
                counts[status] = number
            elif status == LOST_AT_RELEASE_COUNT:  # not a status: how many releases found the lock lost
                flags["lock_lost_at_release"] = number
        found.append(JobFacts(
            name=name,
            last=row_from_fields(name, last_fields) if last_fields.get("run_id") is not None else None,
            last_success_at=success if parse_iso(success) else None,
            counts=counts,
            flags=flags,
            counted_flags=("lock_lost_at_release",),  # a slow run is counted in its host's ledger only
        ))
    return found
