"""``lockrun check``: a Nagios/Icinga/Sensu plugin (docs/operating.md "Monitoring: lockrun check").
``views/check`` judges; here the answer is printed, and the plugin's state is the exit code."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from lockrun.cli.group import CONTEXT, cli, complete_lock_names, resolved_settings
from lockrun.cli.options import global_options
from lockrun.cli.params import LOCK_NAME, seconds_type
from lockrun.config import values
from lockrun.core.errors import LockrunError


@cli.command(context_settings=CONTEXT)
@click.argument("names", nargs=-1, type=LOCK_NAME, metavar="[NAME]...", shell_complete=complete_lock_names)
@click.option("--max-age", "max_age_s", type=seconds_type(), metavar="DURATION",
              help=f"For names with no --every/--schedule: CRITICAL when their last success is older than DURATION "
                   f"({values.seconds_range()}: 26h, 7d).")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: {status, exit_code, summary, details, perfdata, names: [...]}.")
@global_options
@click.pass_context
def check(ctx: click.Context, names: tuple[str, ...], max_age_s: float | None, as_json: bool) -> NoReturn:
    """A monitoring plugin: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.

    \b
      lockrun check                        # every name lockrun knows
      lockrun check nightly-dump --max-age 26h
      lockrun check --json

    CRITICAL: a name is overdue (--every/--schedule and --grace), its last run
    failed, timed out, was lost, killed or abandoned, or (with --max-age) its last
    success is too old. WARNING: a zombie or malformed lock, a malformed pause, a
    Redis that may evict keys. UNKNOWN: the backend or the ledger cannot be read.
    A paused name is OK ("paused until ..."). One first line with perfdata, then
    one line per name that is not OK.
    """
    from lockrun.render import tables as render
    from lockrun.views.check import check_report, unknown

    try:
        report = check_report(resolved_settings(ctx), list(names) if names else None, max_age_s)
    except LockrunError as exc:  # a config file, a URL, a state directory: the plugin cannot judge
        report = unknown(" ".join(str(exc).split()))
    from lockrun.system.own_output import OutputFailed
    from lockrun.views.check import UNKNOWN

    try:
        if as_json:
            render.print_json(report.as_json())
        else:
            click.echo(report.first_line)
            for line in report.details:
                click.echo(line)
        sys.stdout.flush()
    except OutputFailed as exc:
        # The plugin's answer is its exit code: a reader that went away early still gets the state
        # judged; an answer that could not be written out is UNKNOWN (docs/operating.md "Monitoring: lockrun check").
        if not exc.broken_pipe:
            click.echo(f"lockrun: {exc.reason}", err=True)
            ctx.exit(UNKNOWN)
    ctx.exit(report.state)
