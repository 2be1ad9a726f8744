"""``lockrun config NAME [run options] [--json]``: the settings a run of NAME would use, and where
each came from (docs/operating.md "The config file, per job"): the answer to "why does this job
wait 2 minutes?"."""

from __future__ import annotations

from typing import Any, NoReturn

import click

from lockrun.cli.group import CONTEXT, cli
from lockrun.cli.options import config_options, given_flags, global_options
from lockrun.cli.params import LOCK_NAME


@cli.command("config", context_settings=CONTEXT)
@click.argument("name", type=LOCK_NAME)
@click.option("--json", "as_json", is_flag=True,
              help='Print JSON: {"name": ..., "settings": {"ttl": {"value": 420, "source": "..."}, ...}}.')
@config_options
@global_options
@click.pass_context
def config(ctx: click.Context, /, name: str, as_json: bool, **_: Any) -> NoReturn:
    """Show the settings a run of NAME would use, and where each came from.

    \b
      lockrun config backup
      lockrun config backup --ttl 5m --json

    Each setting's value and its source: flag, env VARIABLE, FILE [job.NAME]
    (the config file's table for NAME), FILE (its top level) or default. Run
    options given here are taken as a run would take them.
    """
    from lockrun.config.resolve import resolve
    from lockrun.config.settings import Settings
    from lockrun.render.settings_table import print_settings
    from lockrun.run.command import check_plan
    from lockrun.views.settings_view import settings_of

    plan = resolve(given_flags(ctx), name)
    settings = Settings(plan)
    check_plan(plan, settings)  # what a run would refuse, refused here with the same line and code
    if settings.redis_url:
        settings.redis_password()  # a password file a run could not read (never shown)
    print_settings(name, settings_of(plan), as_json)
    ctx.exit(0)
