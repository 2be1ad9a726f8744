"""``lockrun run`` (and the bare ``lockrun [OPTIONS] -- COMMAND``): the flags, parsed into one
:class:`~lockrun.run.command.RunFlags`; ``run/command`` turns them into a run.
"""

from __future__ import annotations

from typing import Any, NoReturn

import click

from lockrun.cli.group import COMMAND_MODULES, CONTEXT, cli, global_options, resolved_settings
from lockrun.cli.output import say
from lockrun.cli.params import (
    DURATION,
    ENDPOINT,
    JITTER,
    LOCK_NAME,
    METRICS_FILE,
    MIN_HOLD,
    NOTIFY_ON,
    REPLICAS,
    RETRY,
    RETRY_DELAY,
    SCHEDULE,
    SIZE,
    SUCCESS_EXIT,
    WARN_AFTER,
    ZONE,
    OneOf,
    seconds_type,
    whole_number,
)
from lockrun.config import once, values
from lockrun.core import defaults
from lockrun.core.errors import UsageError


@cli.command(context_settings={**CONTEXT, "allow_interspersed_args": False})
@click.option("-n", "--name", type=LOCK_NAME,
              help="Lock name [default: cmd- + 12 hex of sha256 of the argv joined by NUL].")
@click.option("--ttl", type=seconds_type(minimum=1), envvar="LOCKRUN_TTL", show_envvar=True,
              help=f"Lease length ({values.seconds_range(1)}): seconds (90) or with a unit (90s, 2m, 1.5h, 7d), "
                   "as every time value takes; renewed every TTL/3 [default: 60].")
@click.option("-w", "--wait", type=seconds_type(allow_zero=True),
              help=f"Wait up to DURATION ({values.seconds_range(allow_zero=True)}: 600, 10m) for a busy lock "
                   "[default: 0 (give up at once); with --replace, the holder's TTL + --kill-after].")
@click.option("--timeout", type=seconds_type(),
              help=f"Stop the command after DURATION ({values.seconds_range()}: 3600, 1h); exit 124.")
@click.option("--kill-after", type=seconds_type(), default=defaults.DEFAULT_KILL_AFTER, show_default=True,
              help=f"Grace ({values.seconds_range()}: 10, 30s) between SIGTERM and SIGKILL when stopping the "
                   "command, also after a SIGTERM, SIGINT or SIGHUP forwarded to it.")
@click.option("--on-lost", type=OneOf(["terminate", "continue"]), default="terminate", show_default=True,
              help="What to do when the lease cannot be kept (a --replace by another run always stops the "
                   "command).")
@click.option("-E", "--busy-exit-code", type=whole_number(0, 255), metavar="N", default=defaults.DEFAULT_BUSY_EXIT,
              show_default=True, help="Exit code when the lock is busy (after --wait; 0 to 255).")
@click.option("--once", "once", metavar="KEY",
              help="Idempotency key, expanded with strftime in --tz (report-%Y-%m-%d): skip (exit 0) if it already "
                   "succeeded. In a crontab, write % as \\%.")
@click.option("--once-per", type=OneOf(list(once.ONCE_PERIODS)), metavar="hour|day|week|month",
              help="Run at most once per hour, day, ISO week or month (in --tz): --once with the period's start "
                   "as the key (2026-12-01T14, 2026-12-01, 2026-W49, 2026-12); no % for cron to mangle. "
                   "Not with --once.")
@click.option("--once-every", type=seconds_type(minimum=1), metavar="DURATION",
              help=f"Run only if the name's last success started at least DURATION ({values.seconds_range(1)}: 20h, "
                   "7d) ago, on any host (the Redis server's clock; the local backend: this host's); else skip, "
                   "exit 0, status duplicate. With a frequent schedule it catches up what a down host missed.")
@click.option("--remember", type=DURATION, default=defaults.DEFAULT_REMEMBER, show_default=True,
              help=f"How long a succeeded --once key is kept (30d, 12h; at most {defaults.MAX_DURATION_TEXT}).")
@click.option("--slots", type=whole_number(1, defaults.MAX_SLOTS), metavar="N", default=1, show_default=True,
              help=f"Allow up to N (1 to {defaults.MAX_SLOTS}) holders of the name at once across hosts (a semaphore);"
                   " each holder has its own token and fencing token. Every caller of one name must use the same N.")
@click.option("--min-hold", type=MIN_HOLD,
              help=f"Keep the lock taken until at least DURATION (30, 5m; at most {defaults.MAX_MIN_HOLD_TEXT}) after "
                   "acquisition, so a host whose clock lags cannot rerun a short job; status shows such a lock as "
                   "cooling (config: min_hold).")
@click.option("--replace", is_flag=True,
              help="Ask the current holder to stop (it exits 76 with ledger status preempted), wait for its "
                   "release, then run; never two at once.")
# docs/operating.md "Retries and jitter"
@click.option("--retry", type=RETRY, metavar="N",
              help=f"Run a failed attempt (failed, timeout, or killed by a signal lockrun did not forward) again, up "
                   f"to N more times (0 to {defaults.MAX_RETRIES}), under the same lock and fencing token; never "
                   "after busy, duplicate, lost, preempted, unavailable, a forwarded signal, 126 or 127. Each "
                   "attempt is its own ledger row [default: 0; config: retry].")
@click.option("--retry-delay", type=RETRY_DELAY,
              help="The pause before the first retry (0 to 24h); each further one doubles, up to 10m, with up to "
                   "10% random spread; the lease is renewed through it [default: 10s; config: retry_delay].")
@click.option("--jitter", type=JITTER,
              help="Sleep a random time in [0, DURATION) (at most 24h) before the first try for the lock, so that "
                   "a crontab shared by many hosts does not start all at once; --wait counts from after it "
                   "[default: none; config: jitter].")
@click.option("--success-exit", type=SUCCESS_EXIT, metavar="CODES",
              help=f"Exit codes (1 to 255, comma-separated, at most {defaults.MAX_SUCCESS_EXITS}) that count as "
                   "success, like rsync's 24: recorded succeeded with the command's exit_code, --once marked "
                   "done; lockrun exits 0 [default: none; config: success_exit].")
@click.option("--replicas", type=REPLICAS, metavar="N|all",
              help="WAIT for N Redis replicas (all: every replica in sync with the master) behind the acquire and "
                   "every renewal, in the same round trip; fewer acknowledgements at acquire: exit 69, the command "
                   "does not run; a renewal counts only when acknowledged. N: 0 to 100 [default: 0; config: "
                   "replicas].")
@click.option("--metrics-file", metavar="PATH", type=METRICS_FILE,
              help="Rewrite this Prometheus textfile with the name's series after the run (one file per job, e.g. "
                   "/var/lib/prometheus/node-exporter/lockrun-NAME.prom); only a regular file is replaced (empty, a "
                   "directory, device, FIFO or socket there, or a directory this user cannot write: exit 2).")
@click.option("--notify", "notify_urls", metavar="URL", multiple=True, type=ENDPOINT,
              help="POST a JSON document about the outcome to URL (repeatable; config: notify_urls).")
@click.option("--notify-on", metavar="STATUSES", type=NOTIFY_ON, default=",".join(values.DEFAULT_NOTIFY_ON),
              show_default=True, help="Which outcomes --notify reports (comma-separated ledger statuses).")
@click.option("--notify-format", type=OneOf(["json", "slack"]), default="json", show_default=True,
              help="slack: a {\"text\": ...} body for Slack-compatible incoming webhooks.")
@click.option("--ping", "ping_url", metavar="URL", type=ENDPOINT,
              help="healthchecks.io-style pings: URL/start, then URL (success), URL/EXIT_CODE or URL/fail.")
@click.option("--ping-on-busy", is_flag=True, help="A busy skip pings URL/fail (by default it pings nothing).")
@click.option("--capture-tail", metavar="SIZE", type=SIZE,
              help="Keep the last SIZE (512, 10k, 1m) of the command's output for the ledger, pings and webhooks.")
# docs/operating.md "Output": what a failed run keeps by default, chronic(1), --warn-after, syslog.
@click.option("--no-tail", is_flag=True,
              help=f"Keep no output at all: by default, when lockrun's output is not a terminal, a failed run "
                   f"keeps the last {defaults.DEFAULT_FAILURE_TAIL_TEXT} of it in this host's ledger "
                   "(config: output_tail = false).")
@click.option("--output", "output", type=OneOf(list(values.OUTPUT_MODES)), default=None,
              help="on-failure: keep the command's stdout and stderr in a private temporary file and write them "
                   "out only when the run did not succeed, as chronic(1) does; not with --keep-detached "
                   "[default: always; config: output].")
@click.option("--warn-after", type=WARN_AFTER, metavar="DURATION",
              help="A command still running after DURATION (1s to 30d: 90, 10m, 2h) is slow: one line on stderr, "
                   "a `slow` webhook (--notify-on), a /log ping, `slow` in status, a note on its row and "
                   "lockrun_slow_runs_total; it is not stopped.")
@click.option("--syslog", is_flag=True,
              help="One line per finished run to syslog (facility cron, lockrun[PID]:), key=value fields "
                   "(config: syslog).")
# Descendants that leave the command's group (docs/guarantees.md "What lockrun guarantees, and how": the command).
@click.option("--keep-detached", is_flag=True,
              help="Let processes that leave the command's process group (setsid, double forks, daemons) run on "
                   "after the run: they are not stopped, and outlive the lock's protection. By default everything "
                   "the command started is stopped, and reaped, before the lock is released.")
@click.option("-v", "--verbose", is_flag=True, help="Say what lockrun does (on stderr).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors; no warnings.")
# docs/guarantees.md "What lockrun guarantees, and how": an evicting Redis, one zone per name.
@click.option("--tz", "tz", type=ZONE, envvar="LOCKRUN_TZ", show_envvar=True, metavar="ZONE",
              help="The time zone (IANA name: UTC, Europe/Berlin) of --once-per periods and --once % keys; every "
                   "run of one name must use the same [default: config timezone, else this host's local zone].")
@click.option("--allow-eviction", is_flag=True,
              help="Run even on a Redis whose maxmemory-policy may evict keys (else exit 69): a held lock or a "
                   "--once mark could vanish and the job run twice (config: allow_eviction).")
# docs/operating.md "Declaring a cadence": how often the job is expected to start, for status --all and check.
@click.option("--every", "every", type=seconds_type(), metavar="DURATION",
              help=f"Declare that the job should start every DURATION ({values.seconds_range()}: 1h, 15m); status "
                   "--all and lockrun check call it overdue when it does not. Not with --schedule.")
@click.option("--schedule", "schedule", type=SCHEDULE, metavar="'CRON'",
              help="Declare the job's cron schedule (5 fields: '0 3 * * *'), evaluated in --tz; status --all and "
                   "lockrun check call it overdue when a start is missed. Not with --every.")
@click.option("--grace", "grace", type=seconds_type(allow_zero=True), metavar="DURATION",
              help=f"How late a declared start may be before it is overdue ({values.seconds_range(allow_zero=True)}) "
                   f"[default: {defaults.DEFAULT_GRACE_TEXT}].")
@global_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="[--] COMMAND [ARG]...")
@click.pass_context
def run(ctx: click.Context, /, **given: Any) -> NoReturn:
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
    from lockrun.run.command import RunFlags, plan_run

    from_env = ctx.get_parameter_source("tz") == click.core.ParameterSource.ENVIRONMENT
    flags = RunFlags(**given, tz_source="LOCKRUN_TZ" if from_env else "--tz")
    resolved = resolved_settings(ctx, flags.ttl)
    # `lockrun -v status`: a run option first makes `status` the command to run. When no such
    # program exists, say where lockrun's own subcommand wants its options.
    misplaced = flags.command[0] in COMMAND_MODULES

    def report(level: str, message: str) -> None:
        if (level == "info" and not flags.verbose) or (level == "warn" and flags.quiet):
            return
        if level == "error" and misplaced and message.endswith(": command not found in PATH"):
            program = flags.command[0]
            message += f" (for lockrun's own {program!r}, put it first: lockrun {program} [OPTIONS])"
        say(message)

    try:
        planned = plan_run(flags, resolved, report)
    except UsageError as exc:  # flags that cannot go together: click's line, with its hint
        raise click.UsageError(str(exc), ctx=ctx) from None
    ctx.exit(planned.execute().exit_code)
