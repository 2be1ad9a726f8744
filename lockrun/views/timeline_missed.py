"""Missed starts on `lockrun timeline` (docs/operating.md "Declaring a cadence"): the due times
of a name's declared cadence that passed, grace and all, with nothing started (no run and no
skip: a busy or paused skip is a start that found a reason not to run).

- ``--every D``: from each start, a start is due D later, and D after that, until the next start;
- ``--schedule``: each fire time in the window, from the name's declaration (or its first start
  in the window, when the fleet record keeps no declaration time), with no start within the grace
  either side of it.

Only lanes of a whole name are marked (with ``--by-host`` another host may have started it).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import NamedTuple

from lockrun.core.cadence import Cadence, due_after
from lockrun.core.clock import parse_iso
from lockrun.views import timeline as tl

#: At most this many missed starts per lane: a lane has at most a few thousand columns to mark.
MAX_MISSED = 5000


def missed_starts(cadence: Cadence, starts: list[str], window: tl.Window, declared_at: object = None) -> list[str]:
    """The due times (ISO, fixed width) in ``window`` that passed, grace and all, with no start."""
    moments = [moment for moment in map(parse_iso, starts) if moment is not None]
    if cadence.every_s is not None:
        found = _missed_every(cadence.every_s, cadence.grace_s, moments, window)
    elif moments or parse_iso(declared_at) is not None:
        found = _missed_fires(cadence, moments, window, parse_iso(declared_at))
    else:
        found = []
    return [tl.iso(moment) for moment in found]


def _missed_every(every_s: float, grace_s: float, moments: list[datetime], window: tl.Window) -> list[datetime]:
    """--every: from each start, every due time before the next start (or now) and its grace."""
    end = min(window.until, window.now)
    step, grace = timedelta(seconds=every_s), timedelta(seconds=grace_s)
    found: list[datetime] = []
    for index, start in enumerate(moments):
        until = moments[index + 1] if index + 1 < len(moments) else end
        due = start + step
        while due + grace < until and due < window.until and len(found) < MAX_MISSED:
            if due >= window.since:
                found.append(due)
            due += step
    return found


def _missed_fires(cadence: Cadence, moments: list[datetime], window: tl.Window,
                  declared: datetime | None) -> list[datetime]:
    """--schedule: each fire time from the declaration (or the first start, less the grace) with
    no start within the grace either side of it."""
    end = min(window.until, window.now)
    grace = timedelta(seconds=cadence.grace_s)
    first = declared or moments[0] - grace
    fire = due_after(cadence, max(first, window.since) - timedelta(microseconds=1))
    found: list[datetime] = []
    while fire + grace < end and len(found) < MAX_MISSED:
        at = bisect_left(moments, fire - grace)
        if not (at < len(moments) and moments[at] <= fire + grace):
            found.append(fire)
        fire = due_after(cadence, fire)
    return found


class LaneCadence(NamedTuple):
    """A lane's declared cadence, when it was declared so (the ledger's; None from the fleet record),
    and since when the name is paused (the fleet record keeps no entry of a paused skip, so a name
    paused now missed nothing since; None: not paused)."""

    cadence: Cadence
    declared_at: object = None
    quiet_since: str | None = None


def with_missed(charts: Iterable[tl.LaneChart], cadences: dict[str, LaneCadence],
                window: tl.Window) -> Iterator[tl.LaneChart]:
    """Each chart with its missed starts (a lane of a whole name with a declared cadence), as they come."""
    for chart in charts:
        declared = cadences.get(chart.name) if chart.host is None else None
        yield chart if declared is None else chart._replace(missed=_missed(chart, declared, window))


def _missed(chart: tl.LaneChart, declared: LaneCadence, window: tl.Window) -> tuple[str, ...]:
    """The starts the lane's cadence missed: no run and no skip began there (none while paused)."""
    starts = sorted([start for track in chart.tracks for start in track.starts]
                    + [mark[0] for mark in chart.marks if isinstance(mark[0], str)])
    missed = missed_starts(declared.cadence, starts, window, declared.declared_at)
    if declared.quiet_since:
        missed = [due for due in missed if due < declared.quiet_since]
    return tuple(missed)
