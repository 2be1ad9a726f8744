"""``status`` and ``unlock``: who holds which lock, and clearing one whose holder is gone.

What to show and whether a holder may be cleared are decided in ``views/status`` and
``views/unlock``; here the answer is printed, and ``unlock`` asks on a terminal.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from lockrun.cli.group import CONTEXT, cli, complete_lock_names, resolved_settings
from lockrun.cli.options import global_options
from lockrun.cli.output import print_applied, say
from lockrun.cli.params import LOCK_NAME
from lockrun.core.printable import printable

if TYPE_CHECKING:
    from lockrun.backends.protocol import Backend
    from lockrun.config.settings import Settings
    from lockrun.core.errors import BackendUnavailable
    from lockrun.system.own_output import OutputFailed
    from lockrun.views.status import StatusReport
    from lockrun.views.unlock import Choice, Inspection


@cli.command(context_settings=CONTEXT)
@click.argument("names", nargs=-1, type=LOCK_NAME, metavar="[NAME]...", shell_complete=complete_lock_names)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {backend, locks: [...]}, one entry per lock.")
@click.option("--all", "every_name", is_flag=True,
              help="Every name the backend (Redis: its registry) or this host's ledger knows, held or not, with its "
                   "next due start and overdue (--every/--schedule) and its pause.")
@global_options
@click.pass_context
def status(ctx: click.Context, names: tuple[str, ...], as_json: bool, every_name: bool) -> NoReturn:
    """Show who holds which lock, whether the holder is alive, and the last run.

    \b
      lockrun status                 # every held lock
      lockrun status nightly-dump    # one lock, held or not
      lockrun status --all           # every known name: next due, overdue, paused
      lockrun status --json

    A holder is a zombie when its process is certainly gone (its pid in this
    machine's boot and PID namespace, or an earlier boot of this machine), or
    its heartbeat has missed two renewals by the Redis server's clock; a local
    lock's holder never is. A lock whose record lockrun did not
    write is malformed, with the reason. A Redis that may evict keys
    (maxmemory-policy) is named in a warning line. Paused names (lockrun pause)
    are listed, held or not; --all lists every name lockrun knows, with its
    next due start and how overdue it is (--every/--schedule). Exits 69 when the backend is
    unreachable, after printing what the ledger knows. When this host's recent
    runs used another backend than this shell, one line on stderr says how
    they were configured (status, history and unlock alike).
    """
    from lockrun.views.status import status_report

    resolved = resolved_settings(ctx)
    if every_name and names:
        raise click.UsageError("--all lists every name: give no NAME with it", ctx=ctx)
    report = status_report(resolved, list(names) if names else None, every_name)
    if report.ledger_warning:
        say(report.ledger_warning)
    output_failed = _print_locks(report, resolved, as_json, every_name)
    if report.hint:
        say(report.hint)
    for warning in report.evicting:
        say(warning)
    _raise_after_printing(report.view.unreachable, output_failed)
    ctx.exit(0)


def _print_locks(report: StatusReport, resolved: Settings, as_json: bool, every_name: bool) -> OutputFailed | None:
    """The locks as JSON or a table; why they could not be printed, if they could not."""
    from lockrun.render import tables as render
    from lockrun.system.own_output import OutputFailed

    view = report.view
    try:
        if as_json:
            render.print_json({"backend": report.backend, "locks": view.locks})
        else:
            render.status_table(report.backend, resolved.redacted_url or "", view.locks,
                                unreachable=view.unreachable is not None, notes=view.notes, every_name=every_name)
        sys.stdout.flush()
    except OutputFailed as exc:  # the lines below and exit 69 still matter more than the table
        return exc
    return None


def _raise_after_printing(unreachable: BackendUnavailable | None, output_failed: OutputFailed | None) -> None:
    """Exit 69 for an unreachable backend (after what the ledger knows), else for output that failed."""
    if unreachable is not None:
        if output_failed is not None and not output_failed.broken_pipe:
            say(output_failed.reason)
        raise unreachable
    if output_failed is not None:
        raise output_failed


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

    resolved = resolved_settings(ctx)
    hint = unlocking.backend_hint_for(resolved, name)
    if hint:  # before anything else: "not held" may only mean "not held *here*"
        say(hint)
    backend = open_backend(resolved, resolved.socket_timeout or 5.0, resolved.connect_timeout)
    argv = ["lockrun", "unlock", name] + (["--force"] if force else [])
    try:
        choice = unlocking.choose(unlocking.inspect_all(backend, name), name, token_prefix, every_holder)
        if choice.not_held:
            click.echo(choice.not_held)
            ctx.exit(0)
        if choice.refusal:
            _describe_all(choice)
            say(choice.refusal)
            ctx.exit(1)
        code = 0
        for inspection in choice.chosen:
            code = max(code, _unlock_one(backend, inspection, force, yes, resolved.ledger_path, argv))
    finally:
        backend.close()
    ctx.exit(code)


def _describe_all(choice: Choice) -> None:
    """The holders the operator picks from, when there are several to pick from."""
    for inspection in choice.chosen if choice.show_all else []:
        _describe(inspection)


def _describe(inspection: Inspection) -> None:
    for line in inspection.describe():
        click.echo(printable(line))  # the holder as Redis or its file describes it: anyone could have written it


def _unlock_one(
    backend: Backend, inspection: Inspection, force: bool, yes: bool, ledger_path: Path, argv: list[str]
) -> int:
    """Show one holder, ask if it may be cleared, clear exactly its token. Returns the exit code."""
    from lockrun.views import unlock as unlocking

    _describe(inspection)
    refused = unlocking.refusal(inspection, force)
    if refused:
        say(refused)
        return 1
    if not yes:
        if not sys.stdin.isatty():
            say(f"refusing to clear {inspection.name!r} without confirmation: no terminal to ask on; pass --yes")
            return 1
        if not click.confirm(unlocking.question(inspection), default=False):
            say(f"{inspection.name!r} was not cleared")
            return 1
    verdict = unlocking.clear_inspected(backend, inspection, ledger_path, argv)
    if verdict.warning:
        say(verdict.warning)
    if verdict.to_stderr:
        say(verdict.message)
    else:  # the lock is gone: a stdout that cannot say so does not make that a failure
        print_applied([verdict.message], f"{inspection.name!r} is free all the same")
    return verdict.exit_code
