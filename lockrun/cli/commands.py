"""The command line: parse, resolve settings, make one call, report.

This is the only module that imports click, and the only one that turns
exceptions into a message line and an exit code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict, TypeVar

import click

from lockrun import __version__
from lockrun.backends.redis.url import validate_redis_url
from lockrun.config import settings
from lockrun.core import zones
from lockrun.core.clock import iso_ago
from lockrun.core.errors import ConfigError, ExitCode, LedgerError, LockrunError, UsageError
from lockrun.core.printable import printable
from lockrun.core.record import Status

if TYPE_CHECKING:
    from datetime import datetime

    from lockrun.backends.protocol import Backend
    from lockrun.core.zones import Zone
    from lockrun.ledger.store import Ledger
    from lockrun.views.unlock import Inspection

    # click >= 8.3 types ParamType by the value it gives and the input it takes; older clicks
    # (pyproject allows 8.1) cannot subscript it at run time, hence the split.
    ParamTypeBase = click.ParamType[object, object]
else:
    ParamTypeBase = click.ParamType

#: A validator from settings: (the text given, the option's name for messages) -> the value.
Validator = Callable[[str, str], object]
F = TypeVar("F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
TOP_LEVEL_ONLY = ("-h", "--help", "--version")


def _say(message: str) -> None:
    if sys.stderr is None:  # started with stderr closed, or it failed: nobody to tell
        return
    try:
        sys.stderr.write(f"lockrun: {printable(message, keep=chr(10))}\n")  # messages quote what others wrote
        sys.stderr.flush()
    except (OSError, ValueError):
        # stderr is full or gone: nobody to tell. Dropped, so that Python's flush at exit does not
        # fail on it again and turn lockrun's exit status into 120.
        sys.stderr = None


# --- parameter types: each wraps one validator from settings ----------------------------


class Validated(ParamTypeBase):
    """A click type that defers to one validator from settings.

    The validator's message becomes click's "Invalid value for '--opt'" line.
    With ``echo_value``, the message keeps the value and drops the validator's
    own "invalid --opt 'x':" prefix, which click already says.
    """

    def __init__(self, name: str, validate: Validator, echo_value: bool = True) -> None:
        self.name = name
        self.validate = validate
        self.echo_value = echo_value

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> object:
        if not isinstance(value, str):
            return value  # a default, already of the right type
        try:
            return self.validate(value, param.opts[0] if param else self.name)
        except LockrunError as exc:
            message = f"{value!r}: {str(exc).split(': ', 1)[-1]}" if self.echo_value else str(exc)
            self.fail(message, param, ctx)


def seconds_type(minimum: float = 0.0, allow_zero: bool = False) -> Validated:
    return Validated(
        "SECONDS", lambda value, what: settings.parse_seconds(value, what, minimum=minimum, allow_zero=allow_zero)
    )


DURATION = Validated("DURATION", settings.parse_duration)
MIN_HOLD = Validated("DURATION", settings.parse_min_hold)
LOCK_NAME = Validated("NAME", lambda value, what: settings.validate_name(value), echo_value=False)
REDIS_URL = Validated("URL", lambda value, what: validate_redis_url(value), echo_value=False)


def _moment(value: str, what: str) -> float | datetime:
    from lockrun.views.timeline_window import parse_moment  # not at import time: `run` never needs it

    return parse_moment(value, what)


MOMENT = Validated("TIME", _moment)
HOST = Validated("H", settings.validate_host)
REPLICAS = Validated("N|all", settings.parse_replicas)
SIZE = Validated("SIZE", settings.parse_size)
NOTIFY_ON = Validated("STATUSES", settings.parse_notify_statuses)
ENDPOINT = Validated("URL", settings.validate_http_url, echo_value=False)
ZONE = Validated("ZONE", zones.parse_zone, echo_value=False)


def output_file(dash: bool = False) -> Validated:
    """A file lockrun writes: a device, FIFO or socket there (or a link to one) is a usage error
    now, not a warning after the run; the device stays as it is (``-``: standard output)."""

    def check(value: str, what: str) -> str:
        problem = None if dash and value == "-" else settings.output_path_problem(value, "", directories=False)
        if problem:
            raise UsageError(problem)
        return value

    return Validated("PATH", check, echo_value=False)


# --- the group and its bare form -------------------------------------------------------------


class LockrunGroup(click.Group):
    """``lockrun [OPTIONS] -- CMD`` is ``lockrun run [OPTIONS] -- CMD``.

    The bare form applies when the first argument is an option or ``--``;
    ``-h``, ``--help`` and ``--version`` as the first argument belong to the top level.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0].startswith("-") and args[0] not in TOP_LEVEL_ONLY:
            args = self._subcommand_after_globals(args) or ["run", *args]
        return super().parse_args(ctx, args)

    def _subcommand_after_globals(self, args: list[str]) -> list[str] | None:
        """``lockrun --config F status`` is ``lockrun status --config F``.

        Global options (those every subcommand accepts) may come before a subcommand's
        name; they move behind it. Anything else first (``-n``, ``--``) is the bare form.
        """
        i = 0
        while i < len(args) and args[i].split("=", 1)[0] in GLOBAL_OPTION_NAMES:
            i += 1 if "=" in args[i] else 2
        if 0 < i < len(args) and args[i] in self.commands:
            return [args[i], *args[:i], *args[i + 1:]]
        return None


def _remember_global(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    name = param.name or param.opts[0]  # every global option has a name: --redis-url is redis_url
    if name == "ledger" and value is not None:  # --ledger or LOCKRUN_LEDGER: a device there is refused now
        problem = settings.output_path_problem(value, "", directories=True)
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
    """The settings every subcommand accepts (README, "Usage"); read back with :func:`_settings`."""
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


def _settings(ctx: click.Context, ttl: float | None = None) -> settings.Settings:
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
            _say(note)
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


# --- run ---------------------------------------------------------------------------------------


@cli.command(context_settings={**CONTEXT, "allow_interspersed_args": False})
@click.option("-n", "--name", type=LOCK_NAME,
              help="Lock name [default: cmd- + 12 hex of sha256 of the argv joined by NUL].")
@click.option("--ttl", type=seconds_type(minimum=1), envvar="LOCKRUN_TTL", show_envvar=True,
              help=f"Lease length in seconds, {settings.seconds_range(1)}; renewed every TTL/3 [default: 60].")
@click.option("-w", "--wait", type=seconds_type(allow_zero=True),
              help=f"Wait up to SECONDS ({settings.seconds_range(allow_zero=True)}) for a busy lock [default: 0 (give"
                   " up at once); with --replace, the holder's TTL + --kill-after].")
@click.option("--timeout", type=seconds_type(),
              help=f"Stop the command after SECONDS ({settings.seconds_range()}); exit 124.")
@click.option("--kill-after", type=seconds_type(), default=settings.DEFAULT_KILL_AFTER, show_default=True,
              help=f"Grace in seconds ({settings.seconds_range()}) between SIGTERM and SIGKILL when stopping the "
                   "command, also after a SIGTERM, SIGINT or SIGHUP forwarded to it.")
@click.option("--on-lost", type=click.Choice(["terminate", "continue"]), default="terminate", show_default=True,
              help="What to do when the lease cannot be kept (a --replace by another run always stops the "
                   "command).")
@click.option("-E", "--busy-exit-code", type=click.IntRange(0, 255), metavar="N", default=settings.DEFAULT_BUSY_EXIT,
              show_default=True, help="Exit code when the lock is busy (after --wait).")
@click.option("--once", "once", metavar="KEY",
              help="Idempotency key, expanded with strftime in --tz (report-%Y-%m-%d): skip (exit 0) if it already "
                   "succeeded. In a crontab, write % as \\%.")
@click.option("--once-per", type=click.Choice(list(settings.ONCE_PERIODS)), metavar="hour|day|week|month",
              help="Run at most once per hour, day, ISO week or month (in --tz): --once with the period's start "
                   "as the key (2026-12-01T14, 2026-12-01, 2026-W49, 2026-12); no % for cron to mangle. "
                   "Not with --once.")
@click.option("--remember", type=DURATION, default=settings.DEFAULT_REMEMBER, show_default=True,
              help=f"How long a succeeded --once key is kept (at most {settings.MAX_DURATION_TEXT}).")
@click.option("--slots", type=click.IntRange(1, settings.MAX_SLOTS), metavar="N", default=1, show_default=True,
              help=f"Allow up to N (1 to {settings.MAX_SLOTS}) holders of the name at once across hosts (a semaphore);"
                   " each holder has its own token and fencing token. Every caller of one name must use the same N.")
@click.option("--min-hold", type=MIN_HOLD,
              help=f"Keep the lock taken until at least DURATION (at most {settings.MAX_MIN_HOLD_TEXT}) after "
                   "acquisition, so a host whose clock lags cannot rerun a short job; status shows such a lock as "
                   "cooling (config: min_hold).")
@click.option("--replace", is_flag=True,
              help="Ask the current holder to stop (it exits 76 with ledger status preempted), wait for its "
                   "release, then run; never two at once.")
@click.option("--replicas", type=REPLICAS, metavar="N|all",
              help="WAIT for N Redis replicas (all: every replica in sync with the master) behind the acquire and "
                   "every renewal, in the same round trip; fewer acknowledgements at acquire: exit 69, the command "
                   "does not run; a renewal counts only when acknowledged. N: 0 to 100 [default: 0; config: "
                   "replicas].")
@click.option("--metrics-file", metavar="PATH", type=output_file(),
              help="Rewrite this Prometheus textfile (as `lockrun metrics` prints it) after the run; only a "
                   "regular file is replaced (a device, FIFO or socket there: exit 2).")
@click.option("--notify", "notify_urls", metavar="URL", multiple=True, type=ENDPOINT,
              help="POST a JSON document about the outcome to URL (repeatable; config: notify_urls).")
@click.option("--notify-on", metavar="STATUSES", type=NOTIFY_ON, default=",".join(settings.DEFAULT_NOTIFY_ON),
              show_default=True, help="Which outcomes --notify reports (comma-separated ledger statuses).")
@click.option("--notify-format", type=click.Choice(["json", "slack"]), default="json", show_default=True,
              help="slack: a {\"text\": ...} body for Slack-compatible incoming webhooks.")
@click.option("--ping", "ping_url", metavar="URL", type=ENDPOINT,
              help="healthchecks.io-style pings: URL/start, then URL (success), URL/EXIT_CODE or URL/fail.")
@click.option("--ping-on-busy", is_flag=True, help="A busy skip pings URL/fail (by default it pings nothing).")
@click.option("--capture-tail", metavar="SIZE", type=SIZE,
              help="Keep the last SIZE (512, 10k, 1m) of the command's output for the ledger, pings and webhooks.")
# Descendants that leave the command's group (README "What lockrun guarantees, and how": the command).
@click.option("--keep-detached", is_flag=True,
              help="Let processes that leave the command's process group (setsid, double forks, daemons) run on "
                   "after the run: they are not stopped, and outlive the lock's protection. By default everything "
                   "the command started is stopped, and reaped, before the lock is released.")
@click.option("-v", "--verbose", is_flag=True, help="Say what lockrun does (on stderr).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors; no warnings.")
# README "Never twice, whatever lockrun cannot see": an evicting Redis, one zone per name.
@click.option("--tz", "tz", type=ZONE, envvar="LOCKRUN_TZ", show_envvar=True, metavar="ZONE",
              help="The time zone (IANA name: UTC, Europe/Berlin) of --once-per periods and --once % keys; every "
                   "run of one name must use the same [default: config timezone, else this host's local zone].")
@click.option("--allow-eviction", is_flag=True,
              help="Run even on a Redis whose maxmemory-policy may evict keys (else exit 69): a held lock or a "
                   "--once mark could vanish and the job run twice (config: allow_eviction).")
@global_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="[--] COMMAND [ARG]...")
@click.pass_context
def run(
    ctx: click.Context, name: str | None, ttl: float | None, wait: float | None, timeout: float | None,
    kill_after: float, on_lost: str, busy_exit_code: int, once: str | None, once_per: str | None, remember: float,
    slots: int, min_hold: float | None, replace: bool, replicas: int | str | None, metrics_file: str | None,
    notify_urls: tuple[str, ...], notify_on: tuple[str, ...], notify_format: str, ping_url: str | None,
    ping_on_busy: bool, capture_tail: int | None, verbose: bool, quiet: bool, tz: Zone | None,
    allow_eviction: bool, keep_detached: bool, command: tuple[str, ...],
) -> NoReturn:
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
    from lockrun.backends.connect import call_timeout_for, open_backend
    from lockrun.run.runner import Run, RunOptions

    argv = list(command)
    resolved = _settings(ctx, ttl)
    if slots > 1 and (replace or min_hold is not None):
        raise click.UsageError("--slots cannot be combined with --replace or --min-hold (yet)", ctx=ctx)
    if slots > 1 and (once is not None or once_per is not None):
        # A --once key is checked as a holder starts and marked done as it ends: N holders at once
        # would all find the period's work not done yet, and all do it.
        raise click.UsageError(f"--slots {slots} cannot be combined with --once or --once-per: {slots} holders could"
                               " run the same key's work at the same time", ctx=ctx)
    if once is not None and once_per is not None:
        raise click.UsageError("--once and --once-per cannot be combined: --once-per is --once with the period's"
                               " start as the key; pick one", ctx=ctx)
    # Only a key that depends on the time depends on a zone (README "One zone per name").
    zone = _once_zone(ctx, resolved, tz) if once_per is not None or (once and zones.is_time_derived(once)) else None
    once_key = settings.expand_once_key(once, zone) if once is not None else None
    if once_per is not None:
        once_key = settings.once_key_for_period(once_per, zone=zone)
    replicas = _replicas_for(resolved, replicas)
    if not resolved.redis_url:
        _refuse_a_lock_held_in_the_old_place(resolved, name or settings.default_name(argv), slots)
    options = RunOptions(
        argv=argv,
        name=name or settings.default_name(argv),
        ttl=resolved.ttl,
        wait=wait if wait is not None else (None if replace else 0.0),
        timeout=timeout,
        kill_after=kill_after,
        on_lost=on_lost,
        busy_exit_code=busy_exit_code,
        once_key=once_key,
        remember=remember,
        capture_tail=capture_tail,
        notify_urls=tuple(notify_urls) or resolved.notify_urls,
        notify_on=notify_on,
        notify_slack=notify_format == "slack",
        ping_url=ping_url,
        ping_on_busy=ping_on_busy,
        min_hold=(min_hold if min_hold is not None else resolved.min_hold) if slots == 1 else None,
        replace=replace,
        slots=slots,
        call_timeout=call_timeout_for(resolved.ttl, resolved.socket_timeout),
        once_zone=zone,
        keep_detached=keep_detached,
    )

    # `lockrun -v status`: a run option first makes `status` the command to run. When no such
    # program exists, say where lockrun's own subcommand wants its options.
    misplaced = argv[0] in cli.commands

    def report(level: str, message: str) -> None:
        if (level == "info" and not verbose) or (level == "warn" and quiet):
            return
        if level == "error" and misplaced and message.endswith(": command not found in PATH"):
            message += f" (for lockrun's own {argv[0]!r}, put it first: lockrun {argv[0]} [OPTIONS])"
        _say(message)

    outcome = Run(
        options,
        backend_factory=lambda timeout_s: open_backend(
            resolved, timeout_s, call_timeout_for(resolved.ttl, resolved.connect_timeout), replicas=replicas,
            allow_eviction=allow_eviction or resolved.allow_eviction,
        ),
        ledger_path=resolved.ledger_path,
        backend_name=resolved.backend_name,
        report=report,
        ledger_keep_days=resolved.ledger_keep_days,
        metrics_file=Path(metrics_file) if metrics_file else resolved.metrics_file,
        backend_where=resolved.backend_where,
        backend_from=resolved.backend_from,
    ).execute()
    ctx.exit(outcome.exit_code)


def _once_zone(ctx: click.Context, resolved: settings.Settings, flag: Zone | None) -> Zone:
    """The zone of this run's time-derived --once key: --tz or LOCKRUN_TZ, else the config file's
    ``timezone``, else the host's local zone (named: zones.local_zone)."""
    if flag is not None:
        from_env = ctx.get_parameter_source("tz") == click.core.ParameterSource.ENVIRONMENT
        return flag._replace(source="LOCKRUN_TZ" if from_env else "--tz")
    if resolved.timezone:
        return zones.parse_zone(resolved.timezone, "timezone", f"timezone in {resolved.config_path}")
    return zones.local_zone()


def _refuse_a_lock_held_in_the_old_place(resolved: settings.Settings, name: str, slots: int) -> None:
    """An older lockrun, started from a shell that set XDG_STATE_HOME, keeps its local locks under
    it: while one of those holds this name, a run here would be the job's second copy."""
    from lockrun.config.state_home import legacy_holder
    from lockrun.core.errors import BackendUnavailable

    held = legacy_holder(resolved.state_dir, name, slots)
    if held:
        raise BackendUnavailable(
            f"{name!r} is held through {held}, where a lockrun that followed $XDG_STATE_HOME (an older version)"
            f" keeps its locks; not running it a second time (this lockrun keeps them in {resolved.state_dir},"
            " for cron and shells alike)"
        )


def _replicas_for(resolved: settings.Settings, flag: int | str | None) -> int | str:
    """--replicas, else the config file's ``replicas``; only a Redis backend has replicas to wait for."""
    replicas = flag if flag is not None else resolved.replicas
    if replicas and not resolved.redis_url:
        reason = "the local backend has no replicas to wait for; configure a Redis URL, or drop it"
        if flag is not None:
            raise click.UsageError(f"--replicas {replicas} needs a Redis backend: {reason}")
        raise ConfigError(
            f"config file {resolved.config_path}: replicas = {replicas!r} needs a Redis backend: {reason}"
        )
    return replicas


# --- status, unlock, history, prune ----------------------------------------------------------------


def _open_ledger_for_reading(path: Path, required: bool = True) -> Ledger | None:
    """The ledger if there is one (None if there is none yet).

    One that exists but cannot be read is an error (exit 1) for the commands whose whole
    job is the ledger; ``status`` (``required=False``) only warns and shows the backend.
    """
    import os

    from lockrun.ledger.store import Ledger
    from lockrun.system import host

    try:
        if not os.path.lexists(path):
            _check_ledger_directory(path.parent)  # no runs yet, or a directory no run could write in
            return None
        return Ledger(path, known_dead=host.known_dead).open(create=False)
    except LedgerError as exc:
        if required:
            raise LedgerError(f"cannot read the run ledger: {exc}") from None
        _say(f"warning: cannot read the run ledger ({exc})")
        return None


def _check_ledger_directory(folder: Path) -> None:
    """Raise LedgerError when the ledger's directory exists but no run could keep a ledger there
    (a file, a dangling link, writable by others): "no runs recorded" would hide the cause."""
    import os

    from lockrun.system.safefs import UnsafePath, check_ancestors, private_dir

    try:
        if not os.path.lexists(folder):
            # Nothing has run on this host yet, or no run could: one below a directory someone
            # else controls is refused (exit 69), and "no runs recorded" would hide why.
            check_ancestors(folder, "the ledger's directory")
            return
        private_dir(folder, "the ledger's directory", create=False)
    except UnsafePath as exc:
        raise LedgerError(str(exc)) from None


def _other_backend_hint(book: Ledger | None, resolved: settings.Settings, names: list[str] | None) -> str | None:
    """One line when this host's recent runs used another backend than this shell (see backend_hint)."""
    from lockrun.views.backend_hint import other_backend_hint

    return other_backend_hint(book, resolved.backend_name, resolved.backend_where, resolved.backend_from, names)


def complete_lock_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion: the names of held locks; silently nothing when the backend is unreachable."""
    try:
        from lockrun.backends.connect import open_backend

        backend = open_backend(_settings(ctx), 0.5)
        try:
            names = backend.lock_names()
        finally:
            backend.close()
    except Exception:  # noqa: BLE001 - completion must never print an error
        return []
    return [name for name in names if name.startswith(incomplete)]


@cli.command(context_settings=CONTEXT)
@click.argument("names", nargs=-1, type=LOCK_NAME, metavar="[NAME]...", shell_complete=complete_lock_names)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {backend, locks: [...]}, one entry per lock.")
@global_options
@click.pass_context
def status(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> NoReturn:
    """Show who holds which lock, whether the holder is alive, and the last run.

    \b
      lockrun status                 # every held lock
      lockrun status nightly-dump    # one lock, held or not
      lockrun status --json

    A holder is a zombie when its process is certainly gone (its pid in this
    machine's boot and PID namespace, or an earlier boot of this machine), or
    its heartbeat has missed two renewals by the Redis server's clock; a local
    lock's holder never is. A lock whose record lockrun did not
    write is malformed, with the reason. A Redis that may evict keys
    (maxmemory-policy) is named in a warning line. Exits 69 when the backend is
    unreachable, after printing what the ledger knows. When this host's recent
    runs used another backend than this shell, one line on stderr says how
    they were configured (status, history and unlock alike).
    """
    from lockrun.backends.connect import open_backend
    from lockrun.render import tables as render
    from lockrun.views.status import status_view

    resolved = _settings(ctx)
    backend = open_backend(resolved, resolved.socket_timeout or 5.0, resolved.connect_timeout)
    book = _open_ledger_for_reading(resolved.ledger_path, required=False)
    wanted = list(names) if names else None
    evicting: list[str] = []
    try:
        view = status_view(backend, book, wanted)
        if view.unreachable is None:
            evicting = _evicting_servers(backend)
    finally:
        backend.close()
        hint = _other_backend_hint(book, resolved, wanted)
        if book is not None:
            book.close()
    from lockrun.system.own_output import OutputFailed

    output_failed = None
    try:
        if as_json:
            render.print_json({"backend": backend.name, "locks": view.locks})
        else:
            render.status_table(backend.name, resolved.redacted_url or "", view.locks,
                                unreachable=view.unreachable is not None, notes=view.notes)
        sys.stdout.flush()
    except OutputFailed as exc:  # the lines below and exit 69 still matter more than the table
        output_failed = exc
    if hint:
        _say(hint)
    for warning in evicting:
        _say(warning)
    if view.unreachable is not None:
        if output_failed is not None and not output_failed.broken_pipe:
            _say(output_failed.reason)
        raise view.unreachable
    if output_failed is not None:
        raise output_failed
    ctx.exit(0)


def _evicting_servers(backend: Backend) -> list[str]:
    """One warning line per Redis server that may evict keys (README "A Redis that evicts keys"):
    one INFO memory per server, after the locks were read."""
    if backend.name != "redis":
        return []
    from lockrun.backends.redis.backend import RedisBackend
    from lockrun.backends.redis.eviction import status_warning

    if not isinstance(backend, RedisBackend):
        return []

    return [status_warning(found) for found in backend.evicting_servers()]


@cli.command(context_settings=CONTEXT)
@click.argument("name", type=LOCK_NAME, shell_complete=complete_lock_names)
@click.option("--force", is_flag=True, help="Clear it even if the holder looks alive (its command is then stopped).")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--token", "token_prefix", metavar="PREFIX", help="With --slots: the holder whose token starts so.")
@click.option("--all", "every_holder", is_flag=True, help="With --slots: every holder (live ones only with --force).")
@global_options
@click.pass_context
def unlock(
    ctx: click.Context, name: str, force: bool, yes: bool, token_prefix: str | None, every_holder: bool
) -> NoReturn:
    """Clear a lock whose holder is proven dead, never a live one unless --force.

    \b
      lockrun unlock sync-invoices          # shows the holder, asks, clears a dead one
      lockrun unlock sync-invoices --yes    # no question (scripts)
      lockrun unlock sync-invoices --force  # clear a live holder too
      lockrun unlock batch --token 3f2a     # one holder of a --slots lock

    Only the exact token that was inspected is deleted: a lock taken again in
    the meantime is left alone. A lock cooling after --min-hold, or a malformed
    one no lockrun run can hold (a Redis key of another type), is cleared
    without --force (nothing runs under it). A holder whose heartbeat alone
    is stale (a zombie in status) needs --force: one cut off from Redis still
    runs its command until its lease expires. Exits 0 when the lock is gone
    afterwards, 1 when it refused.
    """
    from lockrun.backends.connect import open_backend
    from lockrun.views import unlock as unlocking

    resolved = _settings(ctx)
    try:  # the hint is a courtesy: a ledger that cannot be read says nothing here
        book = _open_ledger_for_reading(resolved.ledger_path)
    except LedgerError:
        book = None
    try:
        hint = _other_backend_hint(book, resolved, [name])
    finally:
        if book is not None:
            book.close()
    if hint:  # before anything else: "not held" may only mean "not held *here*"
        _say(hint)
    backend = open_backend(resolved, resolved.socket_timeout or 5.0, resolved.connect_timeout)
    argv = ["lockrun", "unlock", name] + (["--force"] if force else [])
    try:
        holders = unlocking.inspect_all(backend, name)
        if token_prefix is not None:
            holders = [h for h in holders if (h.holder.token or "").startswith(token_prefix)]
            if len(holders) > 1:
                _say(f"--token {token_prefix!r} matches {len(holders)} holders of {name!r}: give more of it")
                ctx.exit(1)
        if not holders:
            click.echo(f"{name!r} is not held" + (f" by a token starting {token_prefix!r}" if token_prefix else ""))
            ctx.exit(0)
        if len(holders) > 1 and not every_holder:
            for inspection in holders:
                for line in inspection.describe():
                    click.echo(printable(line))
            _say(f"refusing to guess: {name!r} has {len(holders)} holders (--slots); pick one with --token PREFIX,"
                 " or clear every clearable one with --all")
            ctx.exit(1)
        code = 0
        for inspection in holders:
            code = max(code, _unlock_one(backend, inspection, force, yes, resolved.ledger_path, argv))
    finally:
        backend.close()
    ctx.exit(code)


def _unlock_one(
    backend: Backend, inspection: Inspection, force: bool, yes: bool, ledger_path: Path, argv: list[str]
) -> int:
    """Show one holder, judge it, ask, clear exactly its token. Returns the exit code."""
    from lockrun.views import unlock as unlocking

    name = inspection.name
    for line in inspection.describe():
        click.echo(printable(line))  # the holder as Redis or its file describes it: anyone could have written it
    if not inspection.clearable and not force:
        _say(f"refusing to clear {name!r}: {inspection.refusal()}, and clearing it could run the job twice;"
             " if you are sure, run: lockrun unlock --force " + name)
        return 1
    if not yes:
        if not sys.stdin.isatty():
            _say(f"refusing to clear {name!r} without confirmation: no terminal to ask on; pass --yes")
            return 1
        question = "Clear it?" if inspection.clearable else "Clear this live lock? Its command will be stopped"
        if not click.confirm(question, default=False):
            _say(f"{name!r} was not cleared")
            return 1
    cleared, warning = unlocking.clear(backend, inspection, ledger_path, argv)
    if warning:
        _say(warning)
    if cleared:
        click.echo(f"cleared {name!r}")
        return 0
    tokens = {h.holder.token for h in unlocking.inspect_all(backend, name)}
    if inspection.holder.token not in tokens and (inspection.holder.slotted or not tokens):
        click.echo(f"{name!r} was released meanwhile; nothing left to clear")
        return 0
    _say(f"{name!r} changed hands after it was inspected; nothing was cleared")
    return 1


STATUS_CHOICES = [status.value for status in Status]


@cli.command(context_settings=CONTEXT)
@click.argument("name", required=False, type=LOCK_NAME, shell_complete=complete_lock_names)
@click.option("--limit", type=click.IntRange(1, settings.MAX_HISTORY_LIMIT), metavar="N", default=20,
              show_default=True, help=f"Show at most N runs (1 to {settings.MAX_HISTORY_LIMIT}).")
@click.option("--status", "status_filter", type=click.Choice(STATUS_CHOICES), help="Only runs with this status.")
@click.option("--since", type=DURATION,
              help=f"Only runs started within DURATION (90m, 12h, 7d; at most {settings.MAX_DURATION_TEXT}).")
@click.option("--fleet", is_flag=True,
              help="Every host's runs, from the fleet record in Redis (local backend: this host's ledger).")
@click.option("--host", "host_filter", metavar="HOST",
              help="Only runs recorded by this host name (useful with --fleet).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: an array of runs, newest first.")
@global_options
@click.pass_context
def history(
    ctx: click.Context, name: str | None, limit: int, status_filter: str | None, since: float | None, fleet: bool,
    host_filter: str | None, as_json: bool,
) -> NoReturn:
    """Show the runs recorded in the ledger, newest first.

    \b
      lockrun history                           # the last 20 runs on this host
      lockrun history sync-invoices --since 7d
      lockrun history --status failed --json
      lockrun history --fleet --host app-2      # every host's runs, from Redis

    Without --fleet it needs no backend: it reads this host's ledger only, and
    exits 1 when the ledger exists but cannot be read. With --fleet it reads
    the runs every host recorded in Redis; exits 69 when Redis is unreachable.
    EXIT is the exit status lockrun returned (what cron saw), then how the
    command ended when that says more: 124 (sig 15) is a --timeout.
    """
    from lockrun.render import tables as render

    resolved = _settings(ctx)
    since_iso = iso_ago(since) if since is not None else None
    hint = None
    if fleet and resolved.redis_url:
        from lockrun.views import sources

        rows = sources.fleet_history(resolved, name, host=host_filter, limit=limit, status=status_filter,
                                     since_s=since)
    else:
        book = _open_ledger_for_reading(resolved.ledger_path)
        rows = []
        if book is not None:
            try:
                rows = book.history(name, limit=limit, status=status_filter, since=since_iso, host=host_filter)
                hint = _other_backend_hint(book, resolved, [name] if name else None)
            finally:
                book.close()
    if as_json:
        render.print_json(rows)
    else:
        render.history_table(rows)
    if hint:
        _say(hint)
    ctx.exit(0)


@cli.command(context_settings=CONTEXT)
@click.argument("names", nargs=-1, type=LOCK_NAME, metavar="[NAME]...", shell_complete=complete_lock_names)
@click.option("--since", type=MOMENT, default="24h", show_default=True,
              help="Start of the window: a duration before --until (90m, 24h, 7d), or a time (yesterday, 14:00, "
                   "2026-11-30, '2026-11-30 14:00', 2026-11-30T14:00Z; local time unless it says otherwise).")
@click.option("--until", type=MOMENT, help="End of the window: a time, or a duration ago (2h) [default: now].")
@click.option("--fleet", is_flag=True,
              help="Every host's runs, from the fleet record in Redis (local backend: this host's ledger).")
@click.option("--host", "host_filter", type=HOST, metavar="H", help="Only runs on host H.")
@click.option("--by-host", is_flag=True, help="One row per name and host (with --fleet: which host did the work).")
@click.option("--width", type=click.IntRange(*settings.TIMELINE_WIDTHS), metavar="N",
              help="Characters per line [default: the terminal's, else $COLUMNS, else 100].")
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

    Bars are coloured by status (letters without colour: S succeeded, F failed,
    T timeout, L lost or preempted, K killed, R running, A abandoned, E error,
    U unavailable); a dot marks a busy skip. Runs of one name that overlap are
    drawn on stacked rows. Each row ends with its runs, failures, skips, median
    and longest duration, and the last status. Reads the local ledger; with
    --fleet, every host's runs from the fleet record in Redis (exit 69 when it
    is unreachable).
    """
    from lockrun.render import timeline_svg
    from lockrun.render import timeline_text as drawing
    from lockrun.views import sources, timeline_charts
    from lockrun.views import timeline as tl
    from lockrun.views.timeline_window import resolve_window

    resolved = _settings(ctx)
    window = resolve_window(since, until)
    wanted = list(names) or None
    from_fleet = fleet and bool(resolved.redis_url)
    book = None if from_fleet else _open_ledger_for_reading(resolved.ledger_path)
    try:
        if from_fleet:
            rows = sources.fleet_rows_in(resolved, window, wanted)
            lanes = tl.lanes_from_rows(rows, window, host=host_filter, by_host=by_host)
            labels, charts = [tl.label(lane.name, lane.host) for lane in lanes], tl.layout(lanes, window)
        else:
            labels, charts = sources.ledger_timeline(book, window, wanted, host_filter, by_host,
                                                     per_run_below=timeline_svg.SVG_PER_RUN_BELOW if svg_path else 0)
        if svg_path is not None:
            from lockrun.system.host import hostname

            source = "the fleet record (every host)" if from_fleet else f"the ledger of {hostname()}"
            details = None if book is None else timeline_charts.run_details(book, host_filter)
            document = timeline_svg.svg(labels, charts, window, subtitle=f"runs recorded in {source}", details=details)
            try:
                _write_file(svg_path, document)
            except OSError as exc:
                _say(f"cannot write the SVG to {svg_path}: {exc.strerror or exc}")
                ctx.exit(1)
        elif not labels:
            drawing.print_empty(window, wanted)
        else:
            drawing.print_text(labels, charts, window, width or drawing.default_width())
    finally:
        if book is not None:
            book.close()
    ctx.exit(0)


def _write_file(path: str, text: str) -> None:
    """``-`` is standard output; a file is replaced whole (written beside it, then renamed)."""
    if path == "-":
        sys.stdout.write(text)
        return
    import os

    from lockrun.system.safefs import write_atomically

    umask = os.umask(0o022)
    os.umask(umask)
    write_atomically(path, text.encode("utf-8"), mode=0o666 & ~umask)  # as an ordinary new file would be


@cli.command(context_settings=CONTEXT)
@click.option("--older-than", type=DURATION, required=True,
              help=f"Delete finished runs older than DURATION (90d; at most {settings.MAX_DURATION_TEXT}).")
@global_options
@click.pass_context
def prune(ctx: click.Context, older_than: float) -> NoReturn:
    """Delete old runs from the ledger (never running ones).

    \b
      lockrun prune --older-than 90d

    The config key ledger_keep_days does this automatically, at most once an hour.
    """
    import os

    from lockrun.ledger.store import Ledger

    resolved = _settings(ctx)
    if not os.path.lexists(resolved.ledger_path):  # a link is not "no ledger": opening it says what it is
        _check_ledger_directory(resolved.ledger_path.parent)
        click.echo(f"no ledger at {resolved.ledger_path}; nothing to prune")
        ctx.exit(0)
    book = Ledger(resolved.ledger_path).open(create=False)
    try:
        count = book.prune(iso_ago(older_than))
    finally:
        book.close()
    click.echo(f"pruned {count} run{'s' if count != 1 else ''} older than {_duration_text(older_than)}"
               f" from {resolved.ledger_path}")
    ctx.exit(0)


RUN_ID = Validated("RUN_ID", lambda value, what: settings.validate_run_id(value), echo_value=False)


@cli.command(context_settings=CONTEXT)
@click.argument("run_id", type=RUN_ID)
@click.option("--fleet", is_flag=True,
              help="Look in the fleet record in Redis too: a run of any host (its tail if it is the name's last run).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: the run as in history --json, plus output_tail.")
@global_options
@click.pass_context
def show(ctx: click.Context, run_id: str, fleet: bool, as_json: bool) -> NoReturn:
    """Show one run from the ledger, with its output tail (--capture-tail).

    \b
      lockrun show 3f2a9c1e          # a prefix of the run id is enough
      lockrun show 3f2a9c1e --json
      lockrun show 3f2a9c1e --fleet  # a run of any host

    Exits 1 when no run has that id; with --fleet, 69 when Redis is unreachable.
    """
    from lockrun.render import tables as render

    resolved = _settings(ctx)
    book = _open_ledger_for_reading(resolved.ledger_path)
    found = None
    if book is not None:
        try:
            found = book.find_run(run_id)
        finally:
            book.close()
    events = None
    if found is None and fleet and resolved.redis_url:
        from lockrun.views import fleet as fleet_record
        from lockrun.views import sources

        try:
            seen = sources.fleet_run(resolved, run_id)
        except fleet_record.FleetReadError as exc:
            _say(str(exc))
            ctx.exit(1)
        if seen is not None:
            row, tail, events = seen
            found = (row, tail)
    if found is None:
        where = f"the ledger {resolved.ledger_path}" + (" or the fleet record" if fleet and resolved.redis_url else "")
        _say(f"no run {run_id!r} in {where}")
        ctx.exit(1)
    row, tail = found
    if as_json:
        render.print_json({**row, "output_tail": tail, **({"events": events} if events is not None else {})})
    else:
        render.run_details(row, tail)
    ctx.exit(0)


@cli.command(context_settings=CONTEXT)
@click.option("--fleet", is_flag=True,
              help="Every host's runs, from the fleet record in Redis (local backend: this host's ledger).")
@global_options
@click.pass_context
def metrics(ctx: click.Context, fleet: bool) -> NoReturn:
    """Print the ledger as Prometheus metrics (text exposition format).

    \b
      lockrun metrics > /var/lib/node_exporter/textfile/lockrun.prom
      lockrun -n job --metrics-file /var/lib/node_exporter/textfile/lockrun.prom -- /opt/job
      lockrun metrics --fleet        # every host's runs, from Redis: one scrape for the fleet

    Per lock name: lockrun_last_run_timestamp_seconds,
    lockrun_last_success_timestamp_seconds, lockrun_last_duration_seconds,
    lockrun_last_exit_code, lockrun_last_exit_status (as cron saw it),
    lockrun_runs_total{status=...} and lockrun_lock_lost_at_release_total
    (runs whose release found the lock no longer theirs). With --fleet the
    counts include busy and duplicate skips of every host; exits 69 when Redis
    is unreachable.
    """
    from lockrun.ledger import metrics as exposition

    resolved = _settings(ctx)
    if fleet and resolved.redis_url:
        from lockrun.views import sources

        sys.stdout.write(exposition.exposition(sources.fleet_facts(resolved)))
        ctx.exit(0)
    book = _open_ledger_for_reading(resolved.ledger_path)
    if book is None:
        from lockrun.ledger.store import Ledger

        book = Ledger(resolved.ledger_path).open()  # an empty ledger: the families, no samples
    try:
        sys.stdout.write(exposition.exposition(exposition.ledger_facts(book)))
    finally:
        book.close()
    ctx.exit(0)


def _duration_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


# --- entry point ---------------------------------------------------------------------------------


def _one_line(exc: click.ClickException) -> str:
    message = " ".join(exc.format_message().split())
    command = None
    if isinstance(exc, click.UsageError) and exc.ctx is not None and exc.ctx.command is not cli:
        command = exc.ctx.command.name
    hint = f"lockrun {command} --help" if command else "lockrun --help"
    return f"{message} (see '{hint}')"


def _reserve_standard_streams() -> set[int]:
    """Put /dev/null, close-on-exec, on any of fd 0-2 lockrun was started without, before anything
    opens a file: none of lockrun's own files (a lock, the ledger, a pipe) can then land there and
    take the command's output (SQLite would plant a /dev/null of its own there, inherited), and
    the command still finds those streams closed, as it would without lockrun. Returns them."""
    import os

    closed = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.add(fd)
            opened = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)  # the lowest free descriptor: fd
            if opened != fd:
                os.close(opened)
    return closed


def main(argv: list[str] | None = None) -> None:
    from lockrun.system import own_output

    closed = _reserve_standard_streams()
    own_output.guard(closed_at_start=1 in closed)  # lockrun's own output failing: one line, exit 1
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        code = cli.main(args=args, prog_name="lockrun", standalone_mode=False)
    except own_output.OutputFailed as exc:
        code = own_output.failed(exc, 0, _say)
    except click.UsageError as exc:
        _say(_one_line(exc))
        code = ExitCode.USAGE
    except click.ClickException as exc:
        _say(_one_line(exc))
        code = exc.exit_code
    except click.Abort:
        code = ExitCode.SIGNAL_BASE + 2
    except LockrunError as exc:
        _say(str(exc))
        code = exc.exit_code
    except LedgerError as exc:  # only commands whose whole job is the ledger let this through
        _say(str(exc))
        code = 1
    except Exception as exc:  # noqa: BLE001 - the user gets one line, never a traceback
        _say(f"internal error: {exc!r}")
        code = ExitCode.INTERNAL
    sys.exit(own_output.finish(int(code or 0), _say))
