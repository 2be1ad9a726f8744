"""``history``, ``show``, ``prune`` and ``metrics``: what ran, read from the ledger or the fleet record.

``views/records`` finds the runs; here they are printed.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

import click

from lockrun.cli.group import CONTEXT, cli, complete_lock_names, resolved_settings
from lockrun.cli.options import global_options
from lockrun.cli.output import print_applied, say
from lockrun.cli.params import DURATION, LOCK_NAME, RUN_ID, STATUS_FILTER, moment_type, whole_number
from lockrun.config import values
from lockrun.core import defaults
from lockrun.core.clock import exact_duration

if TYPE_CHECKING:
    from datetime import datetime


@cli.command(context_settings=CONTEXT)
@click.argument("name", required=False, type=LOCK_NAME, shell_complete=complete_lock_names)
@click.option("--limit", type=whole_number(1, defaults.MAX_HISTORY_LIMIT), metavar="N", default=20,
              show_default=True, help=f"Show at most N runs (1 to {defaults.MAX_HISTORY_LIMIT}).")
@click.option("--status", "status_filter", type=STATUS_FILTER, multiple=True, metavar="STATUS[,STATUS...]",
              help=f"Only runs with one of these statuses ({', '.join(values.STATUS_FILTER_NAMES[:-1])}): "
                   "repeatable or comma-separated (--status failed,timeout); failures: failed, timeout, lost, killed, "
                   "abandoned, error and unavailable.")
@click.option("--since", type=moment_type(defaults.MAX_DURATION_S),
              help="Only runs started since TIME, as timeline --since takes it: a duration ago (90, 90m, 12h, 7d; at "
                   f"most {defaults.MAX_DURATION_TEXT}) or a time (yesterday, 14:00, 2026-11-30, "
                   "2026-11-30T14:00:00Z).")
@click.option("--fleet", is_flag=True,
              help="Every host's runs, from the fleet record in Redis (local backend: this host's ledger).")
@click.option("--host", "host_filter", metavar="HOST",
              help="Only runs recorded by this host name (useful with --fleet).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: an array of runs, newest first.")
@global_options
@click.pass_context
def history(
    ctx: click.Context, name: str | None, limit: int, status_filter: tuple[frozenset[str], ...],
    since: float | datetime | None,
    fleet: bool,
    host_filter: str | None, as_json: bool,
) -> NoReturn:
    """Show the runs recorded in the ledger, newest first.

    \b
      lockrun history                           # the last 20 runs on this host
      lockrun history sync-invoices --since 7d
      lockrun history --since yesterday
      lockrun history --status failed --json
      lockrun history --status failures --since yesterday  # every way a run can go wrong
      lockrun history --fleet --host app-2      # every host's runs, from Redis

    Without --fleet it needs no backend: it reads this host's ledger only, and
    exits 1 when the ledger exists but cannot be read. With --fleet it reads
    the runs every host recorded in Redis; exits 69 when Redis is unreachable.
    EXIT is the exit status lockrun returned (what cron saw), then how the
    command ended when that says more: 124 (sig 15) is a --timeout.
    """
    from lockrun.render import tables as render
    from lockrun.views import records

    resolved = resolved_settings(ctx)
    statuses = frozenset().union(*status_filter) if status_filter else None
    rows, hint = records.history(resolved, name, limit, statuses, since, fleet, host_filter)
    if as_json:
        render.print_json(rows)
    else:
        render.history_table(rows)
    for line in (hint, records.fleet_hint(resolved, fleet, bool(rows))):
        if line:
            say(line)
    ctx.exit(0)


@cli.command(context_settings=CONTEXT)
@click.option("--older-than", type=DURATION, required=True,
              help=f"Delete finished runs older than DURATION (90d, 12h; a bare number is seconds; at most "
                   f"{defaults.MAX_DURATION_TEXT}).")
@global_options
@click.pass_context
def prune(ctx: click.Context, older_than: float) -> NoReturn:
    """Delete old runs from the ledger (never running ones).

    \b
      lockrun prune --older-than 90d

    The config key ledger_keep_days does this automatically, at most once an hour.
    """
    from lockrun.views import records

    resolved = resolved_settings(ctx)
    count = records.prune(resolved, older_than)
    if count is None:
        click.echo(f"no ledger at {resolved.ledger_path}; nothing to prune")
    else:
        print_applied([f"pruned {count} run{'s' if count != 1 else ''} older than {exact_duration(older_than)}"
                       f" from {resolved.ledger_path}"], "the runs are pruned all the same")
    ctx.exit(0)


@cli.command(context_settings=CONTEXT)
@click.argument("run_id", type=RUN_ID)
@click.option("--fleet", is_flag=True,
              help="Look in the fleet record in Redis too: a run of any host (its tail if it is the name's last run).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: the run as in history --json, plus output_tail.")
@global_options
@click.pass_context
def show(ctx: click.Context, run_id: str, fleet: bool, as_json: bool) -> NoReturn:
    """Show one run from the ledger, with its output tail (a failed run's, or --capture-tail's).

    \b
      lockrun show 3f2a9c1e          # a prefix of the run id is enough
      lockrun show 3f2a9c1e --json
      lockrun show 3f2a9c1e --fleet  # a run of any host

    Exits 1 when no run has that id; with --fleet, 69 when Redis is unreachable.
    """
    from lockrun.render import tables as render
    from lockrun.views import records

    resolved = resolved_settings(ctx)
    found = records.find_run(resolved, run_id, fleet)
    if found is None:
        say(f"no run {run_id!r} in {records.not_found_where(resolved, fleet)}")
        ctx.exit(1)
    if as_json:
        events = {"events": found.events} if found.events is not None else {}
        render.print_json({**found.row, "output_tail": found.tail, **events})
    else:
        render.run_details(found.row, found.tail)
    ctx.exit(0)


@cli.command(context_settings=CONTEXT)
@click.option("--fleet", is_flag=True,
              help="Every host's runs, from the fleet record in Redis (local backend: this host's ledger).")
@global_options
@click.pass_context
def metrics(ctx: click.Context, fleet: bool) -> NoReturn:
    """Print the ledger as Prometheus metrics (text exposition format).

    \b
      lockrun metrics                # every name in this host's ledger
      lockrun -n job --metrics-file /var/lib/prometheus/node-exporter/lockrun-job.prom -- /opt/job
      lockrun metrics --fleet        # every host's runs, from Redis: one scrape for the fleet

    A run's --metrics-file holds that job's series only: one file per job
    in node_exporter's textfile directory never repeats another's.

    Per lock name: lockrun_last_run_timestamp_seconds,
    lockrun_last_success_timestamp_seconds, lockrun_last_duration_seconds,
    lockrun_last_exit_code, lockrun_last_exit_status (as cron saw it),
    lockrun_runs_total{status=...}, lockrun_lock_lost_at_release_total
    (runs whose release found the lock no longer theirs) and
    lockrun_slow_runs_total (runs --warn-after found slow). With --fleet the
    counts include busy and duplicate skips of every host; exits 69 when Redis
    is unreachable.
    """
    from lockrun.views import records

    sys.stdout.write(records.metrics_text(resolved_settings(ctx), fleet))
    ctx.exit(0)

