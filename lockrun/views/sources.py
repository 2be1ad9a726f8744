"""Where the read commands find runs: this host's ledger, or every host's fleet record in Redis.

``history``, ``show``, ``metrics`` and ``timeline`` read this host's ledger, or with ``--fleet``
(and a Redis URL) the fleet record (docs/fleet.md "One fleet, one memory"). The fleet readers here open
the backend, ask, and close it again; an unreachable Redis raises BackendUnavailable (exit 69).
Nothing here prints: the CLI renders what comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from lockrun.config import settings
from lockrun.core import defaults
from lockrun.core.errors import BackendUnavailable

if TYPE_CHECKING:
    from datetime import datetime

    from lockrun.backends.protocol import Backend
    from lockrun.ledger.metrics import JobFacts
    from lockrun.ledger.store import Ledger
    from lockrun.views import timeline as tl
    from lockrun.views.fleet import Source

T = TypeVar("T")
#: A run found in the fleet record: its row (as history --json), its output tail, its events.
FleetRun = tuple[dict[str, Any], str | None, list[dict[str, Any]]]


def read_fleet(resolved: settings.Settings, read: Callable[[Source, Backend], T]) -> T:
    """Open the Redis backend, call ``read(fleet_record, backend)``, close it."""
    from lockrun.backends.connect import open_backend

    backend = open_backend(resolved, resolved.socket_timeout or 5.0, resolved.connect_timeout)
    try:
        record = backend.fleet_record()
        if record is None:  # the local backend: callers ask only when a Redis URL is configured
            raise BackendUnavailable(f"the {backend.name} backend keeps no fleet record")
        return read(record, backend)
    finally:
        backend.close()


def fleet_history(
    resolved: settings.Settings,
    name: str | None,
    *,
    host: str | None,
    limit: int,
    statuses: frozenset[str] | None,
    since: datetime | None,
) -> list[dict[str, Any]]:
    """``history --fleet``: every host's runs, newest first; ``since``: started at or after it."""
    from lockrun.views import fleet

    since_ms = max(0, int(since.timestamp() * 1000)) if since is not None else None
    return read_fleet(resolved, lambda record, backend: fleet.history(
        record, backend.holders, name, host=host, limit=limit, statuses=statuses, since_ms=since_ms))


def fleet_run(resolved: settings.Settings, run_id: str) -> FleetRun | None:
    """``show --fleet``: the run of any host whose id starts with ``run_id``, with its tail and
    events; None when there is none. Raises FleetReadError for a prefix of several runs."""
    from lockrun.views import fleet

    return read_fleet(resolved, lambda record, backend: fleet.find_run(record, backend.holders, run_id))


def fleet_facts(resolved: settings.Settings) -> list[JobFacts]:
    """``metrics --fleet``: every name's newest run, last success and outcome counts."""
    from lockrun.views import fleet

    return read_fleet(resolved, lambda record, backend: fleet.facts(record))


def fleet_rows_in(resolved: settings.Settings, window: tl.Window, names: list[str] | None) -> list[dict[str, Any]]:
    """``timeline --fleet``: every host's runs that may overlap ``window``: those that started in
    it, or up to one window's length before it (a long run that began earlier still shows)."""
    from lockrun.views import fleet

    since_ms = max(0, int((window.since.timestamp() - window.seconds) * 1000))

    def read(record: Source, backend: Backend) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        every_name: list[str | None] = [None]
        for name in names or every_name:
            rows += fleet.history(record, backend.holders, name, limit=defaults.MAX_HISTORY_LIMIT, since_ms=since_ms)
        return rows + fleet.skip_rows(record, names or record.names(), since_ms)

    return read_fleet(resolved, read)


def ledger_timeline(
    book: Ledger | None, window: tl.Window, names: list[str] | None, host: str | None, by_host: bool,
    per_run_below: int = 0,
) -> tuple[list[str], Iterator[tl.LaneChart]]:
    """``timeline``: the lanes' labels, and their charts as a stream: from this host's ledger
    (``timeline_charts.from_ledger``: a lane with fewer than ``per_run_below`` runs is drawn run
    by run, with every detail, as the SVG wants it).

    The seam for other sources: rows shaped like ``history --json`` (the fleet record's, say)
    become lanes through ``timeline_rows.lanes_from_rows(rows, window, host=..., by_host=...)``, then
    charts through ``timeline.layout``.
    """
    from lockrun.views import timeline as tl
    from lockrun.views import timeline_charts

    if book is None:
        lanes = [tl.Lane(name, None, [], []) for name in names or []]
        return [lane.name for lane in lanes], tl.layout(lanes, window)
    return timeline_charts.from_ledger(book, window, names, host, by_host, per_run_below)
