"""``lockrun doctor``: is the backend a run would use, and this host, safe for leases?
(docs/operating.md "Checking the setup: lockrun doctor"). ``views/doctor`` asks and judges; here
the report is printed, and its verdict is the exit code."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from lockrun.cli.group import CONTEXT, cli, resolved_settings
from lockrun.cli.options import global_options
from lockrun.core.errors import LockrunError


@cli.command(context_settings=CONTEXT)
@click.option("--probe", is_flag=True,
              help="Also try the lease operations live on a scratch name (<prefix>doctor:HOST:PID:...): two holders,"
                   " a renewal, the fencing token, a hand-over; every key it wrote is removed.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: {verdict, checks: [{check, status, detail, fix}]}.")
@global_options
@click.pass_context
def doctor(ctx: click.Context, probe: bool, as_json: bool) -> NoReturn:
    """Check that the backend a run would use, and this host, are safe for leases.

    \b
      lockrun doctor
      lockrun doctor --redis-url redis://redis.internal:6379/0 --probe
      lockrun doctor --json

    One line per check: OK, WARN or FAIL, what it found, and for WARN and FAIL
    the fix. Redis: reachable and its round trip against the TTL, server and
    version, eviction, persistence, appendfsync, replica or master, replicas,
    the clock, the commands and keys lockrun's ACL user may use, Sentinel or
    Cluster topology; both backends: the state directory. Nothing is changed.
    Exit 0 all OK, 1 a WARN, 2 a FAIL, 3 could not check (unreachable, refused).
    """
    from lockrun.render.doctor import print_report
    from lockrun.system.own_output import OutputFailed
    from lockrun.views.doctor import EXIT_CODES, cannot_check, doctor_report

    try:
        report = doctor_report(resolved_settings(ctx), probe)
    except LockrunError as exc:  # a config file, a password file: nothing could be asked
        report = cannot_check(exc)
    try:
        print_report(report, as_json)
        sys.stdout.flush()
    except OutputFailed as exc:
        # The verdict is the exit code: a reader gone early still gets it; a report that could not
        # be written out is "could not check" (docs/operating.md "Checking the setup: lockrun doctor").
        if not exc.broken_pipe:
            click.echo(f"lockrun: {exc.reason}", err=True)
            ctx.exit(EXIT_CODES["unknown"])
    ctx.exit(report.exit_code)
