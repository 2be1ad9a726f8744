"""``timeline``: the runs of a window of time, as text or SVG.

``views/timeline_view`` gathers the lanes, ``render/`` draws them; here the window is parsed and
the drawing printed or written.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

import click

from lockrun.cli.group import CONTEXT, cli, complete_lock_names, resolved_settings
from lockrun.cli.options import global_options
from lockrun.cli.output import say
from lockrun.cli.params import HOST, LOCK_NAME, MOMENT, output_file, whole_number
from lockrun.core import defaults

if TYPE_CHECKING:
    from datetime import datetime

    from lockrun.views.timeline import Window
    from lockrun.views.timeline_view import TimelineView


@cli.command(context_settings=CONTEXT)
@click.argument("names", nargs=-1, type=LOCK_NAME, metavar="[NAME]...", shell_complete=complete_lock_names)
@click.option("--since", type=MOMENT, default="24h", show_default=True,
              help="Start of the window: a duration before --until (90, 90m, 1.5h, 7d), or a time (yesterday, 14:00, "
                   "2026-11-30, '2026-11-30 14:00', 2026-11-30T14:00Z; local time unless it says otherwise).")
@click.option("--until", type=MOMENT, help="End of the window: a time, or a duration ago (2h) [default: now].")
@click.option("--fleet", is_flag=True,
              help="Every host's runs, from the fleet record in Redis (local backend: this host's ledger).")
@click.option("--host", "host_filter", type=HOST, metavar="H", help="Only runs on host H.")
@click.option("--by-host", is_flag=True, help="One row per name and host (with --fleet: which host did the work).")
@click.option("--width", type=whole_number(*defaults.TIMELINE_WIDTHS), metavar="N",
              help=f"Characters per line ({defaults.TIMELINE_WIDTHS[0]} to {defaults.TIMELINE_WIDTHS[1]})"
                   " [default: the terminal's, else $COLUMNS, else 100].")
@click.option("--svg", "svg_path", metavar="FILE", type=output_file(dash=True),
              help="Write the chart as an SVG image to FILE (- for standard output) instead of printing it; only "
                   "a regular file is replaced (a device, FIFO or socket there: exit 2).")
@global_options
@click.pass_context
def timeline(
    ctx: click.Context, names: tuple[str, ...], since: float | datetime, until: float | datetime | None, fleet: bool,
    host_filter: str | None, by_host: bool, width: int | None, svg_path: str | None,
) -> NoReturn:
    """Draw the runs of a window of time: one row per lock name, a bar per run.

    \b
      lockrun timeline                                   # the last 24 hours
      lockrun timeline nightly-dump sync-invoices --since 7d
      lockrun timeline --since yesterday --until today --svg yesterday.svg

    Each run is its status' letter (S succeeded, F failed, T timeout, L lost or
    preempted, K killed, R running, A abandoned, E error, U unavailable), on a
    bar of its colour on a terminal; a dot marks a busy skip. Runs of one name that overlap are
    drawn on stacked rows. Each row ends with its runs, failures, skips, median
    and longest duration, and the last status. Reads the local ledger; with
    --fleet, every host's runs from the fleet record in Redis (exit 69 when it
    is unreachable).
    """
    from lockrun.render import timeline_svg
    from lockrun.render import timeline_text as drawing
    from lockrun.views.timeline_view import timeline_view
    from lockrun.views.timeline_window import resolve_window

    window = resolve_window(since, until)
    wanted = list(names) or None
    with timeline_view(resolved_settings(ctx), window, wanted, fleet, host_filter, by_host,
                       per_run_below=timeline_svg.SVG_PER_RUN_BELOW if svg_path else 0,
                       with_details=svg_path is not None) as view:
        if svg_path is not None:
            _write_svg(ctx, svg_path, view, window)
        elif not view.labels:
            drawing.print_empty(window, wanted)
        else:
            drawing.print_text(view.labels, view.charts, window, width or drawing.default_width())
    ctx.exit(0)


def _write_svg(ctx: click.Context, svg_path: str, view: TimelineView, window: Window) -> None:
    from lockrun.render import timeline_svg

    document = timeline_svg.svg(view.labels, view.charts, window, subtitle=f"runs recorded in {view.source}",
                                details=view.details)
    try:
        _write(svg_path, document)
    except OSError as exc:
        say(f"cannot write the SVG to {svg_path}: {exc.strerror or exc}")
        ctx.exit(1)


def _write(path: str, text: str) -> None:
    """``-`` is standard output; a file is replaced whole, as an ordinary new file would be made."""
    if path == "-":
        sys.stdout.write(text)
        return
    from lockrun.system.safefs import write_like_a_new_file

    write_like_a_new_file(path, text.encode("utf-8"))
