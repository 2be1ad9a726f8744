"""The geometry of `lockrun timeline`: runs on a time axis, one lane per lock name (or name and host).

Pure: no rich, no SQLite, no click. A source supplies each lane's runs, as rows (``Lane``: the
fleet record's, or the ledger's with every detail) or as columns (``LaneColumns``: the ledger's
busy lanes, read without a Python object per run); this module decides which columns each run
covers, stacks runs that overlap in time onto sub-rows so that no overlap can hide behind
another bar, and works out each lane's figures. ``render_timeline`` and ``timeline_svg`` draw
the result; ``timeline_axis`` places the ticks.

Timestamps are ISO 8601 UTC strings in the ledger's fixed-width form (``2026-11-30T14:03:12.000000Z``,
see ``clock.ISO_FORMAT``), which sort as text. The layout compares those strings and never parses
a timestamp per run, and does the per-run work with C-level builtins (``bisect``, ``map``,
slices) over one list per field: for a week of a busy ledger (a million runs) it costs less than
reading the runs from SQLite does (bench/NOTES.md, "Timeline").
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from itertools import compress, islice, repeat
from operator import eq, itemgetter, le, lt, ne
from typing import Any, NamedTuple

from lockrun.core.clock import ISO_FORMAT
from lockrun.core.record import NOT_A_RUN, Status

# Skips: nothing ran. Drawn as a faint mark on the lane, never as a bar, never counted as a run.
MARK_STATUSES = NOT_A_RUN

# When several runs share one cell, the worst one is drawn (later in this list is worse).
SEVERITY = (Status.SUCCEEDED, Status.RUNNING, Status.PREEMPTED, Status.UNAVAILABLE, Status.ABANDONED, Status.ERROR,
            Status.KILLED, Status.FAILED, Status.TIMEOUT, Status.LOST)
_RANK: dict[str, int] = {status: rank for rank, status in enumerate(SEVERITY, start=1)}  # unknown statuses: 0
RUN_STATUSES = frozenset(SEVERITY)  # every status of a run that the chart has a colour for
_SUCCEEDED = str(Status.SUCCEEDED)

# What counts as a failure in a lane's figures: every run that did not do its work, except a
# run that another run replaced on purpose (--replace) and one still running.
FAILURES = frozenset({Status.FAILED, Status.TIMEOUT, Status.LOST, Status.KILLED, Status.ERROR, Status.UNAVAILABLE,
                      Status.ABANDONED})

# The letters of a chart without colour (NO_COLOR, a pipe, cron mail), and their legend.
LETTERS = {
    "succeeded": "S", "failed": "F", "timeout": "T", "lost": "L", "preempted": "L", "killed": "K",
    "running": "R", "abandoned": "A", "error": "E", "unavailable": "U",
}
UNKNOWN_LETTER = "?"
MARK_LETTER = "."
MISSED_LETTER = "!"  # a declared start that was due and missed (drawn where nothing else is)
MISSED_LEGEND = (MISSED_LETTER, "missed start")
LEGEND = (
    ("S", "succeeded"), ("F", "failed"), ("T", "timeout"), ("L", "lost/preempted"), ("K", "killed"),
    ("R", "running"), ("A", "abandoned"), ("E", "error"), ("U", "unavailable"), (MARK_LETTER, "busy/skipped"),
)


#: A run as sources hand it over, as the timeline needs it: a plain tuple (a busy week is a million
#: of them, and a NamedTuple per run costs more than the chart) of started_at (ISO, fixed width),
#: ended_at (None: still running, or abandoned: its lockrun is gone, its end unknown), status,
#: duration_s, host, then, only for the SVG's tooltips, run_id, exit_code (the command's own),
#: exit_status (what lockrun exited with: what cron saw) and signal (the one that ended the command).
Span = tuple[Any, ...]

_START, _END, _STATUS, _DURATION, _HOST = 0, 1, 2, 3, 4


class Lane(NamedTuple):
    """The runs and skips of one lock name (with --by-host: of one name on one host), as rows."""

    name: str
    host: str | None
    runs: list[Span]  # any order
    marks: list[Span]  # skips


#: The runs of a track that did not succeed, per status: their starts and ends, in the track's
#: order. A run in no list succeeded: a busy lane's tracks are a few per cent of it.
Others = dict[Any, tuple[list[str], list[str]]]


class LaneColumns(NamedTuple):
    """A lane's runs as columns (a busy lane of the ledger), to be drawn if they follow one
    another (``chart``): their starts and ends, finished ones by end, then the runs without an
    end; ``ends`` as drawn for those (a running run to now, any other at its start)."""

    name: str
    host: str | None
    starts: list[str]
    ends: list[str]
    others: Others
    last_status: Any  # of the last run in that order
    marks: list[Span]  # skips, in time order
    median_s: float | None
    max_s: float | None


class Track(NamedTuple):
    """One sub-row of a lane: runs that do not overlap, in time order.

    ``ends`` are the ends as drawn: a running run reaches now (at most the window's end), an
    abandoned one or one of no length ends just after its start, so that it still fills the cell
    it started in; so are those in ``others``. ``details``: each run as a Span, when the lane came
    as rows (the SVG draws such a track run by run, any other by stretches of pixels).
    """

    starts: list[str]
    ends: list[str]
    others: Others
    last_status: Any  # of the track's last run
    details: list[Span] | None


class Figures(NamedTuple):
    runs: int
    failures: int
    skips: int  # busy, duplicate, unlocked: on one host a busy skip hides under its holder's bar
    median_s: float | None
    max_s: float | None
    last_status: str | None


class LaneChart(NamedTuple):
    name: str
    host: str | None
    tracks: Sequence[Track]  # the first one holds every run that overlaps no earlier one
    marks: list[Span]  # skips, in time order
    figures: Figures
    # Due starts of a declared cadence that passed with nothing started (timeline_missed.py), ISO, in order.
    missed: tuple[str, ...] = ()


#: The details (``window(detail=True)``-shaped Spans) of a chart's runs that started at the given
#: times, for the SVG's tooltips of a track drawn from its columns.
RunDetails = Callable[[LaneChart, list[str]], list[Span]]


class Window(NamedTuple):
    """The span of time drawn: [since, until), both aware UTC datetimes; ``now`` ends running runs."""

    since: datetime
    until: datetime
    now: datetime

    @property
    def seconds(self) -> float:
        return (self.until - self.since).total_seconds()

    def boundaries(self, columns: int) -> list[str]:
        """The ISO start of each of ``columns`` equal columns, and the window's end.

        Integer microseconds, so that a test (or a person) can say exactly where a column starts.
        """
        total_us = _microseconds(self.until - self.since)
        return [iso(self.since + timedelta(microseconds=total_us * k // columns)) for k in range(columns + 1)]

    def column_of(self, moment: datetime, columns: int) -> int:
        """The column ``moment`` falls in (may be < 0 or >= columns when outside the window)."""
        return _microseconds(moment - self.since) * columns // _microseconds(self.until - self.since)


def _microseconds(delta: timedelta) -> int:
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime(ISO_FORMAT)


# --- lanes from a source --------------------------------------------------------------------------------


def lanes(per_name: Iterable[tuple[str, list[Span], list[Span]]], by_host: bool = False) -> Iterator[Lane]:
    """Lanes from (name, runs, marks) in name order; with ``by_host`` one per host of each name
    (the tuples must then carry the host)."""
    for name, runs, marks in per_name:
        if by_host:
            yield from _host_lanes(name, runs, marks)
        else:
            yield Lane(name, None, runs, marks)


def _host_lanes(name: str, runs: list[Span], marks: list[Span]) -> Iterator[Lane]:
    """A name's lanes, one per host (a name with no run nor skip: one lane all the same)."""
    hosts = sorted({_host(r) for r in runs} | {_host(m) for m in marks})
    for host in hosts:
        yield Lane(name, host, [r for r in runs if _host(r) == host], [m for m in marks if _host(m) == host])
    if not hosts:
        yield Lane(name, None, runs, marks)


def _host(run: Span) -> str:
    return run[_HOST] if isinstance(run[_HOST], str) else "?"


def label(name: str, host: str | None) -> str:
    """How a lane is named on the chart."""
    return name if host is None else f"{name} ({host})"


# --- layout ------------------------------------------------------------------------------------------------


def layout(lanes_: Iterable[Lane], window: Window) -> Iterator[LaneChart]:
    """One chart per lane of rows, as the lanes come (a source may hand them over one at a time)."""
    open_end = min(iso(window.until), iso(window.now))
    for lane in lanes_:
        runs = lane.runs
        starts = list(map(itemgetter(_START), runs))
        tracks = _tracks(starts, _drawn_to(runs, open_end), list(map(itemgetter(_STATUS), runs)), runs)
        durations = [duration for duration in map(itemgetter(_DURATION), runs) if duration is not None]
        yield _chart(lane.name, lane.host, tracks, len(runs), _by_start(lane.marks), _median(durations),
                     max(durations) if durations else None)


def _drawn_to(runs: list[Span], open_end: str) -> list[str]:
    """Where each run ends, as drawn: a run without an end to ``open_end`` (see _open_end)."""
    ends = list(map(itemgetter(_END), runs))
    if None in ends:
        ends = [_open_end(run, open_end) if end is None else end for run, end in zip(runs, ends, strict=True)]
    return ends


def _by_start(marks: list[Span]) -> list[Span]:
    return marks if _is_sorted(list(map(itemgetter(_START), marks))) else sorted(marks, key=itemgetter(_START))


def chart(lane: LaneColumns) -> LaneChart | None:
    """The chart of a lane of columns, or None when its runs do not follow one another (some run
    starts before the one before it has ended, or ends before it starts: the source then hands
    the lane over as rows, whose runs can be stacked)."""
    starts, ends = lane.starts, lane.ends
    has_length = all(map(lt, starts, ends))
    if not (has_length or all(map(le, starts, ends))) or not all(map(le, ends, islice(starts, 1, None))):
        return None
    others = {status: (status_starts, _drawn(status_starts, status_ends))
              for status, (status_starts, status_ends) in lane.others.items()}
    tracks = [Track(starts, ends if has_length else _drawn(starts, ends), others, lane.last_status, None)] \
        if starts else []
    return _chart(lane.name, lane.host, tracks, len(starts), lane.marks, lane.median_s, lane.max_s)


def _chart(name: str, host: str | None, tracks: list[Track], runs: int, marks: list[Span], median_s: float | None,
           max_s: float | None) -> LaneChart:
    failures = sum(len(track.others[status][0]) for track in tracks for status in FAILURES & track.others.keys())
    # Each track is in order of start: the last run to start ends one of them.
    last = max(tracks, key=lambda track: track.starts[-1]).last_status if tracks else None
    return LaneChart(name, host, tracks, marks, Figures(runs, failures, len(marks), median_s, max_s, last))


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    values.sort()
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def _is_sorted(values: list[str]) -> bool:
    return all(map(le, values, values[1:]))


def _tracks(starts: list[str], ends: list[str], statuses: list[Any], runs: list[Span]) -> list[Track]:
    """Runs in as few sub-rows as possible, none overlapping another in its sub-row.

    The fast path: runs that follow one another (each ends before the next starts; the ledger
    hands them over ordered by end) are one track, checked with C-level builtins. Otherwise each
    run goes, in order of start, into the first sub-row that is free by then.
    """
    if not starts:
        return []
    if all(map(le, starts, ends)) and all(map(le, ends, islice(starts, 1, None))):
        return [_track(starts, ends, statuses, runs)]
    drawn_ends = list(map(max, starts, ends))
    return [_track([starts[i] for i in indexes], [drawn_ends[i] for i in indexes], [statuses[i] for i in indexes],
                   [runs[i] for i in indexes]) for indexes in _sub_rows(starts, drawn_ends)]


def _sub_rows(starts: list[str], ends: list[str]) -> list[list[int]]:
    """The runs (their indexes) of each sub-row: each run, in order of start, in the first free by then."""
    free_at: list[str] = []  # per sub-row: when its last run ended
    members: list[list[int]] = []
    for start, end, index in sorted(zip(starts, ends, range(len(starts)), strict=True)):
        row = next((k for k, free in enumerate(free_at) if free <= start), len(free_at))  # the first free sub-row
        if row == len(free_at):
            free_at.append(start)
            members.append([])
        free_at[row] = end
        members[row].append(index)
    return members


def _open_end(run: Span, open_end: str) -> str:
    """Where a run without an end is drawn to: a running one to now, anything else (abandoned:
    its lockrun is gone and nobody knows when its command stopped) only in the cell it started in."""
    started: str = run[_START]
    return max(started, open_end) if run[_STATUS] == Status.RUNNING else started


def _track(starts: list[str], ends: list[str], statuses: list[Any], runs: list[Span]) -> Track:
    ends = _drawn(starts, ends)
    others: Others = {}
    for i in compress(range(len(statuses)), map(ne, repeat(_SUCCEEDED), statuses)):
        status_starts, status_ends = others.setdefault(statuses[i], ([], []))
        status_starts.append(starts[i])
        status_ends.append(ends[i])
    return Track(starts, ends, others, statuses[-1], runs)


def _drawn(starts: list[str], ends: list[str]) -> list[str]:
    """The ends as drawn: a run of no length (one that never started: unavailable, error; an
    abandoned one) ends just after its start: "~" sorts after the "Z" that ends every timestamp
    and before any later timestamp, so the run fills exactly the cell it started in."""
    if not any(map(eq, starts, ends)):
        return ends
    ends = list(ends)
    for i in compress(range(len(ends)), map(eq, starts, ends)):
        ends[i] = starts[i] + "~"
    return ends


# --- cells -------------------------------------------------------------------------------------------------


def worst(statuses: Iterable[Any]) -> Any:
    return max(statuses, key=lambda s: _RANK.get(s, 0))


def cells(track: Track, bounds: list[str]) -> list[Any]:
    """Per column: the worst status among the runs of ``track`` that cover it, or None.

    A run covers the columns from the one it starts in to the one it ends in; one that ends
    exactly where a column begins does not reach into it. Two binary searches per column find
    how many runs cover it, two per status in ``others`` how many of those did not succeed.
    """
    row: list[Any] = []
    starts, ends = track.starts, track.ends
    for k in range(len(bounds) - 1):
        first = bisect_right(ends, bounds[k])  # the first run still going after this column begins
        stop = bisect_left(starts, bounds[k + 1], first)  # the first run starting after it ends
        row.append(_worst_of(track.others, stop - first, bounds[k], bounds[k + 1]) if stop > first else None)
    return row


def covering(others: Others, begin: str, end: str) -> dict[Any, int]:
    """How many of the runs in ``others`` cover some of [begin, end), per status (none: left out)."""
    counts = {}
    for status, (starts, ends) in others.items():
        first = bisect_right(ends, begin)
        count = bisect_left(starts, end, first) - first
        if count > 0:
            counts[status] = count
    return counts


def _worst_of(others: Others, runs: int, begin: str, end: str) -> Any:
    """The worst status of ``runs`` runs that cover [begin, end): those of ``others`` there, and
    success for the rest."""
    counts = covering(others, begin, end)
    return worst([*counts, _SUCCEEDED] if runs > sum(counts.values()) else counts)


def missed_cells(missed: Sequence[str], bounds: list[str]) -> list[bool]:
    """Per column: whether a declared start was due in it and missed."""
    edges = [bisect_left(missed, bound) for bound in bounds]
    return [a < b for a, b in zip(edges, edges[1:], strict=False)]


def mark_cells(marks: list[Span], bounds: list[str]) -> list[bool]:
    """Per column: whether a skip (busy, duplicate, unlocked) happened in it."""
    starts = list(map(itemgetter(_START), marks))
    edges = [bisect_left(starts, bound) for bound in bounds]
    return [a < b for a, b in zip(edges, edges[1:], strict=False)]


