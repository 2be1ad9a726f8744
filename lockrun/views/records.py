"""What ``history``, ``show``, ``prune`` and ``metrics`` find: this host's ledger, or with
``--fleet`` (and a Redis URL) every host's fleet record (docs/fleet.md "One fleet, one memory").

Nothing here prints; a ledger that exists but cannot be read raises LedgerError (exit 1).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from lockrun.core.clock import ISO_FORMAT, iso_ago
from lockrun.views.reading import backend_hint, check_ledger_directory, open_ledger_for_reading

if TYPE_CHECKING:
    from lockrun.config.settings import Settings


def history(
    resolved: Settings, name: str | None, limit: int, statuses: frozenset[str] | None, since: float | datetime | None,
    fleet: bool, host: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """The runs, newest first, and the other-backend hint (None with --fleet). ``since``: runs started
    since that time, or within so many seconds (config/moments); ``statuses``: only those."""
    since_at = _since_moment(since)
    if fleet and resolved.redis_url:
        from lockrun.views import sources

        return sources.fleet_history(resolved, name, host=host, limit=limit, statuses=statuses, since=since_at), None
    book = open_ledger_for_reading(resolved.ledger_path)
    if book is None:
        return [], None
    try:
        since_iso = since_at.astimezone(timezone.utc).strftime(ISO_FORMAT) if since_at is not None else None
        rows = book.history(name, limit=limit, statuses=statuses, since=since_iso, host=host)
        return rows, backend_hint(book, resolved, [name] if name else None)
    finally:
        book.close()


def _since_moment(since: float | datetime | None) -> datetime | None:
    """``--since`` as a moment: a time as given, or so many seconds ago."""
    if since is None or isinstance(since, datetime):
        return since
    return datetime.now(timezone.utc) - timedelta(seconds=since)


class FoundRun(NamedTuple):
    row: dict[str, Any]
    tail: str | None
    events: list[Any] | None  # the fleet record's events of the run (only a run found there)


def find_run(resolved: Settings, run_id: str, fleet: bool) -> FoundRun | None:
    """The run whose id starts with ``run_id``: this host's ledger first, then (``fleet``) the
    fleet record. Raises FleetReadError when the prefix names several fleet runs."""
    book = open_ledger_for_reading(resolved.ledger_path)
    if book is not None:
        try:
            found = book.find_run(run_id)
        finally:
            book.close()
        if found is not None:
            return FoundRun(found[0], found[1], None)
    if fleet and resolved.redis_url:
        from lockrun.views import sources

        seen = sources.fleet_run(resolved, run_id)
        if seen is not None:
            return FoundRun(*seen)
    return None


def not_found_where(resolved: Settings, fleet: bool) -> str:
    """Where ``show`` looked, for its "no run" line, and where else it could look."""
    if fleet and resolved.redis_url:
        return f"the ledger {resolved.ledger_path} or the fleet record"
    elsewhere = "; if another host ran it, add --fleet" if resolved.redis_url else ""
    return f"this host's ledger {resolved.ledger_path}{elsewhere}"


def fleet_hint(resolved: Settings, fleet: bool, found_any: bool) -> str | None:
    """For ``history`` without --fleet on a host that recorded nothing: the other hosts' runs are
    in the fleet record (said without asking Redis, which this command does not otherwise need)."""
    if found_any or fleet or not resolved.redis_url:
        return None
    return "this host's ledger has no such runs; every host's runs are in the fleet record: add --fleet"


def prune(resolved: Settings, older_than_s: float) -> int | None:
    """Delete finished runs older than that; None when there is no ledger (nothing to prune)."""
    from lockrun.ledger.store import Ledger

    if not os.path.lexists(resolved.ledger_path):  # a link is not "no ledger": opening it says what it is
        check_ledger_directory(resolved.ledger_path.parent)
        return None
    book = Ledger(resolved.ledger_path).open(create=False)
    try:
        return book.prune(iso_ago(older_than_s))
    finally:
        book.close()


def metrics_text(resolved: Settings, fleet: bool) -> str:
    """The Prometheus text exposition of this host's ledger, or (``fleet``) of the fleet record."""
    from lockrun.ledger import metrics as exposition
    from lockrun.views.health import with_due_times

    if fleet and resolved.redis_url:
        from lockrun.views import sources

        return exposition.exposition(with_due_times(resolved, sources.fleet_facts(resolved), None))
    book = open_ledger_for_reading(resolved.ledger_path)
    if book is None:
        from lockrun.ledger.store import Ledger

        book = Ledger(resolved.ledger_path).open()  # an empty ledger: the families, no samples
    try:
        return exposition.exposition(with_due_times(resolved, exposition.ledger_facts(book), book))
    finally:
        book.close()
