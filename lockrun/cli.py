"""The command line: parse, resolve settings, make one call, report.

This is the only module that imports click, and the only one that turns
exceptions into a message line and an exit code.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone

import click

from lockrun import __version__, settings
from lockrun.errors import ExitCode, LedgerError, LockrunError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
TOP_LEVEL_ONLY = ("-h", "--help", "--version")


def _say(message: str) -> None:
    sys.stderr.write(f"lockrun: {message}\n")
    sys.stderr.flush()


# --- parameter types: each wraps one validator from settings ----------------------------


class Seconds(click.ParamType):
    name = "SECONDS"

    def __init__(self, minimum: float = 0.0, allow_zero: bool = False) -> None:
        self.minimum = minimum
        self.allow_zero = allow_zero

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            return settings.parse_seconds(value, param.opts[0] if param else "value",
                                          minimum=self.minimum, allow_zero=self.allow_zero)
        except LockrunError as exc:
            self.fail(f"{value!r}: {str(exc).split(': ', 1)[-1]}", param, ctx)


class Duration(click.ParamType):
    name = "DURATION"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            return settings.parse_duration(value, param.opts[0] if param else "duration")
        except LockrunError as exc:
            self.fail(f"{value!r}: {str(exc).split(': ', 1)[-1]}", param, ctx)


class LockName(click.ParamType):
    name = "NAME"

    def convert(self, value, param, ctx):
        try:
            return settings.validate_name(value)
        except LockrunError as exc:
            self.fail(str(exc), param, ctx)


class RedisURL(click.ParamType):
    name = "URL"

    def convert(self, value, param, ctx):
        try:
            return settings.validate_redis_url(value)
        except LockrunError as exc:
            self.fail(str(exc), param, ctx)


# --- the group and its bare form -------------------------------------------------------------


class LockrunGroup(click.Group):
    """``lockrun [OPTIONS] -- CMD`` is ``lockrun run [OPTIONS] -- CMD``.

    The bare form applies when the first argument is an option or ``--``;
    ``-h``, ``--help`` and ``--version`` as the first argument belong to the top level.
    """

    def parse_args(self, ctx, args):
        if args and args[0].startswith("-") and args[0] not in TOP_LEVEL_ONLY:
            args = ["run", *args]
        return super().parse_args(ctx, args)


def global_options(fn):
    """The settings every subcommand accepts (contract §2)."""
    options = [
        click.option("--config", "config", metavar="PATH", envvar="LOCKRUN_CONFIG", show_envvar=True,
                     help="TOML config file (default: /etc/lockrun.toml, then ~/.config/lockrun/config.toml)."),
        click.option("--redis-url", type=RedisURL(), envvar="LOCKRUN_REDIS_URL", show_envvar=True,
                     help="redis://, rediss:// or unix:// URL of the shared lock server."),
        click.option("--prefix", metavar="P", envvar="LOCKRUN_PREFIX", show_envvar=True,
                     help="Namespace of every Redis key [default: lockrun:]."),
        click.option("--ledger", metavar="PATH", envvar="LOCKRUN_LEDGER", show_envvar=True,
                     help="SQLite run ledger [default: $LOCKRUN_STATE_DIR/ledger.db]."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _resolve(config, redis_url, prefix, ledger, ttl=None) -> settings.Settings:
    return settings.resolve(config=config, redis_url=redis_url, prefix=prefix, ledger=ledger, ttl=ttl)


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


# --- run ---------------------------------------------------------------------------------------


@cli.command(context_settings={**CONTEXT, "allow_interspersed_args": False})
@click.option("-n", "--name", type=LockName(),
              help="Lock name [default: cmd- + 12 hex of sha256 of the argv joined by NUL].")
@click.option("--ttl", type=Seconds(minimum=1), envvar="LOCKRUN_TTL", show_envvar=True,
              help="Lease length in seconds, at least 1; renewed every TTL/3 [default: 60].")
@click.option("-w", "--wait", type=Seconds(allow_zero=True), default=0.0, show_default=True,
              help="Wait up to SECONDS for a busy lock (0: give up at once).")
@click.option("--timeout", type=Seconds(), help="Stop the command after SECONDS; exit 124.")
@click.option("--kill-after", type=Seconds(), default=settings.DEFAULT_KILL_AFTER, show_default=True,
              help="Grace between SIGTERM and SIGKILL when stopping the command.")
@click.option("--on-lost", type=click.Choice(["terminate", "continue"]), default="terminate", show_default=True,
              help="What to do when the lease cannot be kept.")
@click.option("-E", "--busy-exit-code", type=click.IntRange(0, 255), metavar="N", default=settings.DEFAULT_BUSY_EXIT,
              show_default=True, help="Exit code when the lock is busy (after --wait).")
@click.option("-v", "--verbose", is_flag=True, help="Say what lockrun does (on stderr).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors; no warnings.")
@global_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="[--] COMMAND [ARG]...")
@click.pass_context
def run(ctx, name, ttl, wait, timeout, kill_after, on_lost, busy_exit_code, verbose, quiet,
        config, redis_url, prefix, ledger, command):
    """Run COMMAND while holding the lock NAME.

    COMMAND is executed directly (no shell); everything after `--` belongs to it.
    The command sees LOCKRUN_NAME, LOCKRUN_RUN_ID and LOCKRUN_FENCING_TOKEN.
    """
    from lockrun.backends import open_backend
    from lockrun.runner import Run, RunOptions

    argv = list(command)
    resolved = _resolve(config, redis_url, prefix, ledger, ttl)
    if not resolved.redis_url:
        open_backend(None, resolved.prefix, 1.0)  # raises the "configure a URL" error
    options = RunOptions(
        argv=argv,
        name=name or settings.default_name(argv),
        ttl=resolved.ttl,
        wait=wait,
        timeout=timeout,
        kill_after=kill_after,
        on_lost=on_lost,
        busy_exit_code=busy_exit_code,
    )

    def report(level: str, message: str) -> None:
        if (level == "info" and not verbose) or (level == "warn" and quiet):
            return
        _say(message)

    outcome = Run(
        options,
        backend_factory=lambda timeout_s: open_backend(resolved.redis_url, resolved.prefix, timeout_s),
        ledger_path=resolved.ledger_path,
        backend_name=resolved.backend_name,
        report=report,
    ).execute()
    ctx.exit(outcome.exit_code)


# --- status and history ---------------------------------------------------------------------------


def _open_ledger_for_reading(path):
    from lockrun.ledger import Ledger

    try:
        return Ledger(path).open(create=False)
    except LedgerError:
        return None


@cli.command(context_settings=CONTEXT)
@click.argument("names", nargs=-1, type=LockName(), metavar="[NAME]...")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (contract §9).")
@global_options
@click.pass_context
def status(ctx, names, as_json, config, redis_url, prefix, ledger):
    """Show who holds which lock, and the last run of each."""
    from lockrun import render
    from lockrun.backends import open_backend
    from lockrun.status import lock_states

    resolved = _resolve(config, redis_url, prefix, ledger)
    backend = open_backend(resolved.redis_url, resolved.prefix, 5.0)
    book = _open_ledger_for_reading(resolved.ledger_path)
    try:
        locks = lock_states(backend, book, list(names) if names else None)
    finally:
        backend.close()
        if book is not None:
            book.close()
    if as_json:
        render.print_json({"backend": backend.name, "locks": locks})
    else:
        render.status_table(backend.name, resolved.redacted_url or "", locks)
    ctx.exit(0)


@cli.command(context_settings=CONTEXT)
@click.argument("name", required=False, type=LockName())
@click.option("--limit", type=click.IntRange(min=1), metavar="N", default=20, show_default=True, help="Show at most N runs.")
@click.option("--status", "status_filter", type=click.Choice(
    ["running", "succeeded", "failed", "busy", "duplicate", "timeout", "lost", "killed", "unavailable",
     "error", "unlocked", "abandoned"]), help="Only runs with this status.")
@click.option("--since", type=Duration(), help="Only runs started within DURATION (90m, 12h, 7d).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (contract §8).")
@global_options
@click.pass_context
def history(ctx, name, limit, status_filter, since, as_json, config, redis_url, prefix, ledger):
    """Show the runs recorded in the ledger, newest first."""
    from lockrun import render

    resolved = _resolve(config, redis_url, prefix, ledger)
    book = _open_ledger_for_reading(resolved.ledger_path)
    rows = []
    if book is not None:
        since_iso = None
        if since is not None:
            since_iso = (datetime.now(timezone.utc) - timedelta(seconds=since)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            rows = book.history(name, limit=limit, status=status_filter, since=since_iso)
        finally:
            book.close()
    if as_json:
        render.print_json(rows)
    else:
        render.history_table(rows)
    ctx.exit(0)


# --- entry point ---------------------------------------------------------------------------------


def _one_line(exc: click.ClickException, args: list[str]) -> str:
    message = " ".join(exc.format_message().split())
    command = None
    if isinstance(exc, click.UsageError) and exc.ctx is not None and exc.ctx.command is not cli:
        command = exc.ctx.command.name
    hint = f"lockrun {command} --help" if command else "lockrun --help"
    return f"{message} (see '{hint}')"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        code = cli.main(args=args, prog_name="lockrun", standalone_mode=False)
    except click.UsageError as exc:
        _say(_one_line(exc, args))
        code = ExitCode.USAGE
    except click.ClickException as exc:
        _say(_one_line(exc, args))
        code = exc.exit_code
    except click.Abort:
        code = ExitCode.SIGNAL_BASE + 2
    except LockrunError as exc:
        _say(str(exc))
        code = exc.exit_code
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # noqa: BLE001 - the user gets one line, never a traceback
        _say(f"internal error: {exc!r}")
        code = ExitCode.INTERNAL
    sys.exit(int(code or 0))
