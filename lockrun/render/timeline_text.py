"""Drawing `lockrun timeline` as text: letters, on bars of their status' colour on a terminal.

The geometry comes from ``timeline``; this module only draws it (``timeline_svg`` draws the
SVG). rich is imported only when the text can have colour (a terminal, or FORCE_COLOR): a chart
for a pipe, cron mail or a log file is plain ASCII and needs no rich at all.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from lockrun.core.clock import human_duration
from lockrun.core.defaults import DEFAULT_TIMELINE_WIDTH, TIMELINE_WIDTHS
from lockrun.render.tables import STATUS_STYLES
from lockrun.views import timeline as tl
from lockrun.views.timeline_axis import ticks

(MIN_WIDTH, MAX_WIDTH), DEFAULT_WIDTH = TIMELINE_WIDTHS, DEFAULT_TIMELINE_WIDTH
FIGURES_HEAD = f"{'runs':>5} {'fail':>4} {'skip':>4} {'median':>7} {'max':>7}  {'last':<11}"
MIN_CHART = 10  # columns of time at the narrowest
OVERLAP_LABEL = "  overlap"

Segment = tuple[str, str | None]  # text, rich style


# --- text ---------------------------------------------------------------------------------------------------

#: A missed start: a bold red "!" where nothing ran (views/timeline_missed.py).
MISSED_STYLE = "bold red"


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
    label_width, chart_width = _widths(labels, width)
    bounds = window.boundaries(chart_width)
    lines = _head(window, label_width, chart_width, colour)
    any_missed = False
    for chart in charts:
        any_missed = any_missed or bool(chart.missed)
        lines.extend(_lane_lines(chart, bounds, label_width, chart_width, colour))
    lines.append([("", None)])
    lines.extend(_legend(colour, width, any_missed))
    return lines


def _widths(labels: list[str], width: int) -> tuple[int, int]:
    """The name column's width and the chart's, in characters: the name column at most a quarter,
    less when the chart would be narrower than MIN_CHART."""
    narrowest = len(OVERLAP_LABEL)
    label_width = max(narrowest, min(max([len(label) for label in labels] + [0]), width // 4))
    chart_width = width - label_width - 3 - 1 - len(FIGURES_HEAD)
    if chart_width < MIN_CHART:
        label_width = max(narrowest, label_width - (MIN_CHART - chart_width))
        chart_width = max(MIN_CHART, width - label_width - 3 - 1 - len(FIGURES_HEAD))
    return label_width, chart_width


def _head(window: tl.Window, label_width: int, chart_width: int, colour: bool) -> list[list[Segment]]:
    """The title, the axis with its ticks and the figures' heading, and the ruler."""
    gutter = " " * (label_width + 1)
    axis = [" "] * chart_width
    ruler = ["-"] * chart_width
    for column, text in ticks(window, chart_width):
        axis[column:column + len(text)] = text
        ruler[column] = "+"
    dim = "dim" if colour else None
    return [[(_title(window, chart_width), "bold" if colour else None)],
            [(gutter + " " + "".join(axis) + "  " + FIGURES_HEAD.rstrip(), dim)],
            [(gutter + "+" + "".join(ruler) + "+", dim)]]


def _lane_lines(chart: tl.LaneChart, bounds: list[str], label_width: int, chart_width: int,
                colour: bool) -> list[list[Segment]]:
    """One line per track of a lane: the first with the lane's name, its skips, its missed starts
    and its figures, the others (overlapping runs) marked as such."""
    marks = tl.mark_cells(chart.marks, bounds)
    missed = tl.missed_cells(chart.missed, bounds) if chart.missed else None
    tracks: list[tl.Track | None] = [*chart.tracks] or [None]
    lines = []
    for index, track in enumerate(tracks):
        cells: list[str | None] = tl.cells(track, bounds) if track is not None else [None] * chart_width
        if index == 0:
            line: list[Segment] = [(fit(tl.label(chart.name, chart.host), label_width, colour).ljust(label_width)
                                    + " |", None)]
            line.extend(_cell_segments(cells, marks, colour, missed))
            line.append(("|", None))
            line.extend(_figures(chart.figures, colour))
        else:
            line = [(OVERLAP_LABEL.ljust(label_width), "dim" if colour else None), (" |", None)]
            line.extend(_cell_segments(cells, None, colour, None))
            line.append(("|", None))
        lines.append(line)
    return lines


def fit(text: str, width: int, colour: bool) -> str:
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


def _cell_segments(cells: list[str | None], marks: list[bool] | None, colour: bool,
                   missed: list[bool] | None = None) -> list[Segment]:
    """Runs of equal cells become one segment, so a busy lane is a handful of styled spans. A
    missed start (``missed``) shows where no run and no skip is."""
    segments: list[Segment] = []
    text, style = "", None
    for column, status in enumerate(cells):
        glyph, cell_style = _cell(status, column, marks, missed)
        cell_style = cell_style if colour else None
        if cell_style != style and text:
            segments.append((text, style))
            text = ""
        text += glyph
        style = cell_style
    if text:
        segments.append((text, style))
    return segments


def _cell(status: str | None, column: int, marks: list[bool] | None,
          missed: list[bool] | None) -> tuple[str, str | None]:
    """A cell's letter, and its style in colour: a run's, a skip's, a missed start's, or blank."""
    if status is not None:
        # Colour adds to the letter (a bar of the status' colour behind it), never replaces it.
        return tl.LETTERS.get(status, tl.UNKNOWN_LETTER), _bar(STATUS_STYLES.get(status))
    if marks is not None and marks[column]:
        return tl.MARK_LETTER, STATUS_STYLES["busy"]
    if missed is not None and missed[column]:
        return tl.MISSED_LETTER, MISSED_STYLE
    return " ", None


def figure_texts(figures: tl.Figures) -> list[str]:
    """runs, fail, skip, median, max: the texts under FIGURES_HEAD, each with its leading space."""
    return [f" {figures.runs:>5}", f" {figures.failures:>4}", f" {figures.skips:>4}",
            f" {_seconds(figures.median_s):>7}", f" {_seconds(figures.max_s):>7}", "  "]


def _bar(style: str | None) -> str | None:
    """A run's cells in colour: its letter on a bar of its status' colour."""
    return f"{style} reverse" if style else None


def _figures(figures: tl.Figures, colour: bool) -> list[Segment]:
    texts = figure_texts(figures)
    segments: list[Segment] = [(text, None) for text in texts]
    if colour and figures.failures:
        segments[1] = (texts[1], "red")
    last = figures.last_status or "-"
    segments.append((last, STATUS_STYLES.get(last) if colour else None))
    return segments


def _seconds(value: float | None) -> str:
    return human_duration(value) if value is not None else "-"


def _legend(colour: bool, width: int, missed: bool = False) -> list[list[Segment]]:
    """``S succeeded   F failed   ...``, wrapped to ``width`` (``missed``: with the missed-start mark)."""
    lines: list[list[Segment]] = [[]]
    used = 0
    for letter, meaning in (*tl.LEGEND, *([tl.MISSED_LEGEND] if missed else [])):
        entry = f"{letter} {meaning}"
        if used and used + 3 + len(entry) > width:
            lines.append([])
            used = 0
        if used:
            lines[-1].append(("   ", None))
            used += 3
        lines[-1] += _legend_entry(letter, meaning, colour)
        used += len(entry)
    return lines


def _legend_entry(letter: str, meaning: str, colour: bool) -> list[Segment]:
    """A letter and its meaning; in colour, the letter as the chart draws it."""
    if not colour:
        return [(f"{letter} {meaning}", None)]
    style = STATUS_STYLES.get({"L": "lost", tl.MARK_LETTER: "busy"}.get(letter, meaning))
    if letter == tl.MISSED_LETTER:
        style = MISSED_STYLE
    return [(letter, style if letter in (tl.MARK_LETTER, tl.MISSED_LETTER) else _bar(style)), (f" {meaning}", None)]


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
