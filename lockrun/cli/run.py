"""``lockrun run`` (and the bare ``lockrun [OPTIONS] -- COMMAND``): its options are the rows of the
table of settings (config/options.py, cli/options.py); the values given are resolved with the
environment, the config file's ``[job.NAME]`` and top level, and the defaults into one plan,
which ``run/command`` turns into a run.
"""

from __future__ import annotations

from typing import Any, NoReturn

import click

from lockrun.cli.group import COMMAND_MODULES, CONTEXT, cli
from lockrun.cli.options import given_flags, global_options, run_options
from lockrun.cli.output import say
from lockrun.core.errors import UsageError


@cli.command(context_settings={**CONTEXT, "allow_interspersed_args": False})
@run_options
@global_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="[--] COMMAND [ARG]...")
@click.pass_context
def run(ctx: click.Context, /, command: tuple[str, ...], **_: Any) -> NoReturn:
    """Run COMMAND while holding the lock NAME.

    \b
      lockrun -n sync-invoices --ttl 120 -- /opt/app/bin/sync-invoices
      lockrun -n report --wait 600 --timeout 3600 -- /opt/app/bin/report
      lockrun -n payroll --once-per day -- /opt/app/bin/payroll

    COMMAND is executed directly (no shell); everything after `--` belongs to it.
    The command sees LOCKRUN_NAME, LOCKRUN_RUN_ID and LOCKRUN_FENCING_TOKEN
    (an integer that strictly increases with every acquisition of the name).
    A busy lock exits 75 quietly; a lease that cannot be kept stops the command
    and exits 76.
    """
    from lockrun.config import options
    from lockrun.config.resolve import resolve
    from lockrun.config.values import default_name
    from lockrun.run.command import plan_run

    given = given_flags(ctx)
    argv = list(command)
    plan = resolve(given, given.get("name") or default_name(argv))
    verbose, quiet = plan[options.VERBOSE], plan[options.QUIET]
    # `lockrun -v status`: a run option first makes `status` the command to run. When no such
    # program exists, say where lockrun's own subcommand wants its options.
    misplaced = argv[0] in COMMAND_MODULES

    def report(level: str, message: str) -> None:
        if (level == "info" and not verbose) or (level == "warn" and quiet):
            return
        if level == "error" and misplaced and message.endswith(": command not found in PATH"):
            message += f" (for lockrun's own {argv[0]!r}, put it first: lockrun {argv[0]} [OPTIONS])"
        say(message)

    try:
        planned = plan_run(plan, argv, report)
    except UsageError as exc:  # flags that cannot go together: click's line, with its hint
        raise click.UsageError(str(exc), ctx=ctx) from None
    ctx.exit(planned.execute().exit_code)
