"""Drawing `lockrun timeline` as an SVG image: one rect per run (or per stretch of runs), names and figures.

The geometry comes from ``timeline``, the ticks from ``timeline_axis``; the lane names and the
figures are laid out as the text chart has them (``render_timeline``). A track whose runs came
with their details (a lane read as rows) is drawn run by run, each with its tooltip; one that
came as columns (a busy lane of the ledger) a rect per stretch of pixels its runs cover.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from lockrun.core.clock import human_duration, parse_iso
from lockrun.core.record import Status
from lockrun.render.tables import STATUS_STYLES, STYLE_HEX
from lockrun.render.tables import _exit_parts as exit_parts  # history's EXIT column: the tooltips say it the same way
from lockrun.render.timeline_text import FIGURES_HEAD, figure_texts, fit
from lockrun.views import timeline as tl
from lockrun.views.timeline_axis import ticks

XOf = Callable[[str], float]  # a time's x in the chart, in pixels

# Geometry in pixels. Text is monospace so that the figures line up as they do in a terminal.
_FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
_CHAR = 7.3  # advance of one 12 px monospace character
_MARGIN, _TOP, _PITCH, _BAR_H, _CHART_PX = 16, 70, 18, 12, 840
_MIN_RUN_PX = 3.0
_GRID, _BAND, _TEXT, _MUTED = "#dee2e6", "#f8f9fa", "#212529", "#868e96"
_MISSED = "#e03131"  # a missed start (views/timeline_missed.py)


def escape(text: str) -> str:
    """What ``xml.sax.saxutils.escape`` does, without importing it: it imports urllib, whose
    import alone is a tenth of a text chart's time."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _hex(status: str) -> str:
    return STYLE_HEX.get(STATUS_STYLES.get(status, ""), "#495057")


# A lane of a ledger with fewer runs than this (about one per pixel) is drawn run by run, each
# with its own tooltip; a busier one from its columns (see ``_svg_stretches``).
SVG_PER_RUN_BELOW = _CHART_PX


def svg(labels: list[str], charts: Iterable[tl.LaneChart], window: tl.Window, subtitle: str = "",
        details: tl.RunDetails | None = None) -> str:
    """The chart as a standalone SVG document: one <rect class="run"> per run with a <title>
    tooltip, the lane names and figures as <text>.

    Runs too close together to tell apart at this resolution (a short run is drawn 3 px wide;
    say a minute-by-minute job over a week) share one <rect class="runs"> whose tooltip counts them.
    """
    page = _Page.of(labels)
    body, chart_bottom = _svg_lanes(charts, window, page, details)
    legend, legend_height = _svg_legend(page.chart_x, chart_bottom + 24)
    page_height = chart_bottom + 24 + legend_height + _MARGIN
    since_local, until_local = window.since.astimezone(), window.until.astimezone()
    title = (f"lockrun timeline \u00b7 {since_local:%Y-%m-%d %H:%M} to {until_local:%Y-%m-%d %H:%M} "
             f"{since_local.strftime('%Z') or since_local.strftime('%z')}")
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{page.width:.0f}" height="{page_height:.0f}" '
        f'viewBox="0 0 {page.width:.0f} {page_height:.0f}" font-family="{_FONT}" font-size="12">',
        f'<style>.name{{fill:{_TEXT}}} .muted{{fill:{_MUTED}}} .title{{fill:{_TEXT};font-size:15px;font-weight:bold}} '
        f'.fig{{fill:{_TEXT}}} rect.run:hover,rect.runs:hover{{stroke:{_TEXT};stroke-width:1}}</style>',
        '<rect width="100%" height="100%" fill="#ffffff"/>',
        f'<text x="{_MARGIN}" y="26" class="title">{escape(title)}</text>',
    ]
    if subtitle:
        parts.append(f'<text x="{_MARGIN}" y="44" class="muted">{escape(subtitle)}</text>')
    parts += _svg_grid(window, page, chart_bottom) + body
    parts.append(f'<rect x="{page.chart_x}" y="{_TOP - 6}" width="{_CHART_PX}" height="{chart_bottom - _TOP + 6}" '
                 f'fill="none" stroke="{_GRID}"/>')
    parts += legend + ["</svg>"]
    return "\n".join(parts) + "\n"


class _Page(NamedTuple):
    """Where the columns go across the page (px): the names, the chart, the figures."""

    label_px: float
    chart_x: float
    figures_x: float
    width: float

    @classmethod
    def of(cls, labels: list[str]) -> _Page:
        label_px = min(max([len(label) for label in labels] + [8]) * _CHAR, 300)
        chart_x = _MARGIN + label_px + 12
        figures_x = chart_x + _CHART_PX + 16
        return cls(label_px, chart_x, figures_x, figures_x + len(FIGURES_HEAD) * _CHAR + _MARGIN)


def _x_of(window: tl.Window) -> XOf:
    """A time's x in the chart (px), held to the chart; 0 for a time that cannot be read."""
    since_s = window.since.timestamp()
    scale = _CHART_PX / window.seconds
    days: dict[str, int | None] = {}

    def x_of(stamp: str) -> float:
        seconds = _epoch_seconds(stamp.rstrip("~"), days)
        if seconds is None:
            return 0.0
        return min(max((seconds - since_s) * scale, 0.0), _CHART_PX)

    return x_of


def _svg_lanes(charts: Iterable[tl.LaneChart], window: tl.Window, page: _Page,
               details: tl.RunDetails | None) -> tuple[list[str], float]:
    """Every lane, banded every other one, and where the chart ends (y)."""
    x_of = _x_of(window)
    pixels = window.boundaries(_CHART_PX)
    body: list[str] = []
    y: float = _TOP
    for row, chart in enumerate(charts):
        tracks: list[tl.Track | None] = [*chart.tracks] or [None]
        height = len(tracks) * _PITCH + 6
        if row % 2 == 0:
            body.append(f'<rect x="{_MARGIN / 2}" y="{y}" width="{page.width - _MARGIN}" height="{height}"'
                        f' fill="{_BAND}"/>')
        label = fit(tl.label(chart.name, chart.host), int(page.label_px / _CHAR), True)
        body.append(f'<text x="{_MARGIN}" y="{y + 16}" class="name">{escape(label)}</text>')
        body.append(_svg_figures(chart.figures, page.figures_x, y + 16))
        for index, track in enumerate(tracks):
            body.extend(_svg_track(chart, track, index, y + 4 + index * _PITCH, page.chart_x, x_of, window, pixels,
                                   details))
        body.extend(_svg_marks(chart, y + 4 + _BAR_H + 1, page.chart_x, x_of))
        body.extend(_svg_missed(chart, y + 4, page.chart_x, x_of))
        y += height
    if y == _TOP:
        body.append(f'<text x="{page.chart_x + 12}" y="{_TOP + 20}" class="muted">no runs in this window</text>')
        y += 32
    return body, y


def _svg_track(chart: tl.LaneChart, track: tl.Track | None, index: int, top: float, chart_x: float, x_of: XOf,
               window: tl.Window, pixels: list[str], details: tl.RunDetails | None) -> list[str]:
    """One sub-row of a lane: run by run when its runs came with their details, else by stretches."""
    drawn = [f'<text x="{_MARGIN + 12}" y="{top + 11}" class="muted">overlap</text>'] if index else []
    if track is not None and track.details is not None:
        drawn += _svg_runs(chart, track, track.details, top, chart_x, x_of, window)
    elif track is not None:
        drawn += _svg_stretches(chart, stretches(track, pixels), top, chart_x, x_of, details)
    return drawn


def _svg_grid(window: tl.Window, page: _Page, chart_bottom: float) -> list[str]:
    """The ticks' lines and times, and the figures' heading."""
    grid = []
    for column, text in ticks(window, 120):
        x = page.chart_x + column / 120 * _CHART_PX
        grid.append(f'<line x1="{x:.1f}" y1="{_TOP - 6}" x2="{x:.1f}" y2="{chart_bottom}" stroke="{_GRID}"/>')
        grid.append(f'<text x="{x + 3:.1f}" y="{_TOP - 10}" class="muted">{escape(text)}</text>')
    return grid + [f'<text x="{page.figures_x}" y="{_TOP - 10}" class="muted" xml:space="preserve">'
                   f'{escape(FIGURES_HEAD.rstrip())}</text>']


def _svg_runs(chart: tl.LaneChart, track: tl.Track, runs: list[tl.Span], top: float, chart_x: float, x_of: XOf,
              window: tl.Window) -> list[str]:
    """One rect per run; runs whose rects would touch (under half a pixel apart) share one."""
    out: list[str] = []
    group: list[int] = []
    left = right = 0.0

    def flush() -> None:
        if not group:
            return
        status = tl.worst(runs[i][2] for i in group)
        tip = _tooltip(chart, track, runs, group)
        css = "run" if len(group) == 1 else "runs"
        out.append(f'<rect class="{css}" x="{chart_x + left:.2f}" y="{top}" width="{right - left:.2f}" '
                   f'height="{_BAR_H}" rx="1.5" fill="{_hex(status)}"><title>{escape(tip)}</title></rect>')

    since, until = tl.iso(window.since), tl.iso(window.until)
    for index in range(len(runs)):
        if track.ends[index] <= since or track.starts[index] >= until:
            continue  # ended as the window began
        start, end = _drawn(x_of(track.starts[index]), x_of(track.ends[index]))
        if group and start < right + 0.5:
            group.append(index)
            right = max(right, end)
            continue
        flush()
        group, left, right = [index], start, end
    flush()
    return out


def _drawn(start: float, end: float) -> tuple[float, float]:
    """Where a run's rect begins and ends: a short run stays visible, inside the frame at the
    window's end."""
    if end - start < _MIN_RUN_PX:
        start = min(start, _CHART_PX - _MIN_RUN_PX)
        end = start + _MIN_RUN_PX
    return start, end


class Stretch(NamedTuple):
    """Runs next to one another in a track, covering a stretch of pixels that no other run reaches."""

    run_count: int  # runs
    started_at: str  # when its first run started
    first_ended_at: str  # and ended, as drawn (a run of no length: its start followed by "~")
    last_started_at: str  # when its last run started
    ended_at: str  # and ended, as drawn
    statuses: dict[Any, int]  # how many runs of each status


def stretches(track: tl.Track, bounds: list[str]) -> list[Stretch]:
    """The runs of a track grouped by the columns they cover: each stretch of columns that some run
    covers, and no more (the rects, at a pixel a column)."""
    starts, ends = track.starts, track.ends
    found: list[Stretch] = []
    first = stop = 0
    current: list[Any] | None = None  # [its first run, the one after its last, where it begins, where it ends]
    for begin, end in zip(bounds, bounds[1:], strict=False):
        first = bisect_right(ends, begin, first)  # the first run still going after the column begins
        stop = max(first, bisect_left(starts, end, stop))  # the first run to start after it ends
        if stop <= first:
            if current:
                found.append(_stretch(track, *current))
            current = None
        elif current:
            current[1], current[3] = stop, end
        else:
            current = [first, stop, begin, end]
    if current:
        found.append(_stretch(track, *current))
    return found


def _stretch(track: tl.Track, first: int, stop: int, begin: str, end: str) -> Stretch:
    counts = tl.covering(track.others, begin, end)
    if stop - first > sum(counts.values()):
        counts[Status.SUCCEEDED] = stop - first - sum(counts.values())
    return Stretch(stop - first, track.starts[first], track.ends[first], track.starts[stop - 1], track.ends[stop - 1],
                   counts)


def _svg_stretches(chart: tl.LaneChart, stretches: list[Stretch], top: float, chart_x: float, x_of: XOf,
                   details: tl.RunDetails | None) -> list[str]:
    """A track drawn from its columns (a busy lane): one rect per stretch of pixels that its runs
    cover. A run alone in its stretch is drawn as ``_svg_runs`` draws it, with its details from
    ``details``; several share a rect whose tooltip counts them."""
    singles = [stretch.started_at for stretch in stretches if stretch.run_count == 1]
    found = {(run[0], run[1]): run for run in details(chart, singles)} if details and singles else {}
    return [_stretch_rect(chart, stretch, found, top, chart_x, x_of) for stretch in stretches]


def _stretch_rect(chart: tl.LaneChart, stretch: Stretch, found: dict[tuple[Any, Any], tl.Span], top: float,
                  chart_x: float, x_of: XOf) -> str:
    # From where its first run is drawn to where its last one is, as _svg_runs draws runs.
    start = _drawn(x_of(stretch.started_at), x_of(stretch.first_ended_at))[0]
    end = _drawn(x_of(stretch.last_started_at), x_of(stretch.ended_at))[1]
    status = tl.worst(stretch.statuses)
    # The row of a run that has not ended has no end; its status as drawn is the track's
    # (a running row whose lockrun is gone is drawn abandoned).
    run = found.get((stretch.started_at, stretch.ended_at.rstrip("~"))) or found.get((stretch.started_at, None))
    if stretch.run_count == 1 and run is not None:
        css, tip = "run", _run_tooltip(chart, (*run[:2], status, *run[3:]))
    else:
        counts = sorted(stretch.statuses.items(), key=lambda kv: (-kv[1], -tl.SEVERITY.index(kv[0])))
        css = "runs" if stretch.run_count > 1 else "run"
        tip = _group_tooltip(chart, stretch.run_count, stretch.started_at, stretch.ended_at, counts)
    return (f'<rect class="{css}" x="{chart_x + start:.2f}" y="{top}" width="{end - start:.2f}" '
            f'height="{_BAR_H}" rx="1.5" fill="{_hex(status)}"><title>{escape(tip)}</title></rect>')


def _tooltip(chart: tl.LaneChart, track: tl.Track, runs: list[tl.Span], group: list[int]) -> str:
    if len(group) > 1:
        counts: dict[str, int] = {}
        for i in group:
            counts[runs[i][2]] = counts.get(runs[i][2], 0) + 1
        return _group_tooltip(chart, len(group), track.starts[group[0]], track.ends[group[-1]],
                              sorted(counts.items(), key=lambda kv: -kv[1]))
    return _run_tooltip(chart, runs[group[0]])


def _group_tooltip(chart: tl.LaneChart, count: int, started_at: str, ended_at: str,
                   counts: list[tuple[str, int]]) -> str:
    where = f" ({chart.host})" if chart.host else ""
    summary = ", ".join(f"{n} {status}" for status, n in counts)
    return f"{chart.name}{where}: {count} runs from {_local(started_at)} to {_local(ended_at)}: {summary}"


def _outcome(status: str, run: tl.Span) -> str:
    """``failed (exit 3)``, ``timeout (exit 124, sig 15)``, ``lost (exit 76, cmd 0)``: what cron
    saw, and how the command ended when that says more, by the rule of history's EXIT column.
    Rows written before the ledger recorded exit statuses have the command's code alone."""
    numbers = (value if isinstance(value, int) and not isinstance(value, bool) else None for value in run[6:9])
    row = dict(zip(("exit_code", "exit_status", "signal"), (*numbers, None, None, None), strict=False))
    code, command = exit_parts(row)
    said = [] if code in ("-", "0") else [code if code.startswith("sig") else f"exit {code}"]
    if command:
        said.append(command)
    return f"{status} ({', '.join(said)})" if said else status


def _run_tooltip(chart: tl.LaneChart, run: tl.Span) -> str:
    where = f" ({chart.host})" if chart.host else ""
    status = run[2]
    ended = run[1]
    until = _local(ended) if ended else ("now" if status == Status.RUNNING else "unknown")
    return f"{chart.name}{where}: {_outcome(status, run)}, {_local(run[0])} to {until}" + _run_facts(chart, run)


def _run_facts(chart: tl.LaneChart, run: tl.Span) -> str:
    """What a run's tooltip adds when it is known: its duration, its host, its run id."""
    text = ""
    if run[3] is not None:
        text += f" ({human_duration(run[3])})"
    host = run[4] if len(run) > 4 else None
    if host and not chart.host:
        text += f" on {host}"
    run_id = run[5] if len(run) > 5 else None
    if run_id:
        text += f", run {str(run_id)[:8]}"
    return text


def _epoch_seconds(stamp: str, days: dict[str, int | None]) -> float | None:
    """``parse_iso(stamp).timestamp()``, without a datetime per run: the day's start is worked
    out once per day, the time of day by hand, in whole microseconds (so the sum is the same
    float). Anything but the ledger's form goes through ``parse_iso``."""
    day = _day_start(stamp[:10], days)
    clock = _ledger_clock(stamp)
    if day is None or clock is None:
        moment = parse_iso(stamp)
        return None if moment is None else moment.timestamp()
    seconds = day + int(clock[0]) * 3600 + int(clock[1]) * 60 + int(clock[2])
    return (seconds * 1_000_000 + int(clock[3])) / 1_000_000


def _day_start(date: str, days: dict[str, int | None]) -> int | None:
    """The epoch seconds a UTC date begins at (None: not a date), worked out once per date."""
    day = days.get(date, -1)
    if day == -1:
        moment = parse_iso(date + "T00:00:00.000000Z")
        day = days[date] = None if moment is None else int(moment.timestamp())
    return day


def _ledger_clock(stamp: str) -> tuple[str, str, str, str] | None:
    """Hours, minutes, seconds and microseconds of a time in the ledger's form; None for any other."""
    clock = stamp[11:13], stamp[14:16], stamp[17:19], stamp[20:26]
    if (len(stamp) != 27 or (stamp[10], stamp[13], stamp[16], stamp[19], stamp[26]) != tuple("T::.Z")
            or not ("".join(clock).isascii() and "".join(clock).isdigit())
            or not (clock[0] < "24" and clock[1] < "60" and clock[2] < "60")):
        return None
    return clock


def _local(stamp: str) -> str:
    moment = parse_iso(stamp.rstrip("~"))
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S") if moment else str(stamp)


def _svg_marks(chart: tl.LaneChart, y: float, chart_x: float, x_of: XOf) -> list[str]:
    """A thin grey tick under the lane for each skip; skips within 2 px of each other share one."""
    groups: list[list[Any]] = []  # [x, count, first mark]
    for mark in chart.marks:
        x = x_of(mark[0])
        if groups and x - groups[-1][0] < 2:
            groups[-1][1] += 1
        else:
            groups.append([x, 1, mark])
    out = []
    for x, count, mark in groups:
        tip = f"{mark[2]} at {_local(mark[0])}" if count == 1 else f"{count} skips from {_local(mark[0])}"
        out.append(f'<rect class="skip" x="{chart_x + x:.2f}" y="{y}" width="1" height="4" fill="{_hex("busy")}">'
                   f'<title>{escape(tip)}</title></rect>')
    return out


def _svg_missed(chart: tl.LaneChart, y: float, chart_x: float, x_of: XOf) -> list[str]:
    """A red triangle above the lane at each missed start (views/timeline_missed.py), with a tooltip;
    those within 4 px of each other share one."""
    groups: list[list[Any]] = []  # [x, count, first due time]
    for due in chart.missed:
        x = x_of(due)
        if groups and x - groups[-1][0] < 4:
            groups[-1][1] += 1
        else:
            groups.append([x, 1, due])
    out = []
    for x, count, due in groups:
        tip = (f"missed start: due {_local(due)}, nothing started" if count == 1
               else f"{count} missed starts from {_local(due)}")
        left = chart_x + x
        out.append(f'<path class="missed" d="M{left - 3:.2f},{y - 4} L{left + 3:.2f},{y - 4} L{left:.2f},{y + 1} Z"'
                   f' fill="{_MISSED}"><title>{escape(tip)}</title></path>')
    return out


def _svg_figures(figures: tl.Figures, x: float, y: float) -> str:
    text = "".join(figure_texts(figures))[1:]
    last = figures.last_status or "-"
    return (f'<text x="{x}" y="{y}" class="fig" xml:space="preserve">{escape(text)}'
            f'<tspan fill="{_hex(last)}">{escape(last)}</tspan></text>')


def _svg_legend(x: float, y: float) -> tuple[list[str], float]:
    # One swatch per colour of the tables' palette (every failing status has its own; lost and
    # preempted share theirs, as they share a letter), so that no two swatches look alike.
    by_colour: dict[str, list[str]] = {}
    for letter, meaning in tl.LEGEND:
        if letter != tl.MARK_LETTER:
            by_colour.setdefault(_hex({"L": "lost"}.get(letter, meaning)), []).append(meaning)
    out = []
    cursor = x
    for colour, meanings in by_colour.items():
        meaning = " / ".join(meanings)
        out.append(f'<rect x="{cursor:.1f}" y="{y - 10}" width="12" height="12" rx="1.5" fill="{colour}"/>')
        cursor += 16
        out.append(f'<text x="{cursor:.1f}" y="{y}" class="muted">{escape(meaning)}</text>')
        cursor += len(meaning) * _CHAR + 18
    meaning = dict(tl.LEGEND)[tl.MARK_LETTER]
    out.append(f'<rect x="{cursor:.1f}" y="{y - 9}" width="1" height="10" fill="{_hex("busy")}"/>')
    out.append(f'<text x="{cursor + 6:.1f}" y="{y}" class="muted">{escape(meaning)}</text>')
    return out, 12.0
