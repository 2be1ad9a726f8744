"""What ``timeline`` draws: a row label and a chart per lane, from the ledger or the fleet record.

The renderers in ``render/`` turn this into text or SVG; nothing here prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from lockrun.backends.pause import Paused
from lockrun.core.cadence import parse_cadence
from lockrun.core.errors import BackendUnavailable, LedgerError
from lockrun.system.host import hostname
from lockrun.views import sources, timeline_charts
from lockrun.views import timeline as tl
from lockrun.views.reading import open_ledger_for_reading
from lockrun.views.timeline_missed import LaneCadence, with_missed
from lockrun.views.timeline_rows import lanes_from_rows

if TYPE_CHECKING:
    from lockrun.config.settings import Settings
    from lockrun.ledger.store import Ledger


class TimelineView(NamedTuple):
    labels: list[str]
    charts: Iterable[Any]  # one per label, as render/ draws them; read lazily from the ledger
    source: str  # where the runs were read, for the SVG's subtitle
    details: Any = None  # what the SVG's tooltips say of each run (the ledger's runs only)


@contextmanager
def timeline_view(
    resolved: Settings, window: tl.Window, names: list[str] | None, fleet: bool, host: str | None, by_host: bool,
    per_run_below: int = 0, with_details: bool = False,
) -> Iterator[TimelineView]:
    """The lanes of the window; with ``fleet`` (and a Redis URL), every host's. ``per_run_below``:
    the SVG draws each run of a lane with fewer runs; ``with_details``: gather its tooltips.
    The ledger stays open while the view is drawn: its charts are computed as they are drawn."""
    if fleet and resolved.redis_url:
        yield _fleet_view(resolved, window, names, host, by_host)
        return
    book = open_ledger_for_reading(resolved.ledger_path)
    try:
        labels, charts = sources.ledger_timeline(book, window, names, host, by_host, per_run_below=per_run_below)
        details = timeline_charts.run_details(book, host) if with_details and book is not None else None
        declared = _cadences(resolved, book, None) if host is None and not by_host else {}
        yield TimelineView(labels, with_missed(charts, declared, window), f"the ledger of {hostname()}", details)
    finally:
        if book is not None:
            book.close()


def _fleet_view(resolved: Settings, window: tl.Window, names: list[str] | None, host: str | None,
                by_host: bool) -> TimelineView:
    """Every host's lanes, from the fleet record's rows."""
    rows = sources.fleet_rows_in(resolved, window, names)
    lanes = lanes_from_rows(rows, window, host=host, by_host=by_host)
    labels = [tl.label(lane.name, lane.host) for lane in lanes]
    declared = _cadences(resolved, None, sorted({lane.name for lane in lanes}))
    return TimelineView(labels, with_missed(tl.layout(lanes, window), declared, window),
                        "the fleet record (every host)")


def _cadences(resolved: Settings, book: Ledger | None, names: list[str] | None) -> dict[str, LaneCadence]:
    """The declared cadences to mark missed starts by: the fleet-wide ones (``book`` None: the
    fleet record's timeline), else this host's ledger's; none that cannot be read. A name paused
    now missed nothing since its pause began (the fleet record keeps no entry of a paused skip,
    and nothing may have fired here meanwhile)."""
    found = _in_the_ledger(resolved, book, names) if book is not None else _fleet_wide(resolved, names)
    if found is None:
        return {}
    pauses, declared = found
    return {name: LaneCadence(cadence, at, _pause_began(pauses.get(name)))
            for name, (cadence, at) in declared.items() if cadence is not None}


#: The pauses the backend has, and each name's declared cadence (None: unusable) and when it was declared.
_Declared = tuple[dict[str, Paused], dict[str, tuple[Any, Any]]]


def _in_the_ledger(resolved: Settings, book: Ledger, names: list[str] | None) -> _Declared | None:
    """This host's ledger's declarations (and the backend's pauses); None when there are none."""
    try:
        stored = book.cadences(names)
    except LedgerError:
        return None
    if not stored:
        return None  # nothing declared: no backend to ask
    pauses, _, _ = _asked(resolved, names, cadences=False)
    return pauses, {name: (parse_cadence(text), at) for name, (text, at) in stored.items()}


def _fleet_wide(resolved: Settings, names: list[str] | None) -> _Declared | None:
    """The backend's declarations and pauses; None when it did not answer."""
    pauses, raw, reached = _asked(resolved, names, cadences=True)
    if not reached:
        return None
    return pauses, {name: (parse_cadence(value), None) for name, value in raw.items()}


def _asked(resolved: Settings, names: list[str] | None,
           cadences: bool) -> tuple[dict[str, Paused], dict[str, object], bool]:
    """The backend's pauses of ``names`` (and with ``cadences`` its declared cadences), and whether
    it answered: what it said before it became unavailable, and False, when it did not."""
    from lockrun.backends.connect import open_backend

    pauses: dict[str, Paused] = {}
    raw: dict[str, object] = {}
    try:
        backend = open_backend(resolved, resolved.socket_timeout or 5.0, resolved.connect_timeout)
        try:
            pauses = backend.pauses(names)
            if cadences:
                raw = backend.cadences(names or [])
        finally:
            backend.close()
    except BackendUnavailable:
        return pauses, raw, False
    return pauses, raw, True


def _pause_began(pause: Paused | None) -> str | None:
    return pause.when if pause is not None and pause.problem is None else None
