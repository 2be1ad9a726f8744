"""The timeline's charts from this host's ledger: from summaries where they are exact, from runs elsewhere.

A lane whose runs follow one another is drawn from its columns (``lane_summary``, read by
``ledger_lanes``): no Python object per run. Any other lane (an overlap, a row someone else
wrote, a status lockrun does not know) and every ``--by-host`` lane is drawn from its runs by
``timeline.layout`` (read by ``ledger_timeline``); so is a lane of the SVG with few runs, which
draws each run with its own tooltip.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from lockrun import lane_summary
from lockrun import timeline as tl

if TYPE_CHECKING:
    from lockrun.ledger import Ledger
    from lockrun.render_timeline import RunDetails


def from_ledger(book: Ledger, window: tl.Window, names: list[str] | None, host: str | None, by_host: bool,
                per_run_below: int = 0) -> tuple[list[str], Iterator[tl.LaneChart]]:
    """The lanes' labels, and their charts as a stream (one lane's data in memory at a time).

    ``per_run_below``: a lane with fewer runs is drawn from its runs with every detail (run id,
    exit codes: the SVG's tooltips) even when a summary would do.
    """
    since, until = tl.iso(window.since), tl.iso(window.until)
    reads = book.timeline()
    keys = reads.window_lanes(since, until, names, host=host, by_host=by_host)
    labels = [tl.label(name, lane_host) for name, lane_host in keys]
    wanted = list(dict.fromkeys(name for name, _ in keys))
    if by_host:
        runs = reads.window(since, until, wanted, host=host, with_host=True, detail=per_run_below > 0)
        return labels, tl.layout(tl.lanes(runs, True), window)
    return labels, _charts(book, window, wanted, host, per_run_below)


def run_details(book: Ledger, host: str | None) -> RunDetails:
    """The SVG's way to ask for the details of runs drawn from a summary (``render_timeline.svg``)."""
    reads = book.timeline()
    return lambda chart, starts: reads.runs_started_at(chart.name, starts, host=host)


def _charts(book: Ledger, window: tl.Window, names: list[str], host: str | None,
            per_run_below: int) -> Iterator[tl.LaneChart]:
    since, until = tl.iso(window.since), tl.iso(window.until)
    open_end = min(until, tl.iso(window.now))
    lanes = book.lanes()
    with lanes.snapshot():  # the summaries' several reads of a lane see one ledger
        from_rows = lanes.names_drawn_from_rows()
        for name in names:
            chart = None
            if name not in from_rows:
                chart = _summary_chart(book, name, host, since, until, open_end, per_run_below)
            yield chart or _runs_chart(book, window, name, host, detail=per_run_below > 0)


def _summary_chart(book: Ledger, name: str, host: str | None, since: str, until: str, open_end: str,
                   per_run_below: int) -> tl.LaneChart | None:
    lanes = book.lanes()
    columns = lanes.columns(name, since, until, host)
    summary = lane_summary.summarize(name, None, columns, since, open_end) if columns else None
    if summary is None or summary.track.run_count < per_run_below:
        return None
    figures = lanes.durations(name, since, until, host, summary.ended_in_window, summary.tail_durations)
    return summary.chart(*figures) if figures is not None else None


def _runs_chart(book: Ledger, window: tl.Window, name: str, host: str | None, detail: bool) -> tl.LaneChart:
    since, until = tl.iso(window.since), tl.iso(window.until)
    runs = book.timeline().window(since, until, [name], host=host, detail=detail)
    return next(tl.layout(tl.lanes(runs), window))
