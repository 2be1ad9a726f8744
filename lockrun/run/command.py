"""From the run command's flags to one :class:`~lockrun.run.runner.Run`: the flags that cannot go
together, the zone and key of ``--once``, ``--replicas`` against the backend, and the options
the runner takes. The CLI parses the flags into :class:`RunFlags` and calls :func:`plan_run`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from lockrun.config import settings, values
from lockrun.config.once import expand_once_key, once_key_for_period
from lockrun.core import zones
from lockrun.core.clock import exact_duration
from lockrun.core.errors import BackendUnavailable, ConfigError, Report, UsageError

if TYPE_CHECKING:
    from lockrun.core.zones import Zone
    from lockrun.run.runner import Run


class RunFlags(NamedTuple):
    """``lockrun run``'s flags as parsed (docs/reference.md "Usage"); None where a flag was not given."""

    command: tuple[str, ...]
    name: str | None
    ttl: float | None
    wait: float | None
    timeout: float | None
    kill_after: float
    on_lost: str
    busy_exit_code: int
    once: str | None
    once_per: str | None
    remember: float
    slots: int
    min_hold: float | None
    replace: bool
    replicas: int | str | None
    metrics_file: str | None
    notify_urls: tuple[str, ...]
    notify_on: tuple[str, ...]
    notify_format: str
    ping_url: str | None
    ping_on_busy: bool
    capture_tail: int | None
    no_tail: bool
    output: str | None
    warn_after: float | None
    syslog: bool
    verbose: bool
    quiet: bool
    tz: Zone | None
    allow_eviction: bool
    keep_detached: bool
    once_every: float | None = None
    retry: int | None = None
    retry_delay: float | None = None
    jitter: float | None = None
    success_exit: tuple[int, ...] | None = None
    tz_source: str = "--tz"  # or LOCKRUN_TZ: where --tz's zone came from, for the mismatch line
    every: float | None = None  # --every: the declared cadence (docs/operating.md "Declaring a cadence")
    schedule: str | None = None  # --schedule: a 5-field cron expression, in --tz
    grace: float | None = None  # --grace


def check_combinations(flags: RunFlags) -> None:
    """UsageError (exit 2) for flags that cannot go together."""
    slots = flags.slots
    if slots > 1 and (flags.replace or flags.min_hold is not None):
        raise UsageError("--slots cannot be combined with --replace or --min-hold (yet)")
    if slots > 1 and (flags.once is not None or flags.once_per is not None):
        # A --once key is checked as a holder starts and marked done as it ends: N holders at once
        # would all find the period's work not done yet, and all do it.
        raise UsageError(f"--slots {slots} cannot be combined with --once or --once-per: {slots} holders could"
                         " run the same key's work at the same time")
    if slots > 1 and flags.once_every is not None:
        raise UsageError(f"--slots {slots} cannot be combined with --once-every: {slots} holders could all find"
                         " the last success old enough, and all run")
    if flags.no_tail and flags.capture_tail is not None:
        raise UsageError("--no-tail and --capture-tail cannot be combined: --capture-tail asks to keep output,"
                         " --no-tail to keep none; pick one")
    if flags.every is not None and flags.schedule is not None:
        raise UsageError("--every and --schedule cannot be combined: declare one cadence")
    if flags.grace is not None and flags.every is None and flags.schedule is None:
        raise UsageError("--grace widens a declared cadence: give --every or --schedule with it")
    if flags.keep_detached and flags.output == "on-failure":
        # Held output goes through lockrun's pump, which ends with lockrun: the daemon left running
        # would die of SIGPIPE at its next write (docs/operating.md "Output").
        raise UsageError("--keep-detached and --output on-failure cannot be combined: what the command leaves"
                         " running would write into lockrun's pump, which ends with lockrun; pick one")
    if flags.once is not None and flags.once_per is not None:
        raise UsageError("--once and --once-per cannot be combined: --once-per is --once with the period's"
                         " start as the key; pick one")


def plan_run(flags: RunFlags, resolved: settings.Settings, report: Report) -> Run:
    """The run these flags ask for, ready to execute. Raises UsageError (exit 2) for flags that
    cannot go together, ConfigError (78) for a config file that cannot, BackendUnavailable (69)
    for a lock an older lockrun holds in the old place."""
    from lockrun.backends.connect import call_timeout_for, open_backend
    from lockrun.run.runner import Run, RunOptions

    check_combinations(flags)
    argv = list(flags.command)
    name = flags.name or values.default_name(argv)
    once, once_per = flags.once, flags.once_per
    # Only a key that depends on the time depends on a zone (docs/guarantees.md "One zone per name").
    time_derived = once_per is not None or (once is not None and zones.is_time_derived(once))
    zone = once_zone(flags, resolved) if time_derived else None
    once_key = expand_once_key(once, zone) if once is not None else None
    if once_per is not None:
        once_key = once_key_for_period(once_per, zone=zone)
    replicas = replicas_for(resolved, flags.replicas)
    if flags.once_every is not None and resolved.redis_url and flags.once_every > resolved.fleet_keep_days * 86400:
        # The fleet record forgets a name that long after its last finished run: --once-every would run early.
        raise UsageError(f"--once-every {exact_duration(flags.once_every)} is longer than the fleet record keeps a"
                         f" name's last success (fleet_keep_days = {resolved.fleet_keep_days}): raise"
                         " fleet_keep_days in the config file, or shorten --once-every")
    cadence = declared_cadence(flags, resolved)
    if flags.metrics_file is None and resolved.metrics_file is not None:
        # The flag was checked as it was parsed (exit 2); the config file's, here: before the command runs.
        problem = values.metrics_file_problem(str(resolved.metrics_file), "metrics_file")
        if problem:
            raise ConfigError(f"config file {resolved.config_path}: {problem}")
    if not resolved.redis_url:
        refuse_a_lock_held_in_the_old_place(resolved, name, flags.slots)
    options = RunOptions(
        argv=argv,
        name=name,
        ttl=resolved.ttl,
        wait=flags.wait if flags.wait is not None else (None if flags.replace else 0.0),
        timeout=flags.timeout,
        kill_after=flags.kill_after,
        on_lost=flags.on_lost,
        busy_exit_code=flags.busy_exit_code,
        once_key=once_key,
        remember=flags.remember,
        capture_tail=flags.capture_tail,
        failure_tail=failure_tail_for(flags, resolved),
        # The config file's default does not hold under --keep-detached (its daemon would write into
        # the pump), as the default tail does not: output then passes through untouched.
        output_on_failure=(flags.output or ("always" if flags.keep_detached else resolved.output)) == "on-failure",
        warn_after=flags.warn_after,
        syslog=flags.syslog or resolved.syslog,
        notify_urls=tuple(flags.notify_urls) or resolved.notify_urls,
        notify_on=flags.notify_on,
        notify_slack=flags.notify_format == "slack",
        ping_url=flags.ping_url,
        ping_on_busy=flags.ping_on_busy,
        min_hold=(flags.min_hold if flags.min_hold is not None else resolved.min_hold) if flags.slots == 1 else None,
        replace=flags.replace,
        slots=flags.slots,
        call_timeout=call_timeout_for(resolved.ttl, resolved.socket_timeout),
        once_zone=zone,
        keep_detached=flags.keep_detached,
        once_every=flags.once_every,
        cadence=cadence,
        retry=flags.retry if flags.retry is not None else resolved.retry,
        retry_delay=flags.retry_delay if flags.retry_delay is not None else resolved.retry_delay,
        jitter=flags.jitter if flags.jitter is not None else resolved.jitter,
        success_exit=flags.success_exit if flags.success_exit is not None else resolved.success_exit,
        masking=resolved.masking,
    )
    allow_eviction = flags.allow_eviction or resolved.allow_eviction
    return Run(
        options,
        backend_factory=lambda timeout_s: open_backend(
            resolved, timeout_s, call_timeout_for(resolved.ttl, resolved.connect_timeout), replicas=replicas,
            allow_eviction=allow_eviction,
        ),
        ledger_path=resolved.ledger_path,
        backend_name=resolved.backend_name,
        report=report,
        ledger_keep_days=resolved.ledger_keep_days,
        metrics_file=Path(flags.metrics_file) if flags.metrics_file else resolved.metrics_file,
        backend_where=resolved.backend_where,
        backend_from=resolved.backend_from,
    )


def failure_tail_for(flags: RunFlags, resolved: settings.Settings) -> int | None:
    """How much of a failed run's output this host's ledger keeps without --capture-tail: the last
    4 KiB when lockrun's output is not a terminal (cron, systemd, a pipe), unless --no-tail or
    ``output_tail = false`` (docs/operating.md "Output"). On a terminal the person sees it, and the
    command keeps its terminal (a pipe instead would change what it prints). Nor under
    --keep-detached: a daemon the command leaves running would be left writing into lockrun's pump,
    which ends with lockrun (its next write would fail), instead of into cron's stream."""
    from lockrun.core.defaults import DEFAULT_FAILURE_TAIL
    from lockrun.run.capture import on_a_terminal

    if flags.capture_tail is not None or flags.no_tail or flags.keep_detached or not resolved.output_tail:
        return None
    if on_a_terminal():
        return None
    return DEFAULT_FAILURE_TAIL


def declared_cadence(flags: RunFlags, resolved: settings.Settings) -> str | None:
    """The run's declaration as stored (core/cadence), or None: --every, or --schedule in the zone
    --once would use (--tz, the config's timezone, else this host's local zone)."""
    if flags.every is None and flags.schedule is None:
        return None
    from lockrun.core.cadence import Cadence  # only runs that declare one import it
    from lockrun.core.defaults import DEFAULT_GRACE_S

    grace = flags.grace if flags.grace is not None else DEFAULT_GRACE_S
    if flags.every is not None:
        return Cadence(every_s=flags.every, grace_s=grace).to_json()
    if flags.schedule is not None:
        return Cadence(schedule=flags.schedule, tz=once_zone(flags, resolved).name, grace_s=grace).to_json()
    return None


def once_zone(flags: RunFlags, resolved: settings.Settings) -> Zone:
    """The zone of this run's time-derived --once key: --tz or LOCKRUN_TZ, else the config file's
    ``timezone``, else the host's local zone (named: zones.local_zone)."""
    if flags.tz is not None:
        return flags.tz._replace(source=flags.tz_source)
    if resolved.timezone:
        return zones.parse_zone(resolved.timezone, "timezone", f"timezone in {resolved.config_path}")
    return zones.local_zone()


def refuse_a_lock_held_in_the_old_place(resolved: settings.Settings, name: str, slots: int) -> None:
    """An older lockrun, started from a shell that set XDG_STATE_HOME, keeps its local locks under
    it: while one of those holds this name, a run here would be the job's second copy."""
    from lockrun.config.state_home import legacy_holder

    held = legacy_holder(resolved.state_dir, name, slots)
    if held:
        raise BackendUnavailable(
            f"{name!r} is held through {held}, where a lockrun that followed $XDG_STATE_HOME (an older version)"
            f" keeps its locks; not running it a second time (this lockrun keeps them in {resolved.state_dir},"
            " for cron and shells alike)"
        )


def replicas_for(resolved: settings.Settings, flag: int | str | None) -> int | str:
    """--replicas, else the config file's ``replicas``; only a Redis backend has replicas to wait for."""
    replicas = flag if flag is not None else resolved.replicas
    if replicas and not resolved.redis_url:
        reason = "the local backend has no replicas to wait for; configure a Redis URL, or drop it"
        if flag is not None:
            raise UsageError(f"--replicas {replicas} needs a Redis backend: {reason}")
        raise ConfigError(
            f"config file {resolved.config_path}: replicas = {replicas!r} needs a Redis backend: {reason}"
        )
    return replicas
