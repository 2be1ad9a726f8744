"""``pause`` and ``resume``: skip a job's runs for a while, fleet-wide with Redis (docs/operating.md
"Pausing a job"). ``views/pause`` asks the backend; here the flags are checked and the answer printed.
"""

from __future__ import annotations

from typing import NoReturn

import click

from lockrun.cli.group import CONTEXT, cli, complete_lock_names, resolved_settings
from lockrun.cli.options import global_options
from lockrun.cli.output import print_applied
from lockrun.cli.params import LOCK_NAME, PAUSE_FOR, PAUSE_REASON, PAUSE_UNTIL
from lockrun.core import defaults


@cli.command(context_settings=CONTEXT)
@click.argument("names", nargs=-1, required=True, type=LOCK_NAME, metavar="NAME...",
                shell_complete=complete_lock_names)
@click.option("--for", "for_s", type=PAUSE_FOR, metavar="DURATION",
              help=f"Pause for DURATION (90m, 2h, 7d; at most {defaults.MAX_PAUSE_TEXT}), by the backend's clock.")
@click.option("--until", "until_epoch_s", type=PAUSE_UNTIL, metavar="TIME",
              help=f"Pause until TIME (14:00, 2026-12-24, 2026-12-24T06:00:00Z; local time without an offset; at "
                   f"most {defaults.MAX_PAUSE_TEXT} ahead).")
@click.option("--reason", default="", metavar="TEXT", type=PAUSE_REASON,
              help=f"Why (one line, at most {defaults.MAX_PAUSE_REASON} characters): status and check show it.")
@global_options
@click.pass_context
def pause(ctx: click.Context, names: tuple[str, ...], for_s: float | None, until_epoch_s: float | None,
          reason: str) -> NoReturn:
    """Skip every run of NAME until the pause ends (--for or --until: one is required).

    \b
      lockrun pause nightly-dump --for 2h --reason 'db migration'
      lockrun pause sync-invoices --until 2026-12-27
      lockrun resume nightly-dump

    With Redis the pause is fleet-wide. A run that starts while its name is paused
    is skipped: exit 0, ledger status paused (one line under -v). A running command
    is not stopped; the lock is not touched. status and check show the pause.
    """
    from lockrun.backends.connect import open_backend
    from lockrun.views.pause import pause_names

    if (for_s is None) == (until_epoch_s is None):
        raise click.UsageError("give exactly one of --for DURATION and --until TIME: a pause always ends", ctx=ctx)
    resolved = resolved_settings(ctx)
    backend = open_backend(resolved, resolved.socket_timeout or 5.0, resolved.connect_timeout)
    try:
        lines = pause_names(backend, list(dict.fromkeys(names)), for_s, until_epoch_s, reason)
    finally:
        backend.close()
    print_applied(lines, "the pause holds all the same")
    ctx.exit(0)


@cli.command(context_settings=CONTEXT)
@click.argument("names", nargs=-1, required=True, type=LOCK_NAME, metavar="NAME...",
                shell_complete=complete_lock_names)
@global_options
@click.pass_context
def resume(ctx: click.Context, names: tuple[str, ...]) -> NoReturn:
    """End the pause of NAME (a malformed one too): its next run runs.

    \b
      lockrun resume nightly-dump

    Exits 0 whether or not NAME was paused.
    """
    from lockrun.backends.connect import open_backend
    from lockrun.views.pause import resume_names

    resolved = resolved_settings(ctx)
    backend = open_backend(resolved, resolved.socket_timeout or 5.0, resolved.connect_timeout)
    try:
        lines = resume_names(backend, list(dict.fromkeys(names)))
    finally:
        backend.close()
    print_applied(lines, "the pause is over all the same")
    ctx.exit(0)
