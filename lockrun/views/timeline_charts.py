"""The timeline's charts from this host's ledger: each lane read as columns, or as rows where it must be.

A lane is read as columns (``LedgerTimeline.columns``: no Python object per run) and drawn from
them (``timeline.chart``) when its runs follow one another; any other lane (runs that overlap,
a row lockrun would not write) and every ``--by-host`` lane is read as rows
(``LedgerTimeline.window``) and drawn by ``timeline.layout``. The SVG draws a lane of many runs
from its columns, a rect per stretch of pixels its runs cover (``timeline_svg``), and reads any
other as rows with every detail, to draw it run by run with their tooltips.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from lockrun.views import timeline as tl

if TYPE_CHECKING:
    from lockrun.ledger.store import Ledger
    from lockrun.ledger.timeline import Columns, LedgerTimeline


def from_ledger(book: Ledger, window: tl.Window, names: list[str] | None, host: str | None, by_host: bool,
                per_run_below: int = 0) -> tuple[list[str], Iterator[tl.LaneChart]]:
    """The lanes' labels, and their charts as a stream (one lane's data in memory at a time).

    ``per_run_below`` (the SVG's): a lane with fewer runs, or one that cannot be drawn from its
    columns, is read as rows with every detail (run id, exit codes: the SVG's tooltips).
    """
    since, until = tl.iso(window.since), tl.iso(window.until)
    reads = book.timeline()
    keys = reads.window_lanes(since, until, names, host=host, by_host=by_host)
    labels = [tl.label(name, lane_host) for name, lane_host in keys]
    wanted = list(dict.fromkeys(name for name, _ in keys))
    if by_host:
        runs = reads.window(since, until, wanted, host=host, with_host=True, detail=per_run_below > 0)
        return labels, tl.layout(tl.lanes(runs, True), window)
    return labels, _charts(reads, window, wanted, host, per_run_below)


def run_details(book: Ledger, host: str | None) -> tl.RunDetails:
    """The SVG's way to ask for the details of runs drawn from their columns (``timeline_svg.svg``)."""
    reads = book.timeline()
    return lambda chart, starts: reads.runs_started_at(chart.name, starts, host=host)


def lane(name: str, columns: Columns) -> tl.LaneColumns:
    """A lane of the ledger's columns, for ``timeline.chart``."""
    return tl.LaneColumns(name, None, columns.starts, columns.ends, columns.others, columns.last_status,
                          columns.marks, columns.median_s, columns.max_s)


def _charts(reads: LedgerTimeline, window: tl.Window, names: list[str], host: str | None,
            per_run_below: int) -> Iterator[tl.LaneChart]:
    since, until = tl.iso(window.since), tl.iso(window.until)
    open_end = min(until, tl.iso(window.now))
    with reads.snapshot():  # a lane's several reads see one ledger
        odd = reads.odd_names()
        for name in names:
            columns = reads.columns(name, since, until, open_end, host) if name not in odd else None
            chart = tl.chart(lane(name, columns)) if columns is not None else None
            if chart is None or (per_run_below and not _in_stretches(columns, chart, per_run_below)):
                runs = reads.window(since, until, [name], host=host, detail=per_run_below > 0)
                chart = next(tl.layout(tl.lanes(runs), window))
            yield chart


def _in_stretches(columns: Columns | None, chart: tl.LaneChart, per_run_below: int) -> bool:
    """Whether the SVG draws a lane of columns a stretch of pixels at a time: one with many runs, in
    lockrun's own form (statuses it has a colour for, times as the ledger writes them). It draws
    any other run by run, from its rows."""
    return (columns is not None and columns.as_written and chart.figures.runs >= per_run_below
            and set(columns.others) <= tl.RUN_STATUSES)
