"""A timeline lane drawn from its columns, without a Python object per run.

For a busy week (a million runs), making a tuple per run costs more than all the rest of the
chart together (bench/NOTES.md, "Timeline"). When a lane's runs follow one another (none starts
before the one before it has ended: the usual case, and the only one that ``timeline.layout``
draws on a single sub-row), the chart needs no more than:

- when each run started and ended: two comma-joined strings from the ledger, checked in a few
  big-integer operations instead of a comparison per run;
- the statuses of the runs that did not succeed, and the skips: few, from an index of their own;
- the median and the longest duration, which the ledger walks in an index by duration.

From those this module works out every cell, figure and mark exactly as ``timeline.layout`` and
``timeline.cells`` do from the runs themselves. A lane that needs more (two runs that overlap, a
time not written the ledger's way, a status lockrun does not know) is None here, and the caller
draws it from its runs. Pure: no SQLite, no rich.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING, Any, NamedTuple, TypeGuard

from lockrun import timeline as tl
from lockrun.record import Status

if TYPE_CHECKING:
    from lockrun.ledger_lanes import LaneColumns
    from lockrun.ledger_timeline import Row

Fields = tuple[bytes, bytes, int]  # fields of FIELD bytes (see _fields), two columns, and how many

TOKEN = 27  # a timestamp in the ledger's form: 2026-11-30T14:03:12.000000Z
FIELD = TOKEN + 1  # and the comma after it
_FIELD_BITS = FIELD * 8
_RUN_STATUSES = frozenset(tl.SEVERITY)  # every status of a run that the chart knows how to draw


class SummaryTrack(NamedTuple):
    """The one sub-row of a lane whose runs follow one another, in the ledger's order.

    ``starts`` and ``ends`` are ``run_count`` fields of FIELD bytes (a timestamp and a comma).
    ``others``: for each status but ``succeeded``, its runs' starts and ends as drawn (a run of
    no length ends at its start followed by "~", as ``timeline`` draws it: in the cell it
    started in), in the same order.
    """

    starts: bytes
    ends: bytes
    run_count: int
    zero_length: frozenset[int]  # positions of runs of no length
    others: dict[str, tuple[list[bytes], list[bytes]]]

    def cells(self, bounds: list[str]) -> list[str | None]:
        """What ``timeline.cells`` gives for the same runs: per column the worst status among
        the runs that cover it. Two binary searches per column, in the fields; then, per status
        that is not a success, two in its own few runs."""
        keys = [bound.encode("ascii") for bound in bounds]
        row: list[str | None] = []
        first = stop = 0
        for begin, end in zip(keys, keys[1:], strict=False):
            first = self._ended_by(begin, first)  # the first run still going after the column begins
            stop = max(first, _rank(self.starts, self.run_count, end, stop, after=False))  # first to start after it
            row.append(self._worst(begin, end, stop - first) if stop > first else None)
        return row

    def stretches(self, bounds: list[str]) -> list[Stretch]:
        """The runs grouped by the columns they cover: each stretch of columns that some run
        covers, and no more (the SVG's rectangles, at a pixel a column). With hundreds of
        columns, lists of the fields and C's bisect beat binary searches in the fields."""
        keys = [bound.encode("ascii") for bound in bounds]
        starts = _tokens(self.starts, self.run_count)
        ends = _tokens(self.ends, self.run_count)
        for index in self.zero_length:
            ends[index] += b"~"
        found: list[Stretch] = []
        first = stop = 0
        current: list[Any] | None = None  # [first run, stop, the stretch's first column begins, its last ends]
        for begin, end in zip(keys, keys[1:], strict=False):
            first = bisect_right(ends, begin, first)
            stop = max(first, bisect_left(starts, end, stop))
            if stop <= first:
                if current:
                    found.append(self._stretch(starts, ends, *current))
                current = None
            elif current:
                current[1], current[3] = stop, end
            else:
                current = [first, stop, begin, end]
        if current:
            found.append(self._stretch(starts, ends, *current))
        return found

    def _stretch(self, starts: list[bytes], ends: list[bytes], first: int, stop: int, begin: bytes,
                 end: bytes) -> Stretch:
        counts = {}
        for status, (status_starts, status_ends) in self.others.items():
            low = bisect_right(status_ends, begin)
            count = bisect_left(status_starts, end, low) - low
            if count:
                counts[status] = count
        succeeded = stop - first - sum(counts.values())
        if succeeded:
            counts[Status.SUCCEEDED] = succeeded
        return Stretch(stop - first, starts[first].decode(), ends[first].decode(), starts[stop - 1].decode(),
                       ends[stop - 1].decode(), counts)

    def _ended_by(self, moment: bytes, lo: int) -> int:
        """How many runs end (as drawn) no later than ``moment``: a run of no length at exactly
        ``moment`` is drawn as ending just after it."""
        position = _rank(self.ends, self.run_count, moment, lo, after=True)
        while position > lo and (position - 1) in self.zero_length and _token(self.ends, position - 1) == moment:
            position -= 1
        return position

    def _worst(self, begin: bytes, end: bytes, covering: int) -> str:
        present = set()
        others = 0
        for status, (starts, ends) in self.others.items():
            first = bisect_right(ends, begin)
            count = bisect_left(starts, end, first) - first
            if count > 0:
                present.add(status)
                others += count
        if covering > others:
            present.add(Status.SUCCEEDED)
        return tl.worst(present)


class Stretch(NamedTuple):
    """Runs next to one another in a summary track (see ``SummaryTrack.stretches``)."""

    run_count: int  # runs
    started_at: str  # when its first run started
    first_ended_at: str  # and ended, as drawn (a run of no length: its start followed by "~")
    last_started_at: str  # when its last run started
    ended_at: str  # and ended, as drawn
    statuses: dict[str, int]  # how many runs of each status


class LaneSummary(NamedTuple):
    """A lane ready to draw but for its median and longest duration (see ``chart``)."""

    name: str
    host: str | None
    track: SummaryTrack
    marks: list[tuple[str, str, str]]  # (started_at, ended_at, status) of each skip that started in the window
    failures: int
    last_status: str | None
    ended_in_window: int  # runs (skips aside) that ended in [since, until): the ledger's durations count
    tail_durations: list[float]  # of the runs that ended after the window: the ledger's walk does not see them

    def chart(self, median_s: float | None, max_s: float | None) -> tl.LaneChart:
        figures = tl.Figures(runs=self.track.run_count, failures=self.failures, skips=len(self.marks),
                             median_s=median_s, max_s=max_s, last_status=self.last_status)
        return tl.LaneChart(self.name, self.host, [self.track] if self.track.run_count else [], self.marks, figures)


def summarize(name: str, host: str | None, columns: LaneColumns, since: str, open_end: str) -> LaneSummary | None:
    """The lane of ``columns`` (``ledger_lanes.LaneReads.columns``), or None when it must be drawn from its runs.

    ``since`` begins the window; ``open_end`` is where a running run is drawn to (now, at most the
    window's end).
    """
    main = _fields(columns.starts, columns.ends)
    by_status: dict[str, Fields] = {}
    for status, pair in columns.by_status.items():
        fields = _fields(*pair)
        if status not in _RUN_STATUSES and status not in tl.MARK_STATUSES or main is None or fields is None:
            return None
        by_status[status] = fields
    skips = [(end, start, status) for status, (starts, ends, count) in by_status.items() if status in tl.MARK_STATUSES
             for start, end in zip(_tokens(starts, count), _tokens(ends, count), strict=True)]
    main = _without(main, sorted(skips))
    edges = _edges(columns.tail, columns.open_runs, since, open_end)
    if main is None or edges is None:
        return None
    starts, ends, count = main
    starts += b"".join(start + b"," for start, _, _ in edges.runs)
    ends += b"".join(end + b"," for _, end, _ in edges.runs)
    count += len(edges.runs)
    zero_length = _follow_one_another(starts, ends, count)
    if zero_length is None:
        return None
    others = _others(by_status, edges.runs)
    track = SummaryTrack(starts, ends, count, zero_length, others)
    marks = sorted([(start.decode(), end.decode(), status) for end, start, status in skips if start.decode() >= since]
                   + edges.marks)
    failures = sum(len(starts) for status, (starts, _) in others.items() if status in tl.FAILURES)
    return LaneSummary(name, host, track, marks, failures, _last_status(main, by_status, edges.runs),
                       main[2], edges.durations)


# --- the columns as fixed-width fields ---------------------------------------------------------------


def _fields(starts: bytes | None, ends: bytes | None) -> tuple[bytes, bytes, int] | None:
    """Two comma-joined columns as fields of FIELD bytes (each value and its comma), if every
    value is TOKEN bytes of ASCII without a comma (else None); no rows is no fields. Times are
    compared as text, as the layout compares them: the value's form does not matter here."""
    if starts is None and ends is None:
        return b"", b"", 0
    count = _field_count(starts)
    if starts is None or ends is None or count is None or count != _field_count(ends):
        return None
    return starts + b",", ends + b",", count


def _field_count(column: bytes | None) -> int | None:
    """How many TOKEN-byte values a comma-joined column holds, or None if they are not all that
    long (or not ASCII). The commas at every FIELD-th byte, and no others, are the proof."""
    if column is None:
        return None
    count, rest = divmod(len(column) + 1, FIELD)
    if rest or column[TOKEN::FIELD] != b"," * (count - 1) or not column.isascii():
        return None
    # No comma but those: replace() is half the cost of count() here.
    if len(column) - len(column.replace(b",", b"")) != count - 1:
        return None
    return count


def _token(fields: bytes, index: int) -> bytes:
    return fields[index * FIELD:index * FIELD + TOKEN]


def _tokens(fields: bytes, count: int) -> list[bytes]:
    return fields[:-1].split(b",") if count else []


def _rank(fields: bytes, count: int, key: bytes, lo: int, *, after: bool) -> int:
    """In sorted fields from ``lo`` on: the first that is greater than ``key`` (``after``), or not less."""
    hi = count
    while lo < hi:
        middle = (lo + hi) // 2
        token = fields[middle * FIELD:middle * FIELD + TOKEN]
        if token < key or (after and token == key):
            lo = middle + 1
        else:
            hi = middle
    return lo


def _without(main: Fields | None, skips: list[tuple[bytes, bytes, str]]) -> Fields | None:
    """The fields without the skips (given as (end, start, status), sorted), which share the
    index range of the runs. A skip is found by its end (``bytes.find``, onwards from the last
    one found: both are sorted, and a field only matches where a field begins) and its start;
    rows with the same end and start are interchangeable here. None if one is not there."""
    if main is None or not skips:
        return main
    starts, ends, count = main
    dropped: list[int] = []
    offset = 0
    for end, start, _ in skips:
        needle = end + b","
        while True:
            # Near the last one first: a short search costs no set-up (bytes.find's two-way
            # search prepares every needle, worth it only over a long haystack).
            found = ends.find(needle, offset, offset + _NEAR)
            if found < 0:
                found = ends.find(needle, offset)
            if found < 0:
                return None
            index, offset = found // FIELD, found + FIELD
            if _token(starts, index) == start:
                dropped.append(index)
                break
    return (_cut(starts, dropped), _cut(ends, dropped), count - len(dropped))


_NEAR = 64 * FIELD


def _cut(fields: bytes, dropped: list[int]) -> bytes:
    """``fields`` without the fields at the (sorted) positions ``dropped``."""
    view = memoryview(fields)
    edges = [-1] + dropped + [len(fields) // FIELD]
    return b"".join(view[(a + 1) * FIELD:b * FIELD] for a, b in zip(edges, edges[1:], strict=False) if b > a + 1)


# --- the rows at the window's end, and those still running ---------------------------------------------


class _Edges(NamedTuple):
    runs: list[tuple[bytes, bytes, str]]  # (start, end as drawn, status), after the window's runs in order
    marks: list[tuple[str, str, str]]
    durations: list[float]


def _edges(tail: list[Row], open_runs: list[Row], since: str, open_end: str) -> _Edges | None:
    """The runs that end after the window and those that have not ended, in the order the
    layout puts them (after the rest); None if one is not drawable from a summary."""
    runs: list[tuple[Any, Any, Any]] = []  # as the rows have them: checked below
    marks: list[tuple[str, str, str]] = []
    durations: list[float] = []
    for started, ended, status, duration, *_ in tail:
        if status in tl.MARK_STATUSES:
            if started >= since:
                marks.append((started, ended, status))
            continue
        runs.append((started, ended, status))
        if duration is not None:
            durations.append(duration)
    for started, _, status, _ in open_runs:
        runs.append((started, max(started, open_end) if status == Status.RUNNING else started, status))
    encoded: list[tuple[bytes, bytes, str]] = []
    for started, ended, status in runs:
        if status not in _RUN_STATUSES or not _is_token(started) or not _is_token(ended):
            return None
        encoded.append((started.encode(), ended.encode(), status))
    return _Edges(encoded, marks, durations)


def _is_token(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and len(value) == TOKEN and value.isascii() and "," not in value


# --- runs that follow one another ----------------------------------------------------------------------

class _Guards:
    """The top bit of each of ``count`` fields (a borrow stops there instead of running into the
    next field), and the lowest bit of each of exactly ``count``. Made once for the largest
    lane: making them costs as much as checking a lane. The top bits of fields above a lane's
    own change nothing (those fields are 0 in both operands), so a lane of at least half that
    size takes them as they are: a shift costs as much as a subtraction.
    """

    count = 0
    top = low = 0

    @classmethod
    def at_least(cls, count: int) -> tuple[int, int]:
        if count > cls.count:
            cls.count = count
            cls.top = int.from_bytes((b"\x80" + bytes(FIELD - 1)) * count, "big")
            cls.low = cls.top >> (_FIELD_BITS - 1)
        spare = _FIELD_BITS * (cls.count - count)
        return cls.top if 2 * count >= cls.count else cls.top >> spare, cls.low >> spare


def _follow_one_another(starts: bytes, ends: bytes, count: int) -> frozenset[int] | None:
    """The positions of the runs of no length, if each run ends no earlier than it starts and no
    later than the next one starts (the layout's single sub-row); else None.

    Every field at once, as big integers: a field's top bit is 0 (ASCII), so with it set in the
    minuend the difference of two fields can never borrow from the next field, and it stays set
    exactly where the minuend's field is not less than the subtrahend's. The commas cancel out.
    """
    if count == 0:
        return frozenset()
    top, low = _Guards.at_least(count)
    start_bits = int.from_bytes(starts, "big")
    end_bits = int.from_bytes(ends, "big")
    lengths = (end_bits | top) - start_bits  # per field: its run's end less its start
    # Per field i: start i less end i-1 (the first start has nothing before it).
    gaps = (start_bits | top) - (end_bits >> _FIELD_BITS)
    # The usual case in one test: every run has a length (taking 1 more from each length
    # leaves every guard) and none starts before the one before it ends.
    if (lengths - low) & gaps & top == top:
        return frozenset()
    if (lengths & gaps & top) != top:
        return None  # one ends before it starts, or starts before the one before it has ended
    zero_length = ((lengths - low) & top) ^ top  # where a length is 0, taking 1 took the guard
    return frozenset(_positions(zero_length.to_bytes(len(starts), "big")))


def _positions(mask: bytes) -> list[int]:
    """The fields whose top byte is set in ``mask``."""
    found = []
    offset = mask.find(b"\x80")
    while offset >= 0:
        found.append(offset // FIELD)
        offset = mask.find(b"\x80", offset + FIELD - offset % FIELD)
    return found


# --- statuses -----------------------------------------------------------------------------------------------


def _others(by_status: dict[str, Fields], edge_runs: list[tuple[bytes, bytes, str]]
            ) -> dict[str, tuple[list[bytes], list[bytes]]]:
    """Per status but ``succeeded`` (and the skips): its runs' starts and ends as drawn, in order."""
    others: dict[str, tuple[list[bytes], list[bytes]]] = {}
    for status, (starts, ends, count) in by_status.items():
        if status not in tl.MARK_STATUSES:
            others[status] = (_tokens(starts, count), _tokens(ends, count))
    for start, end, status in edge_runs:
        if status != Status.SUCCEEDED:
            pair = others.setdefault(status, ([], []))
            pair[0].append(start)
            pair[1].append(end)
    for drawn_starts, drawn_ends in others.values():
        for index, (start, end) in enumerate(zip(drawn_starts, drawn_ends, strict=True)):
            if start == end:
                drawn_ends[index] = end + b"~"  # as timeline._track draws a run of no length
    return others


def _last_status(main: Fields, by_status: dict[str, Fields], edge_runs: list[tuple[bytes, bytes, str]]) -> str | None:
    """The status of the last run in the ledger's order (by end, start, then status): the last
    run that has not ended, or of those at the window's end, or of the window's; of several
    with the same start and end, the last status in alphabetical order."""
    if edge_runs:
        return edge_runs[-1][2]
    starts, ends, count = main
    if count == 0:
        return None
    last = (_token(starts, count - 1), _token(ends, count - 1))
    tied = 1
    while tied < count and (_token(starts, count - 1 - tied), _token(ends, count - 1 - tied)) == last:
        tied += 1
    present = set()
    for status, (other_starts, other_ends, other_count) in by_status.items():
        if status in tl.MARK_STATUSES:
            continue
        same = 0  # the status's own runs are in the same order: the tied ones are its last
        while same < other_count and (_token(other_starts, other_count - 1 - same),
                                       _token(other_ends, other_count - 1 - same)) == last:
            same += 1
        if same:
            present.add(status)
            tied -= same
    if tied > 0:
        present.add(Status.SUCCEEDED)
    return max(present)
