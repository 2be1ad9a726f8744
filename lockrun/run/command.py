"""From a resolved plan (config/resolve.py) and the command's argv to one
:class:`~lockrun.run.runner.Run`: the options that cannot go together, what the options come to
for this run (the ``--once`` key in its zone, the declared cadence, the tails, the masking, the
bound on one backend call) as one :class:`~lockrun.run.job.Job`, and the backend to open.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from lockrun.config import options as o
from lockrun.config import values
from lockrun.config.resolve import Plan
from lockrun.config.settings import Settings
from lockrun.core.clock import exact_duration
from lockrun.core.errors import ConfigError, Report, UsageError
from lockrun.run.job import Job

if TYPE_CHECKING:
    from lockrun.core.secret_names import Masking
    from lockrun.core.zones import Zone
    from lockrun.run.runner import Run


class _Conflict(NamedTuple):
    breaks: Callable[[Plan], object]  # true when the plan has it
    message: str  # {slots}: the plan's --slots
    options: tuple[o.Option[Any], ...]  # the settings involved: one set by the config file makes it exit 78


#: The options that cannot go together, checked in this order, on the values a run would use. Two
#: exceptions, where a value from the config file's top level (a default for every job) gives way
#: and the run takes the other (plan.explicit): ``min_hold`` under ``--slots``, and ``output`` under
#: ``--keep-detached``. A top-level ``grace`` applies to the jobs that declare a cadence, and a
#: top-level ``output_tail = false`` to the jobs that do not ask for a tail.
CONFLICTS = (
    _Conflict(lambda plan: plan[o.SLOTS] > 1 and (plan[o.REPLACE] or plan.explicit(o.MIN_HOLD) is not None),
              "--slots cannot be combined with --replace or --min-hold (yet)", (o.SLOTS, o.REPLACE, o.MIN_HOLD)),
    # A --once key is checked as a holder starts and marked done as it ends: N holders at once
    # would all find the period's work not done yet, and all do it.
    _Conflict(lambda plan: plan[o.SLOTS] > 1 and (plan[o.ONCE] is not None or plan[o.ONCE_PER] is not None),
              "--slots {slots} cannot be combined with --once or --once-per: {slots} holders could"
              " run the same key's work at the same time", (o.SLOTS, o.ONCE, o.ONCE_PER)),
    _Conflict(lambda plan: plan[o.SLOTS] > 1 and plan[o.ONCE_EVERY] is not None,
              "--slots {slots} cannot be combined with --once-every: {slots} holders could all find"
              " the last success old enough, and all run", (o.SLOTS, o.ONCE_EVERY)),
    _Conflict(lambda plan: plan.explicit(o.OUTPUT_TAIL) is False and plan[o.CAPTURE_TAIL] is not None,
              "--no-tail and --capture-tail cannot be combined: --capture-tail asks to keep output,"
              " --no-tail to keep none; pick one", (o.OUTPUT_TAIL, o.CAPTURE_TAIL)),
    _Conflict(lambda plan: plan[o.EVERY] is not None and plan[o.SCHEDULE] is not None,
              "--every and --schedule cannot be combined: declare one cadence", (o.EVERY, o.SCHEDULE)),
    _Conflict(lambda plan: plan.explicit(o.GRACE) is not None and plan[o.EVERY] is None and plan[o.SCHEDULE] is None,
              "--grace widens a declared cadence: give --every or --schedule with it", (o.GRACE,)),
    # Held output goes through lockrun's pump, which ends with lockrun: the daemon left running
    # would die of SIGPIPE at its next write (docs/operating.md "Output").
    _Conflict(lambda plan: plan[o.KEEP_DETACHED] and plan.explicit(o.OUTPUT) == "on-failure",
              "--keep-detached and --output on-failure cannot be combined: what the command leaves"
              " running would write into lockrun's pump, which ends with lockrun; pick one",
              (o.KEEP_DETACHED, o.OUTPUT)),
    _Conflict(lambda plan: plan[o.ONCE] is not None and plan[o.ONCE_PER] is not None,
              "--once and --once-per cannot be combined: --once-per is --once with the period's"
              " start as the key; pick one", (o.ONCE, o.ONCE_PER)),
)


def check_combinations(plan: Plan) -> None:
    """For options that cannot go together (:data:`CONFLICTS`): UsageError (exit 2) when they
    were all given for this run, ConfigError (78) naming the file when the file set one of them."""
    for conflict in CONFLICTS:
        if conflict.breaks(plan):
            message = conflict.message.format(slots=plan[o.SLOTS])
            in_the_file = [option for option in conflict.options
                           if plan.from_the_file(option) and _takes_part(plan, option)]
            if in_the_file:
                raise ConfigError(f"config file {plan.source(in_the_file[0])}: {message}"
                                  f" ({', '.join(plan.named_source(option) for option in in_the_file)})")
            raise UsageError(message)


class Checked(NamedTuple):
    """What a plan comes to once checked, before a backend is opened."""

    replicas: int | str
    metrics_file: Path | None
    once_zone: Zone | None
    once_key: str | None
    cadence: str | None
    masking: Masking


#: The settings whose top-level value gives way (see CONFLICTS): only their own value takes part.
_GIVE_WAY = frozenset({o.MIN_HOLD.key, o.OUTPUT.key, o.GRACE.key, o.OUTPUT_TAIL.key})


def _takes_part(plan: Plan, option: o.Option[Any]) -> bool:
    """Whether ``option`` is one of the settings that make a conflict: set to other than its
    default (``replace = false`` is not), and not a top-level default that gives way."""
    value = plan.explicit(option) if option.key in _GIVE_WAY else plan[option]
    return value is not None and value is not False and value != option.default


def check_plan(plan: Plan, settings: Settings) -> Checked:
    """Every check a run makes before it opens a backend, in one place (``lockrun config`` makes
    them too, so that what it shows is what a run would take): the combinations, the replicas,
    --once-every, the metrics file, the --once key, the cadence and the masking rules."""
    check_combinations(plan)
    replicas = replicas_for(plan, settings)
    check_once_every(plan, settings)
    metrics_file = metrics_file_for(plan)
    zone, once_key = once_key_for(plan)
    return Checked(replicas, metrics_file, zone, once_key, declared_cadence(plan), masking_for(plan))


def plan_run(plan: Plan, argv: list[str], report: Report) -> Run:
    """The run this plan asks for, ready to execute. Raises UsageError (exit 2) for options that
    cannot go together, ConfigError (78) for a config file whose values cannot."""
    from lockrun.backends.connect import call_timeout_for, open_backend
    from lockrun.run.runner import Run

    settings = Settings(plan)
    checked = check_plan(plan, settings)
    replicas, metrics_file = checked.replicas, checked.metrics_file
    name = plan.name or values.default_name(argv)
    job = Job(argv, name, once_key=checked.once_key, once_zone=checked.once_zone, cadence=checked.cadence,
              failure_tail=failure_tail_for(plan), output_on_failure=output_on_failure(plan),
              masking=checked.masking, wait=wait_for(plan), min_hold=min_hold_for(plan),
              call_timeout=call_timeout_for(settings.ttl, settings.socket_timeout))
    allow_eviction = plan[o.ALLOW_EVICTION]
    return Run(
        plan, job,
        backend_factory=lambda timeout_s: open_backend(
            settings, timeout_s, call_timeout_for(settings.ttl, settings.connect_timeout), replicas=replicas,
            allow_eviction=allow_eviction,
        ),
        ledger_path=settings.ledger_path,
        backend_name=settings.backend_name,
        report=report,
        ledger_keep_days=settings.ledger_keep_days,
        metrics_file=metrics_file,
        backend_where=settings.backend_where,
        backend_from=settings.backend_from,
    )


def wait_for(plan: Plan) -> float | None:
    """--wait; without it 0 (give up at once), or with --replace None: the holder's TTL + --kill-after."""
    wait = plan[o.WAIT]
    if wait is not None:
        return wait
    return None if plan[o.REPLACE] else 0.0


def min_hold_for(plan: Plan) -> float | None:
    """--min-hold (or the config's ``min_hold``): a plain lock's only; --slots holders take none."""
    return plan[o.MIN_HOLD] if plan[o.SLOTS] == 1 else None


def once_key_for(plan: Plan) -> tuple[Zone | None, str | None]:
    """The --once key, strftime-expanded, and the zone it was expanded in when it depends on the time
    (docs/guarantees.md "One zone per name")."""
    from lockrun.config.once import expand_once_key, once_key_for_period

    once, once_per = plan[o.ONCE], plan[o.ONCE_PER]
    if once is None and once_per is None:
        return None, None
    zone = once_zone(plan) if _time_derived(once, once_per) else None
    if once_per is not None:
        return zone, once_key_for_period(once_per, zone=zone)
    assert once is not None
    try:
        return zone, expand_once_key(once, zone)
    except UsageError as exc:  # a template the file gave: the file is what to fix
        if plan.from_the_file(o.ONCE):
            raise ConfigError(f"config file {plan.source(o.ONCE)}: {exc}") from None
        raise


def _time_derived(once: str | None, once_per: str | None) -> bool:
    """Whether the key depends on the time (--once-per, or a --once template with a conversion)."""
    from lockrun.core import zones

    return once_per is not None or (once is not None and zones.is_time_derived(once))


def check_once_every(plan: Plan, settings: Settings) -> None:
    """The fleet record forgets a name ``fleet_keep_days`` after its last finished run: --once-every
    longer than that would run early."""
    every = plan[o.ONCE_EVERY]
    if every is not None and settings.redis_url and every > settings.fleet_keep_days * 86400:
        raise UsageError(f"--once-every {exact_duration(every)} is longer than the fleet record keeps a"
                         f" name's last success (fleet_keep_days = {settings.fleet_keep_days}): raise"
                         " fleet_keep_days in the config file, or shorten --once-every")


def metrics_file_for(plan: Plan) -> Path | None:
    """The metrics file, checked before the command runs (docs/operating.md "Metrics for Prometheus"):
    one a run could not write is exit 2 for a flag, 78 for the config file's."""
    path = plan[o.METRICS_FILE]
    if path is None:
        return None
    problem = values.metrics_file_problem(path, "--metrics-file" if plan.on_the_command_line(o.METRICS_FILE)
                                          else "metrics_file")
    if problem:
        if plan.on_the_command_line(o.METRICS_FILE):
            raise UsageError(problem)
        raise ConfigError(f"config file {plan.source(o.METRICS_FILE)}: {problem}")
    return Path(path).expanduser()


def failure_tail_for(plan: Plan) -> int | None:
    """How much of a failed run's output this host's ledger keeps without --capture-tail: the last
    4 KiB when lockrun's output is not a terminal (cron, systemd, a pipe), unless --no-tail or
    ``output_tail = false`` (docs/operating.md "Output"). On a terminal the person sees it, and the
    command keeps its terminal (a pipe instead would change what it prints). Nor under
    --keep-detached: a daemon the command leaves running would be left writing into lockrun's pump,
    which ends with lockrun (its next write would fail), instead of into cron's stream."""
    from lockrun.core.defaults import DEFAULT_FAILURE_TAIL
    from lockrun.system.own_output import on_a_terminal

    if plan[o.CAPTURE_TAIL] is not None or plan[o.KEEP_DETACHED] or not plan[o.OUTPUT_TAIL]:
        return None
    if on_a_terminal():
        return None
    return DEFAULT_FAILURE_TAIL


def output_on_failure(plan: Plan) -> bool:
    """--output on-failure. The config file's default does not hold under --keep-detached (its daemon
    would write into the pump), as the default tail does not: output then passes through untouched."""
    output = plan.explicit(o.OUTPUT) or ("always" if plan[o.KEEP_DETACHED] else plan[o.OUTPUT])
    return output == "on-failure"


def masking_for(plan: Plan) -> Masking:
    from lockrun.core.masking_rules import parse_masking
    from lockrun.core.secret_names import BUILT_IN

    redact, record_command = plan[o.REDACT], plan[o.RECORD_COMMAND]
    if not redact and record_command:
        return BUILT_IN
    return parse_masking(list(redact), record_command)


def declared_cadence(plan: Plan) -> str | None:
    """The run's declaration as stored (core/cadence), or None: --every, or --schedule in the zone
    --once would use (--tz, the config's timezone, else this host's local zone)."""
    every, schedule = plan[o.EVERY], plan[o.SCHEDULE]
    if every is None and schedule is None:
        return None
    from lockrun.core.cadence import Cadence  # only runs that declare one import it
    from lockrun.core.defaults import DEFAULT_GRACE_S

    declared_grace = plan[o.GRACE]
    grace = declared_grace if declared_grace is not None else DEFAULT_GRACE_S
    if every is not None:
        return Cadence(every_s=every, grace_s=grace).to_json()
    return Cadence(schedule=schedule, tz=once_zone(plan).name, grace_s=grace).to_json()


def once_zone(plan: Plan) -> Zone:
    """The zone of this run's time-derived --once key and --schedule: --tz or LOCKRUN_TZ, else the
    config file's ``timezone`` (its job's, then its top level's), else the host's local zone."""
    from lockrun.core import zones

    name = plan[o.TIMEZONE]
    if name is None:
        return zones.local_zone()
    return zones.parse_zone(name, "timezone", plan.named_source(o.TIMEZONE))


def replicas_for(plan: Plan, settings: Settings) -> int | str:
    """--replicas or the config file's ``replicas``; only a Redis backend has replicas to wait for."""
    replicas = plan[o.REPLICAS]
    if replicas and not settings.redis_url:
        reason = "the local backend has no replicas to wait for; configure a Redis URL, or drop it"
        if plan.on_the_command_line(o.REPLICAS):
            raise UsageError(f"--replicas {replicas} needs a Redis backend: {reason}")
        raise ConfigError(f"config file {plan.source(o.REPLICAS)}: replicas = {replicas!r} needs a Redis backend:"
                          f" {reason}")
    return replicas
