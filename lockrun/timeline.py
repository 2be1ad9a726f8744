"""The geometry of `lockrun timeline`: runs on a time axis, one lane per lock name (or name and host).

Pure: no rich, no SQLite, no click. The ledger (or any other source of ``history --json``-shaped
rows) supplies runs; this module decides which columns each run covers, stacks runs that overlap
in time onto sub-rows so that no overlap can hide behind another bar, and works out each lane's
figures. ``render_timeline`` draws the result as text or SVG.

Timestamps are ISO 8601 UTC strings in the ledger's fixed-width form (``2026-11-30T14:03:12.000000Z``,
see ``clock.ISO_FORMAT``), which sort as text. The layout compares those strings and never parses
a timestamp per run, and does the per-run work with C-level builtins (``bisect``, ``map``,
slices): for a week of a busy ledger (a million runs) it costs a third of what reading the runs
from SQLite does (bench/NOTES.md, "Timeline").
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, time, timedelta, timezone
from functools import partial
from itertools import compress, islice
from operator import eq, is_not, itemgetter, le, lt
from typing import TYPE_CHECKING, Any, NamedTuple

from lockrun.clock import ISO_FORMAT, parse_iso
from lockrun.errors import UsageError
from lockrun.record import NOT_A_RUN, Status

if TYPE_CHECKING:
    from lockrun.lane_summary import SummaryTrack

# Skips: nothing ran. Drawn as a faint mark on the lane, never as a bar, never counted as a run.
MARK_STATUSES = NOT_A_RUN

# When several runs share one cell, the worst one is drawn (later in this list is worse).
SEVERITY = (Status.SUCCEEDED, Status.RUNNING, Status.PREEMPTED, Status.UNAVAILABLE, Status.ABANDONED, Status.ERROR,
            Status.KILLED, Status.FAILED, Status.TIMEOUT, Status.LOST)
_RANK: dict[str, int] = {status: rank for rank, status in enumerate(SEVERITY, start=1)}  # unknown statuses: 0

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
LEGEND = (
    ("S", "succeeded"), ("F", "failed"), ("T", "timeout"), ("L", "lost/preempted"), ("K", "killed"),
    ("R", "running"), ("A", "abandoned"), ("E", "error"), ("U", "unavailable"), (MARK_LETTER, "busy/skipped"),
)

MAX_WINDOW_S = 3660 * 86400.0  # ten years and change
FIRST_YEAR, LAST_YEAR = 1970, 9998  # --since/--until times: far enough from datetime's own limits


class RunSpan(NamedTuple):
    """One run as the timeline needs it. Sources hand over plain tuples in this field order."""

    started_at: str  # ISO, fixed width
    ended_at: str | None  # None: still running (or abandoned: its lockrun is gone, its end unknown)
    status: str
    duration_s: float | None
    host: str | None
    run_id: str | None = None  # only for the SVG's tooltips
    exit_code: int | None = None  # the command's own
    exit_status: int | None = None  # what lockrun exited with: what cron saw
    signal: int | None = None  # the signal that ended the command


#: A run as sources hand it over: a plain tuple in RunSpan's field order (a busy week is a
#: million of them, and a NamedTuple per run costs more than the chart).
Span = tuple[Any, ...]

_START, _END, _STATUS, _DURATION, _HOST = 0, 1, 2, 3, 4


class Lane(NamedTuple):
    """The runs and skips of one lock name (with --by-host: of one name on one host)."""

    name: str
    host: str | None
    runs: list[Span]  # any order
    marks: list[Span]  # skips


class Track(NamedTuple):
    """One sub-row of a lane: runs that do not overlap, in time order.

    ``ends`` are the ends as drawn: a running run reaches now (at most the window's end), an
    abandoned one or one of no length ends just after its start, so that it still fills the cell
    it started in.
    """

    runs: list[Span]
    starts: list[str]
    ends: list[str]
    statuses: list[str]


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
    # The first one holds every run that overlaps no earlier one. A lane drawn from its summary
    # has one SummaryTrack instead (lane_summary: its runs as columns, no tuple per run).
    tracks: Sequence[Track | SummaryTrack]
    marks: list[Span]  # skips, in time order
    figures: Figures


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


# --- the window from --since / --until ----------------------------------------------------------------


def parse_moment(text: str, what: str) -> float | datetime:
    """A ``--since``/``--until`` value: a duration (``90m``, ``24h``, ``7d``) in seconds, or a point in time.

    Times: ``now``, ``today`` and ``yesterday`` (local midnight), ``HH:MM[:SS]`` (today, local),
    and ISO 8601 dates and date-times (``2026-11-30``, ``2026-11-30 14:00``,
    ``2026-11-30T14:00:00Z``, ``...+01:00``); without an offset they are local time.
    """
    from lockrun.settings import parse_duration  # settings is the home of every duration rule

    value = str(text).strip()
    if value and value[-1] in "smhd" and value[:-1].replace(".", "", 1).isdigit():
        return parse_duration(value, what, maximum=MAX_WINDOW_S)
    try:
        moment = _parse_time(value)
    except OverflowError:
        moment = datetime.min.replace(tzinfo=timezone.utc)  # out of range: said below
    if moment is None:
        raise UsageError(
            f"invalid {what} {text!r}: expected a duration (90m, 24h, 7d) or a time (now, today, yesterday, "
            "14:00, 2026-11-30, '2026-11-30 14:00', 2026-11-30T14:00:00Z)"
        )
    if not FIRST_YEAR <= moment.year <= LAST_YEAR:
        raise UsageError(f"invalid {what} {text!r}: a time in the years {FIRST_YEAR} to {LAST_YEAR}")
    return moment


def _parse_time(value: str) -> datetime | None:
    local_now = datetime.now().astimezone()
    midnight = datetime.combine(local_now.date(), time()).astimezone()
    words = {"now": local_now, "today": midnight, "yesterday": _local(datetime.combine(
        local_now.date() - timedelta(days=1), time()))}
    if value.lower() in words:
        return words[value.lower()].astimezone(timezone.utc)
    try:
        if len(value) <= 8 and ":" in value:  # HH:MM or HH:MM:SS, today
            clock = time.fromisoformat(value)
            return _local(datetime.combine(local_now.date(), clock)).astimezone(timezone.utc)
        if value.endswith(("Z", "z")):
            value = value[:-1] + "+00:00"
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if not FIRST_YEAR <= moment.year <= LAST_YEAR:
        raise OverflowError(moment.year)
    return (_local(moment) if moment.tzinfo is None else moment).astimezone(timezone.utc)


def _local(naive: datetime) -> datetime:
    return naive.astimezone()  # a naive datetime is taken as local time


def resolve_window(since: float | datetime, until: float | datetime | None, now: datetime | None = None) -> Window:
    """``--since`` as a duration is the window's length, ending at ``--until`` (default: now);
    ``--until`` as a duration is that long ago."""
    now = now or datetime.now(timezone.utc)
    try:
        end = now if until is None else (now - timedelta(seconds=until) if isinstance(until, float) else until)
        start = end - timedelta(seconds=since) if isinstance(since, float) else since
    except OverflowError:
        raise UsageError("--since/--until: that is before the year 1") from None
    if start >= end:
        raise UsageError(f"--since ({_shown(start)}) must be before --until ({_shown(end)})")
    if (end - start).total_seconds() > MAX_WINDOW_S:
        raise UsageError(f"--since/--until: a window of at most {int(MAX_WINDOW_S // 86400)} days")
    return Window(start, end, now)


def _shown(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z").strip()


# --- lanes from a source --------------------------------------------------------------------------------


def lanes(per_name: Iterable[tuple[str, list[Span], list[Span]]], by_host: bool = False) -> Iterator[Lane]:
    """Lanes from (name, runs, marks) in name order; with ``by_host`` one per host of each name
    (the tuples must then carry the host)."""
    for name, runs, marks in per_name:
        if not by_host:
            yield Lane(name, None, runs, marks)
            continue
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


def lanes_from_rows(rows: Iterable[dict[str, Any]], window: Window, *, host: str | None = None,
                    by_host: bool = False) -> list[Lane]:
    """Lanes from ``history --json``-shaped rows, from any source (the ledger, the fleet record).

    Rows are read defensively: a row whose times cannot be read is left out; only the runs that
    overlap the window (and the skips inside it) are kept.
    """
    since, until = iso(window.since), iso(window.until)
    per_name: dict[str, tuple[list[Span], list[Span]]] = {}
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("name"), str):
            continue
        if host is not None and row.get("host") != host:
            continue
        started = _canonical(row.get("started_at"))
        ended = _canonical(row.get("ended_at")) if row.get("ended_at") is not None else None
        if started is None or (ended is None and row.get("ended_at") is not None):
            continue
        status = row.get("status") if isinstance(row.get("status"), str) else "?"
        duration = row.get("duration_s")
        if not isinstance(duration, (int, float)) or isinstance(duration, bool) or not math.isfinite(duration):
            duration = None
        span = (started, ended, status, float(duration) if duration is not None else None,
                row.get("host") if isinstance(row.get("host"), str) else None,
                row.get("run_id") if isinstance(row.get("run_id"), str) else None,
                _integer(row.get("exit_code")), _integer(row.get("exit_status")), _integer(row.get("signal")))
        if started >= until or (ended is not None and ended < since):
            continue
        runs, marks = per_name.setdefault(row["name"], ([], []))
        if status in MARK_STATUSES:
            if started >= since:
                marks.append(span)
        else:
            runs.append(span)
    for _runs, marks in per_name.values():
        marks.sort()
    return list(lanes(((name, *per_name[name]) for name in sorted(per_name)), by_host))


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _canonical(value: object) -> str | None:
    """Any ISO time a source wrote, in the ledger's fixed-width form (so that it sorts as text)."""
    if not isinstance(value, str):
        return None
    if len(value) == 27 and value.endswith("Z") and parse_iso(value) is not None:
        return value
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)  # stored times are UTC
    try:
        return iso(moment)
    except (OverflowError, ValueError):
        return None


# --- layout ------------------------------------------------------------------------------------------------


def layout(lanes_: Iterable[Lane], window: Window) -> Iterator[LaneChart]:
    """One chart per lane, as the lanes come (a source may hand them over one at a time)."""
    open_end = min(iso(window.until), iso(window.now))
    for lane in lanes_:
        yield _lane_chart(lane, open_end)


def _lane_chart(lane: Lane, open_end: str) -> LaneChart:
    runs = lane.runs
    tracks = _tracks(runs, open_end)
    durations = list(filter(partial(is_not, None), map(itemgetter(_DURATION), runs)))
    # Each track is in order of start: the last run to start ends one of them.
    last = max((track.runs[-1] for track in tracks), key=itemgetter(_START))[_STATUS] if tracks else None
    figures = Figures(
        runs=len(runs),
        failures=sum(sum(map(FAILURES.__contains__, track.statuses)) for track in tracks),
        skips=len(lane.marks),
        median_s=_median(durations),
        max_s=max(durations) if durations else None,
        last_status=last,
    )
    marks = lane.marks if _is_sorted(list(map(itemgetter(_START), lane.marks))) else sorted(lane.marks)
    return LaneChart(lane.name, lane.host, tracks, marks, figures)


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    values.sort()
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def _is_sorted(values: list[str]) -> bool:
    return all(map(le, values, values[1:]))


def _tracks(runs: list[Span], open_end: str) -> list[Track]:
    """Runs in as few sub-rows as possible, none overlapping another in its sub-row.

    The fast path: runs that follow one another (each ends before the next starts; the ledger
    hands them over ordered by end) are one track, checked with C-level builtins. Otherwise each
    run goes, in order of start, into the first sub-row that is free by then.
    """
    if not runs:
        return []
    starts = list(map(itemgetter(_START), runs))
    ends = list(map(itemgetter(_END), runs))
    if None in ends:
        ends = [_open_end(run, open_end) if end is None else end for run, end in zip(runs, ends, strict=True)]
    # Every run has a length (the common case: one pass proves both that and start <= end) or at
    # least does not end before it starts; and each ends before the next begins.
    has_length = all(map(lt, starts, ends))
    if (has_length or all(map(le, starts, ends))) and all(map(le, ends, islice(starts, 1, None))):
        return [_track(runs, starts, ends, has_length)]
    ordered = sorted(zip(starts, (max(s, e) for s, e in zip(starts, ends, strict=True)), range(len(runs)), strict=True))
    free_at: list[str] = []  # per sub-row: when its last run ended
    members: list[list[int]] = []
    for start, end, index in ordered:
        row = next((k for k, free in enumerate(free_at) if free <= start), len(free_at))  # the first free sub-row
        if row == len(free_at):
            free_at.append(start)
            members.append([])
        free_at[row] = end
        members[row].append(index)
    tracks = []
    for indexes in members:
        tracks.append(_track([runs[i] for i in indexes], [starts[i] for i in indexes],
                             [max(starts[i], ends[i]) for i in indexes], False))
    return tracks


def _open_end(run: Span, open_end: str) -> str:
    """Where a run without an end is drawn to: a running one to now, anything else (abandoned:
    its lockrun is gone and nobody knows when its command stopped) only in the cell it started in."""
    started: str = run[_START]
    return max(started, open_end) if run[_STATUS] == Status.RUNNING else started


def _track(runs: list[Span], starts: list[str], ends: list[str], has_length: bool) -> Track:
    # A run of no length (a run that never started: unavailable, error; an abandoned one) ends,
    # as drawn, just after its start: "~" sorts after the "Z" that ends every timestamp and
    # before any later timestamp, so the run fills exactly the cell it started in.
    if not has_length and any(map(eq, starts, ends)):
        ends = list(ends)
        for i in compress(range(len(ends)), map(eq, starts, ends)):
            ends[i] = starts[i] + "~"
    return Track(runs, starts, ends, list(map(itemgetter(_STATUS), runs)))


# --- cells -------------------------------------------------------------------------------------------------


def worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=lambda s: _RANK.get(s, 0))


def cells(track: Track | SummaryTrack, bounds: list[str]) -> list[str | None]:
    """Per column: the worst status among the runs of ``track`` that cover it, or None.

    A run covers the columns from the one it starts in to the one it ends in; one that ends
    exactly where a column begins does not reach into it. A track that is not a ``Track`` (a
    ``lane_summary.SummaryTrack``: the runs as columns) works its cells out itself, the same way.
    """
    if not isinstance(track, Track):
        return track.cells(bounds)
    row: list[str | None] = []
    starts, ends, statuses = track.starts, track.ends, track.statuses
    for k in range(len(bounds) - 1):
        first = bisect_right(ends, bounds[k])  # the first run still going after this column begins
        stop = bisect_left(starts, bounds[k + 1], first)  # the first run starting after it ends
        if first >= stop:
            row.append(None)
        elif stop - first == 1:
            row.append(statuses[first])
        else:
            row.append(worst(set(statuses[first:stop])))
    return row


def mark_cells(marks: list[Span], bounds: list[str]) -> list[bool]:
    """Per column: whether a skip (busy, duplicate, unlocked) happened in it."""
    starts = list(map(itemgetter(_START), marks))
    edges = [bisect_left(starts, bound) for bound in bounds]
    return [a < b for a, b in zip(edges, edges[1:], strict=False)]


# --- the time axis -----------------------------------------------------------------------------------------

_MINUTE, _HOUR, _DAY = 60, 3600, 86400
_STEPS = (1, 2, 5, 10, 15, 30, _MINUTE, 2 * _MINUTE, 5 * _MINUTE, 10 * _MINUTE, 15 * _MINUTE, 30 * _MINUTE,
          _HOUR, 2 * _HOUR, 3 * _HOUR, 6 * _HOUR, 12 * _HOUR, _DAY, 2 * _DAY, 7 * _DAY, 14 * _DAY)
_MONTH_STEPS = (1, 3, 6, 12, 24, 60)


def ticks(window: Window, columns: int) -> list[tuple[int, str]]:
    """(column, label) of each tick, in local time: on the hour for a day, at midnight for a week.

    The step is the smallest one whose labels fit between two ticks with a space to spare.
    """
    per_column = window.seconds / columns
    for step in _STEPS:
        if step / per_column >= _label_width(step) + 1:
            return _place(_aligned(window, step), window, columns, step)
    for months in _MONTH_STEPS:
        if months * 28 * _DAY / per_column >= (5 if months >= 12 else 8):  # "2026" or "2026-11", and a space
            return _place(_month_starts(window, months), window, columns, months * 28 * _DAY)
    return []


def _label_width(step: int) -> int:
    if step < _MINUTE:
        return 8  # 14:03:10
    return 6  # 14:00, and "Tue 01" at midnight; "Tue 01" or "Nov 30" for day steps


def _label(moment: datetime, step: int, window: Window) -> str:
    local = moment.astimezone()
    if step >= 12 * 28 * _DAY:
        return local.strftime("%Y")
    if step >= 28 * _DAY:
        return local.strftime("%Y-%m")
    if step >= _DAY or (local.hour, local.minute, local.second) == (0, 0, 0):
        return local.strftime("%a %d" if window.seconds <= 16 * _DAY else "%b %d")
    return local.strftime("%H:%M:%S" if step < _MINUTE else "%H:%M")


def _aligned(window: Window, step: int) -> Iterable[datetime]:
    """Local wall-clock multiples of ``step`` (weeks start on Monday) within the window."""
    local_since = window.since.astimezone()
    midnight = datetime.combine(local_since.date(), time())  # naive local
    if step >= 7 * _DAY:
        midnight -= timedelta(days=midnight.weekday())
    elif step >= _DAY:
        midnight -= timedelta(days=midnight.toordinal() % (step // _DAY))
    elapsed = (local_since.replace(tzinfo=None) - midnight).total_seconds()
    moment = midnight + timedelta(seconds=step * int(elapsed // step))
    seen = set()
    while True:
        aware = _local(moment).astimezone(timezone.utc)
        if aware >= window.until:
            return
        if aware >= window.since and aware not in seen:
            seen.add(aware)
            yield aware
        moment += timedelta(seconds=step)


def _month_starts(window: Window, months: int) -> Iterable[datetime]:
    local = window.since.astimezone()
    year, month = local.year, local.month - (local.month - 1) % months
    while True:
        moment = _local(datetime(year, month, 1)).astimezone(timezone.utc)
        if moment >= window.until:
            return
        if moment >= window.since:
            yield moment
        month += months
        if month > 12:
            year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
        if year > 9999:
            return


def _place(moments: Iterable[datetime], window: Window, columns: int, step: int) -> list[tuple[int, str]]:
    """Each label starts at its tick's column; one that would run into the previous label or
    past the right edge is left out (its tick too)."""
    placed: list[tuple[int, str]] = []
    free_from = 0
    for moment in moments:
        column = window.column_of(moment, columns)
        label = _label(moment, step, window)
        if column < free_from or column + len(label) > columns:
            continue
        placed.append((column, label))
        free_from = column + len(label) + 1
    return placed
