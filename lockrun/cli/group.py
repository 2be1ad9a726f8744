"""The ``lockrun`` group: its bare form (``lockrun [OPTIONS] -- COMMAND`` is ``lockrun run``), the
global options every command accepts and the settings they resolve to, and lock-name completion.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from lockrun import __version__
from lockrun.cli.options import GLOBAL_OPTION_NAMES, given_flags
from lockrun.config import settings

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
TOP_LEVEL_ONLY = ("-h", "--help", "--version")


#: Each command and the module of ``cli/`` that defines it, in the order ``--help``, the man page
#: and docs/reference.md ("Usage") list them: a run, its locks, then its records. A module is imported when one of
#: its commands is asked for, so that a crontab line's run does not pay for ``status`` or ``timeline``.
COMMAND_MODULES = {
    "run": "run", "status": "locks", "check": "check", "unlock": "locks", "pause": "pausing",
    "resume": "pausing", "history": "records", "timeline": "timeline", "prune": "records", "show": "records",
    "metrics": "records", "config": "show_config", "doctor": "doctor", "completion": "completion",
}


#: How much of a command's first sentence ``lockrun --help`` shows.
SUMMARY_LIMIT = 200


class LockrunGroup(click.Group):
    """``lockrun [OPTIONS] -- CMD`` is ``lockrun run [OPTIONS] -- CMD``.

    The bare form applies when the first argument is an option or ``--``;
    ``-h``, ``--help`` and ``--version`` as the first argument belong to the top level.
    """

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with its first sentence whole: click's 45 characters cut most of them."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=SUMMARY_LIMIT)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"lockrun.cli.{module}")  # its commands register with this group
        return self.commands.get(cmd_name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0].startswith("-") and args[0] not in TOP_LEVEL_ONLY:
            args = self._subcommand_after_globals(args) or ["run", *args]
        return super().parse_args(ctx, args)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """``lockrun --tt<Tab>``: the first word after ``lockrun`` is completed here, before any
        argument makes it the bare form, so an option there is also one of ``run``'s (every crontab
        line starts so); later words are completed by ``run`` itself (parse_args)."""
        found = super().shell_complete(ctx, incomplete)
        if not incomplete.startswith("-"):
            return found
        run = self.get_command(ctx, "run")
        assert run is not None  # COMMAND_MODULES names it
        seen = {item.value for item in found}
        with run.make_context("run", [], parent=ctx, resilient_parsing=True) as run_ctx:
            found += [item for item in run.shell_complete(run_ctx, incomplete) if item.value not in seen]
        return found

    def _subcommand_after_globals(self, args: list[str]) -> list[str] | None:
        """``lockrun --config F status`` is ``lockrun status --config F``.

        Global options (those every subcommand accepts) may come before a subcommand's
        name; they move behind it. Anything else first (``-n``, ``--``) is the bare form.
        """
        i = 0
        while i < len(args) and args[i].split("=", 1)[0] in GLOBAL_OPTION_NAMES:
            i += 1 if "=" in args[i] else 2
        if 0 < i < len(args) and args[i] in COMMAND_MODULES:
            return [args[i], *args[:i], *args[i + 1:]]
        return None


def resolved_settings(ctx: click.Context) -> settings.Settings:
    """The global options given > environment > config file > defaults (config/resolve.py)."""
    return settings.settings_for(given_flags(ctx))


@click.group(cls=LockrunGroup, context_settings=CONTEXT)
@click.version_option(__version__, "--version", prog_name="lockrun", message="%(prog)s %(version)s")
def cli() -> None:
    """Run a cron command under a named lease so it never runs twice at once.

    \b
      lockrun -n sync-invoices --ttl 120 -- /opt/app/bin/sync-invoices
      lockrun status
      lockrun history sync-invoices

    The bare form `lockrun [OPTIONS] -- COMMAND` is the same as `lockrun run`.
    """


def every_command() -> dict[str, click.Command]:
    """Every command, in their order, each module imported: for the man page, completions and docs tests."""
    ctx = click.Context(cli)
    return {name: command for name in cli.list_commands(ctx) if (command := cli.get_command(ctx, name))}


def complete_lock_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion: the names of held locks; silently nothing when the backend is unreachable."""
    try:
        from lockrun.backends.connect import open_backend

        backend = open_backend(resolved_settings(ctx), 0.5)
        try:
            names = backend.lock_names()
        finally:
            backend.close()
    except Exception:  # noqa: BLE001 - completion must never print an error
        return []
    return [name for name in names if name.startswith(incomplete)]
