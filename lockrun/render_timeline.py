"""Drawing `lockrun timeline`: text for a terminal (coloured bars) or a pipe (letters), and SVG.

The geometry comes from ``timeline``; this module only draws it. rich is imported only when
the text can have colour (a terminal, or FORCE_COLOR): a chart for a pipe, cron mail or a log
file is plain ASCII and needs no rich at all.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from lockrun import timeline as tl
from lockrun.clock import human_duration, parse_iso
from lockrun.record import Status
from lockrun.render import STATUS_STYLES, STYLE_HEX
from lockrun.render import _exit_parts as exit_parts  # history's EXIT column: the tooltips say it the same way

if TYPE_CHECKING:
    from lockrun.lane_summary import Stretch, SummaryTrack

XOf = Callable[[str], float]  # a time's x in the chart, in pixels

MIN_WIDTH, MAX_WIDTH, DEFAULT_WIDTH = 70, 1000, 100
FIGURES_HEAD = f"{'runs':>5} {'fail':>4} {'skip':>4} {'median':>7} {'max':>7}  {'last':<11}"
BAR, MARK_GLYPH = "\u2588", "\u00b7"  # full block; middle dot
MIN_CHART = 10  # columns of time at the narrowest
OVERLAP_LABEL = "  overlap"

Segment = tuple[str, str | None]  # text, rich style


# --- text ---------------------------------------------------------------------------------------------------


def default_width() -> int:
    """The terminal's width on a terminal; else $COLUMNS; else 100 (cron mail, a log file)."""
    if sys.stdout.isatty():
        try:
            return max(MIN_WIDTH, min(MAX_WIDTH, os.get_terminal_size(sys.stdout.fileno()).columns))
        except OSError:
            pass
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    return max(MIN_WIDTH, min(MAX_WIDTH, columns)) if columns > 0 else DEFAULT_WIDTH


def text_lines(labels: list[str], charts: Iterable[tl.LaneChart], window: tl.Window, width: int,
               colour: bool) -> list[list[Segment]]:
    """The chart as lines of styled segments; with ``colour`` False every style is None and
    bars are letters, so the lines are plain ASCII.

    ``labels`` (every lane's, from ``timeline.label``) size the name column before the first
    chart arrives: ``charts`` may be a stream, one lane's runs in memory at a time.
    """
    narrowest = len(OVERLAP_LABEL)
    label_width = max(narrowest, min(max([len(label) for label in labels] + [0]), width // 4))
    chart_width = width - label_width - 3 - 1 - len(FIGURES_HEAD)
    if chart_width < MIN_CHART:
        label_width = max(narrowest, label_width - (MIN_CHART - chart_width))
        chart_width = max(MIN_CHART, width - label_width - 3 - 1 - len(FIGURES_HEAD))
    bounds = window.boundaries(chart_width)
    gutter = " " * (label_width + 1)

    lines: list[list[Segment]] = [[(_title(window, chart_width), "bold" if colour else None)]]
    axis = [" "] * chart_width
    ruler = ["-"] * chart_width
    for column, text in tl.ticks(window, chart_width):
        axis[column:column + len(text)] = text
        ruler[column] = "+"
    lines.append([(gutter + " " + "".join(axis) + "  " + FIGURES_HEAD.rstrip(), "dim" if colour else None)])
    lines.append([(gutter + "+" + "".join(ruler) + "+", "dim" if colour else None)])
    for chart in charts:
        label = tl.label(chart.name, chart.host)
        marks = tl.mark_cells(chart.marks, bounds)
        tracks: Sequence[tl.Track | SummaryTrack | None] = chart.tracks or [None]
        for index, track in enumerate(tracks):
            cells: list[str | None] = tl.cells(track, bounds) if track is not None else [None] * chart_width
            line: list[Segment] = []
            if index == 0:
                line.append((_fit(label, label_width, colour).ljust(label_width) + " |", None))
            else:
                line.append((OVERLAP_LABEL.ljust(label_width), "dim" if colour else None))
                line.append((" |", None))
            line.extend(_cell_segments(cells, marks if index == 0 else None, colour))
            line.append(("|", None))
            if index == 0:
                line.extend(_figures(chart.figures, colour))
            lines.append(line)
    lines.append([("", None)])
    lines.extend(_legend(colour, width))
    return lines


def _fit(text: str, width: int, colour: bool) -> str:
    if len(text) <= width:
        return text
    return text[: width - 1] + ("\u2026" if colour else "~")


def _title(window: tl.Window, columns: int) -> str:
    since, until = window.since.astimezone(), window.until.astimezone()
    same_day = since.date() == until.date()
    end = until.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M")
    zone = since.strftime("%Z") or since.strftime("%z")
    return (f"runs from {since:%Y-%m-%d %H:%M} to {end} {zone}"
            f", {span_text(window.seconds / columns)} per column")


def span_text(seconds: float) -> str:
    """A column's length, as a person would say it: 20m, 1h30m, 36s, 2.5s."""
    if seconds < 10:
        return f"{seconds:.2g}s" if seconds < 1 else f"{seconds:.1f}s".replace(".0s", "s")
    whole = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
        if len(parts) == 2:
            break
    return "".join(parts)


def _cell_segments(cells: list[str | None], marks: list[bool] | None, colour: bool) -> list[Segment]:
    """Runs of equal cells become one segment, so a busy lane is a handful of styled spans."""
    segments: list[Segment] = []
    text, style = "", None
    for column, status in enumerate(cells):
        if status is not None:
            glyph = BAR if colour else tl.LETTERS.get(status, tl.UNKNOWN_LETTER)
            cell_style = STATUS_STYLES.get(status) if colour else None
        elif marks is not None and marks[column]:
            glyph = MARK_GLYPH if colour else tl.MARK_LETTER
            cell_style = STATUS_STYLES["busy"] if colour else None
        else:
            glyph, cell_style = " ", None
        if cell_style != style and text:
            segments.append((text, style))
            text = ""
        text += glyph
        style = cell_style
    if text:
        segments.append((text, style))
    return segments


def _figure_texts(figures: tl.Figures) -> list[str]:
    """runs, fail, skip, median, max: the texts under FIGURES_HEAD, each with its leading space."""
    return [f" {figures.runs:>5}", f" {figures.failures:>4}", f" {figures.skips:>4}",
            f" {_seconds(figures.median_s):>7}", f" {_seconds(figures.max_s):>7}", "  "]


def _figures(figures: tl.Figures, colour: bool) -> list[Segment]:
    texts = _figure_texts(figures)
    segments: list[Segment] = [(text, None) for text in texts]
    if colour and figures.failures:
        segments[1] = (texts[1], "red")
    last = figures.last_status or "-"
    segments.append((last, STATUS_STYLES.get(last) if colour else None))
    return segments


def _seconds(value: float | None) -> str:
    return human_duration(value) if value is not None else "-"


def _legend(colour: bool, width: int) -> list[list[Segment]]:
    """``S succeeded   F failed   ...``, wrapped to ``width``."""
    lines: list[list[Segment]] = [[]]
    used = 0
    for letter, meaning in tl.LEGEND:
        status = {"L": "lost", tl.MARK_LETTER: "busy"}.get(letter, meaning)
        entry = f"{letter} {meaning}"
        if used and used + 3 + len(entry) > width:
            lines.append([])
            used = 0
        if used:
            lines[-1].append(("   ", None))
            used += 3
        if colour:
            lines[-1].append((MARK_GLYPH if letter == tl.MARK_LETTER else BAR, STATUS_STYLES.get(status)))
            lines[-1].append((f" {meaning}", None))
        else:
            lines[-1].append((entry, None))
        used += len(entry)
    return lines


def print_text(labels: list[str], charts: Iterable[tl.LaneChart], window: tl.Window, width: int) -> None:
    """Plain ASCII for a pipe; through rich (which honours NO_COLOR and FORCE_COLOR) otherwise."""
    if not sys.stdout.isatty() and not os.environ.get("FORCE_COLOR"):
        _write_plain(text_lines(labels, charts, window, width, colour=False))
        return
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False, width=max(width, 20), soft_wrap=True)
    colour = console.color_system is not None
    lines = text_lines(labels, charts, window, width, colour=colour)
    if not colour:
        _write_plain(lines)
        return
    # Rendered to a string and written here, so that a closed pipe is a BrokenPipeError for the
    # caller (exit 0, as for every command) rather than rich's own exit 1.
    with console.capture() as captured:
        for line in lines:
            text = Text(no_wrap=True, overflow="crop")
            for segment, style in line:
                text.append(segment, style=style or "")
            console.print(text)
    sys.stdout.write(captured.get())


def _write_plain(lines: list[list[Segment]]) -> None:
    sys.stdout.write("\n".join("".join(text for text, _ in line).rstrip() for line in lines) + "\n")


def print_empty(window: tl.Window, names: list[str] | None) -> None:
    since, until = window.since.astimezone(), window.until.astimezone()
    what = "no runs" + (f" of {', '.join(names)}" if names else "")
    sys.stdout.write(f"{what} between {since:%Y-%m-%d %H:%M} and {until:%Y-%m-%d %H:%M %Z}".rstrip() + "\n")


# --- SVG ----------------------------------------------------------------------------------------------------

# Geometry in pixels. Text is monospace so that the figures line up as they do in a terminal.
_FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
_CHAR = 7.3  # advance of one 12 px monospace character
_MARGIN, _TOP, _PITCH, _BAR_H, _CHART_PX = 16, 70, 18, 12, 840
_MIN_RUN_PX = 3.0
_GRID, _BAND, _TEXT, _MUTED = "#dee2e6", "#f8f9fa", "#212529", "#868e96"


def escape(text: str) -> str:
    """What ``xml.sax.saxutils.escape`` does, without importing it: it imports urllib, whose
    import alone is a tenth of a text chart's time."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _hex(status: str) -> str:
    return STYLE_HEX.get(STATUS_STYLES.get(status, ""), "#495057")


# A lane of a ledger with fewer runs than this (about one per pixel) is drawn run by run, each
# with its own tooltip; a busier one from its summary (see ``_svg_stretches``).
SVG_PER_RUN_BELOW = _CHART_PX

# The runs of a chart's lane that started at the given times, with every detail (run id, exit
# codes): ``window(detail=True)``-shaped tuples. The SVG asks for those of a summary that it
# draws alone.
RunDetails = Callable[[tl.LaneChart, list[str]], list[tl.Span]]


def svg(labels: list[str], charts: Iterable[tl.LaneChart], window: tl.Window, subtitle: str = "",
        details: RunDetails | None = None) -> str:
    """The chart as a standalone SVG document: one <rect class="run"> per run with a <title>
    tooltip, the lane names and figures as <text>.

    Runs too close together to tell apart at this resolution (a short run is drawn 3 px wide;
    say a minute-by-minute job over a week) share one <rect class="runs"> whose tooltip counts them.
    """
    label_px = min(max([len(label) for label in labels] + [8]) * _CHAR, 300)
    chart_x = _MARGIN + label_px + 12
    figures_x = chart_x + _CHART_PX + 16
    width = figures_x + len(FIGURES_HEAD) * _CHAR + _MARGIN
    since_s = window.since.timestamp()
    scale = _CHART_PX / window.seconds
    days: dict[str, int | None] = {}

    def x_of(stamp: str) -> float:
        seconds = _epoch_seconds(stamp.rstrip("~"), days)
        if seconds is None:
            return 0.0
        return min(max((seconds - since_s) * scale, 0.0), _CHART_PX)

    pixels = window.boundaries(_CHART_PX)

    body: list[str] = []
    y = _TOP
    for row, chart in enumerate(charts):
        label = tl.label(chart.name, chart.host)
        tracks: Sequence[tl.Track | SummaryTrack | None] = chart.tracks or [None]
        height = len(tracks) * _PITCH + 6
        if row % 2 == 0:
            body.append(f'<rect x="{_MARGIN / 2}" y="{y}" width="{width - _MARGIN}" height="{height}" fill="{_BAND}"/>')
        body.append(f'<text x="{_MARGIN}" y="{y + 16}" class="name">{escape(_fit(label, int(label_px / _CHAR), True))}'
                    f'</text>')
        body.append(_svg_figures(chart.figures, figures_x, y + 16))
        for index, track in enumerate(tracks):
            top = y + 4 + index * _PITCH
            if index:
                body.append(f'<text x="{_MARGIN + 12}" y="{top + 11}" class="muted">overlap</text>')
            if isinstance(track, tl.Track):
                body.extend(_svg_runs(chart, track, top, chart_x, x_of, window))
            elif track is not None:
                body.extend(_svg_stretches(chart, track.stretches(pixels), top, chart_x, x_of, details))
        body.extend(_svg_marks(chart, y + 4 + _BAR_H + 1, chart_x, x_of))
        y += height
    if y == _TOP:
        body.append(f'<text x="{chart_x + 12}" y="{_TOP + 20}" class="muted">no runs in this window</text>')
        y += 32
    chart_bottom = y
    grid = []
    for column, text in tl.ticks(window, 120):
        x = chart_x + column / 120 * _CHART_PX
        grid.append(f'<line x1="{x:.1f}" y1="{_TOP - 6}" x2="{x:.1f}" y2="{chart_bottom}" stroke="{_GRID}"/>')
        grid.append(f'<text x="{x + 3:.1f}" y="{_TOP - 10}" class="muted">{escape(text)}</text>')
    head = (f'<text x="{figures_x}" y="{_TOP - 10}" class="muted" xml:space="preserve">'
            f'{escape(FIGURES_HEAD.rstrip())}</text>')
    frame = (f'<rect x="{chart_x}" y="{_TOP - 6}" width="{_CHART_PX}" height="{chart_bottom - _TOP + 6}" '
             f'fill="none" stroke="{_GRID}"/>')
    legend, legend_height = _svg_legend(chart_x, chart_bottom + 24)
    page_height = chart_bottom + 24 + legend_height + _MARGIN
    since_local, until_local = window.since.astimezone(), window.until.astimezone()
    title = (f"lockrun timeline \u00b7 {since_local:%Y-%m-%d %H:%M} to {until_local:%Y-%m-%d %H:%M} "
             f"{since_local.strftime('%Z') or since_local.strftime('%z')}")
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{page_height:.0f}" '
        f'viewBox="0 0 {width:.0f} {page_height:.0f}" font-family="{_FONT}" font-size="12">',
        f'<style>.name{{fill:{_TEXT}}} .muted{{fill:{_MUTED}}} .title{{fill:{_TEXT};font-size:15px;font-weight:bold}} '
        f'.fig{{fill:{_TEXT}}} rect.run:hover,rect.runs:hover{{stroke:{_TEXT};stroke-width:1}}</style>',
        '<rect width="100%" height="100%" fill="#ffffff"/>',
        f'<text x="{_MARGIN}" y="26" class="title">{escape(title)}</text>',
    ]
    if subtitle:
        parts.append(f'<text x="{_MARGIN}" y="44" class="muted">{escape(subtitle)}</text>')
    parts += grid + [head] + body + [frame] + legend + ["</svg>"]
    return "\n".join(parts) + "\n"


def _svg_runs(chart: tl.LaneChart, track: tl.Track, top: float, chart_x: float, x_of: XOf,
              window: tl.Window) -> list[str]:
    """One rect per run; runs whose rects would touch (under half a pixel apart) share one."""
    out: list[str] = []
    group: list[int] = []
    left = right = 0.0

    def flush() -> None:
        if not group:
            return
        status = tl.worst(track.statuses[i] for i in group)
        tip = _tooltip(chart, track, group, window)
        css = "run" if len(group) == 1 else "runs"
        out.append(f'<rect class="{css}" x="{chart_x + left:.2f}" y="{top}" width="{right - left:.2f}" '
                   f'height="{_BAR_H}" rx="1.5" fill="{_hex(status)}"><title>{escape(tip)}</title></rect>')

    since, until = tl.iso(window.since), tl.iso(window.until)
    for index in range(len(track.runs)):
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


def _svg_stretches(chart: tl.LaneChart, stretches: list[Stretch], top: float, chart_x: float, x_of: XOf,
                   details: RunDetails | None) -> list[str]:
    """A lane drawn from its summary (``lane_summary.SummaryTrack``): one rect per stretch of
    pixels that its runs cover. A run alone in its stretch is drawn as ``_svg_runs`` draws it,
    with its details from ``details``; several share a rect whose tooltip counts them."""
    singles = [stretch.started_at for stretch in stretches if stretch.run_count == 1]
    found = {(run[0], run[1]): run for run in details(chart, singles)} if details and singles else {}
    out: list[str] = []
    for stretch in stretches:
        # From where its first run is drawn to where its last one is, as _svg_runs draws runs.
        start = _drawn(x_of(stretch.started_at), x_of(stretch.first_ended_at))[0]
        end = _drawn(x_of(stretch.last_started_at), x_of(stretch.ended_at))[1]
        status = tl.worst(stretch.statuses)
        # The row of a run that has not ended has no end; its status as drawn is the summary's
        # (a running row whose lockrun is gone is drawn abandoned).
        run = found.get((stretch.started_at, stretch.ended_at.rstrip("~"))) or found.get((stretch.started_at, None))
        if stretch.run_count == 1 and run is not None:
            css, tip = "run", _run_tooltip(chart, (*run[:2], status, *run[3:]))
        else:
            counts = sorted(stretch.statuses.items(), key=lambda kv: (-kv[1], -tl.SEVERITY.index(kv[0])))
            css = "runs" if stretch.run_count > 1 else "run"
            tip = _group_tooltip(chart, stretch.run_count, stretch.started_at, stretch.ended_at, counts)
        out.append(f'<rect class="{css}" x="{chart_x + start:.2f}" y="{top}" width="{end - start:.2f}" '
                   f'height="{_BAR_H}" rx="1.5" fill="{_hex(status)}"><title>{escape(tip)}</title></rect>')
    return out


def _tooltip(chart: tl.LaneChart, track: tl.Track, group: list[int], window: tl.Window) -> str:
    if len(group) > 1:
        counts: dict[str, int] = {}
        for i in group:
            counts[track.statuses[i]] = counts.get(track.statuses[i], 0) + 1
        return _group_tooltip(chart, len(group), track.starts[group[0]], track.ends[group[-1]],
                              sorted(counts.items(), key=lambda kv: -kv[1]))
    return _run_tooltip(chart, track.runs[group[0]])


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
    outcome = _outcome(status, run)
    ended = run[1]
    until = _local(ended) if ended else ("now" if status == Status.RUNNING else "unknown")
    text = f"{chart.name}{where}: {outcome}, {_local(run[0])} to {until}"
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
    day = days.get(stamp[:10], -1)
    if day == -1:
        moment = parse_iso(stamp[:10] + "T00:00:00.000000Z")
        day = days[stamp[:10]] = None if moment is None else int(moment.timestamp())
    clock = stamp[11:13], stamp[14:16], stamp[17:19], stamp[20:26]
    if (day is None or len(stamp) != 27 or (stamp[10], stamp[13], stamp[16], stamp[19], stamp[26]) != tuple("T::.Z")
            or not ("".join(clock).isascii() and "".join(clock).isdigit())
            or not (clock[0] < "24" and clock[1] < "60" and clock[2] < "60")):
        moment = parse_iso(stamp)
        return None if moment is None else moment.timestamp()
    seconds = day + int(clock[0]) * 3600 + int(clock[1]) * 60 + int(clock[2])
    return (seconds * 1_000_000 + int(clock[3])) / 1_000_000


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


def _svg_figures(figures: tl.Figures, x: float, y: float) -> str:
    text = "".join(_figure_texts(figures))[1:]
    last = figures.last_status or "-"
    return (f'<text x="{x}" y="{y}" class="fig" xml:space="preserve">{escape(text)}'
            f'<tspan fill="{_hex(last)}">{escape(last)}</tspan></text>')


def _svg_legend(x: float, y: float) -> tuple[list[str], float]:
    # Statuses that share a colour (the tables' palette: failed, killed and error are all red)
    # share one swatch, "failed / killed / error", so that no two swatches look alike.
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
