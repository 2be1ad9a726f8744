"""The ``lockrun`` group: its bare form (``lockrun [OPTIONS] -- COMMAND`` is ``lockrun run``), the
global options every command accepts and the settings they resolve to, and lock-name completion.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

import click

from lockrun import __version__
from lockrun.cli.output import say
from lockrun.cli.params import REDIS_URL
from lockrun.config import settings, values

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
TOP_LEVEL_ONLY = ("-h", "--help", "--version")


#: Each command and the module of ``cli/`` that defines it, in the order ``--help``, the man page
#: and the README list them: a run, its locks, then its records. A module is imported when one of
#: its commands is asked for, so that a crontab line's run does not pay for ``status`` or ``timeline``.
COMMAND_MODULES = {
    "run": "run", "status": "locks", "check": "check", "unlock": "locks", "pause": "pausing",
    "resume": "pausing", "history": "records", "timeline": "timeline", "prune": "records", "show": "records",
    "metrics": "records", "doctor": "doctor", "completion": "completion",
}


class LockrunGroup(click.Group):
    """``lockrun [OPTIONS] -- CMD`` is ``lockrun run [OPTIONS] -- CMD``.

    The bare form applies when the first argument is an option or ``--``;
    ``-h``, ``--help`` and ``--version`` as the first argument belong to the top level.
    """

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


def _remember_global(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    name = param.name or param.opts[0]  # every global option has a name: --redis-url is redis_url
    if name == "ledger" and value is not None:  # --ledger or LOCKRUN_LEDGER: a device there is refused now
        problem = values.output_path_problem(value, "", directories=True)
        if problem:
            raise click.BadParameter(problem, ctx=ctx, param=param)
    given = ctx.meta.setdefault("lockrun.globals", {})
    given[name] = value
    if value is not None:  # where it came from, for the hint that compares shells and runs
        from_env = ctx.get_parameter_source(name) == click.core.ParameterSource.ENVIRONMENT
        given[f"{name}_from"] = param.envvar if from_env else param.opts[0]
    return value


class _GlobalOption(TypedDict):
    expose_value: bool
    callback: Callable[[click.Context, click.Parameter, str | None], str | None]
    is_eager: bool


# Global options are not parameters of each command: a callback keeps them in ctx.meta.
_GLOBAL: _GlobalOption = {"expose_value": False, "callback": _remember_global, "is_eager": True}
GLOBAL_OPTION_NAMES = ("--config", "--redis-url", "--redis-ca", "--prefix", "--ledger")


def global_options(fn: F) -> F:
    """The settings every subcommand accepts (docs/reference.md "Usage"); read back with :func:`resolved_settings`."""
    options = [
        click.option("--config", "config", metavar="PATH", envvar="LOCKRUN_CONFIG", show_envvar=True, **_GLOBAL,
                     help="TOML config file (default: /etc/lockrun.toml, then ~/.config/lockrun/config.toml)."),
        click.option("--redis-url", type=REDIS_URL, envvar="LOCKRUN_REDIS_URL", show_envvar=True, **_GLOBAL,
                     help="redis://, rediss://, unix://, redis+cluster://h1:7000,h2:7001/ or "
                          "redis+sentinel://h1:26379,h2:26379/mymaster URL of the shared lock server."),
        click.option("--redis-ca", metavar="PATH", envvar="LOCKRUN_REDIS_CA", show_envvar=True, **_GLOBAL,
                     help="CA certificates (PEM) that verify a rediss:// server [default: the system's]."),
        click.option("--prefix", metavar="P", envvar="LOCKRUN_PREFIX", show_envvar=True, **_GLOBAL,
                     help="Namespace of every Redis key [default: lockrun:]."),
        click.option("--ledger", metavar="PATH", envvar="LOCKRUN_LEDGER", show_envvar=True, **_GLOBAL,
                     help="SQLite run ledger [default: $LOCKRUN_STATE_DIR/ledger.db]."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def resolved_settings(ctx: click.Context, ttl: float | None = None) -> settings.Settings:
    """Flag/environment values of the global options > config file > defaults."""
    given = ctx.meta.get("lockrun.globals", {})
    resolved = settings.resolve(
        config=given.get("config"), redis_url=given.get("redis_url"), redis_ca=given.get("redis_ca"),
        prefix=given.get("prefix"), ledger=given.get("ledger"), ttl=ttl, redis_url_from=given.get("redis_url_from"),
    )
    if ctx.command.name != "run" and not ctx.resilient_parsing:  # readers, not runs, nor shell completion
        from lockrun.config.state_home import legacy_note

        note = legacy_note(resolved.state_dir)  # history kept where an older lockrun put it: not lost, say where
        if note:
            say(note)
    return resolved


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
