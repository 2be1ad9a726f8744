"""Due times for ``status --all`` and ``lockrun check`` (docs/operating.md "Declaring a cadence"):
each name's declared cadence, from the backend (Redis: the fleet-wide one, newest declaration)
or else this host's ledger, judged against its newest start (core/cadence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from lockrun.core.cadence import Cadence, judge, parse_cadence
from lockrun.core.clock import ISO_FORMAT
from lockrun.core.errors import BackendUnavailable, LedgerError

if TYPE_CHECKING:
    from lockrun.backends.protocol import Backend
    from lockrun.config.settings import Settings
    from lockrun.ledger.metrics import JobFacts
    from lockrun.ledger.store import Ledger


class Declared(NamedTuple):
    cadence: Cadence
    declared_at: object  # when the ledger first saw it so (None from Redis, which keeps no such time)


def declared_cadences(backend: Backend, ledger: Ledger | None, names: list[str]) -> dict[str, Declared]:
    """The usable declaration of each name: the backend's, else the ledger's (a stored value that
    is none lockrun can use counts as no declaration)."""
    return usable_declarations(names, backend.cadences(names) if names else {}, ledger)


def usable_declarations(names: list[str], fleet: Mapping[str, object], ledger: Ledger | None) -> dict[str, Declared]:
    """Each name's declaration from ``fleet`` (what the backend keeps), else from the ledger; only
    the ledger knows since when it was declared so."""
    stored: dict[str, tuple[object, object]] = {}
    if ledger is not None:
        try:
            stored = ledger.cadences(names)
        except LedgerError:
            stored = {}
    found: dict[str, Declared] = {}
    for name in names:
        text, declared_at = stored.get(name, (None, None))
        fleet_cadence = parse_cadence(fleet.get(name))
        cadence = fleet_cadence or parse_cadence(text)
        if cadence is not None:
            found[name] = Declared(cadence, declared_at if fleet_cadence is None else None)
    return found


def cadence_json(cadence: Cadence) -> dict[str, Any]:
    return {"every_s": cadence.every_s, "schedule": cadence.schedule, "tz": cadence.tz, "grace_s": cadence.grace_s}


class DueFields(NamedTuple):
    """What an entry of ``status --all`` or ``check`` says of a name's cadence (LockEntry's fields)."""

    cadence: dict[str, Any]
    next_due: str | None
    overdue_s: float | None


def due_fields(found: Declared, starts: Sequence[object], paused: bool, now: datetime | None = None) -> DueFields:
    """The declaration judged against the newest of ``starts`` (ISO times; a holder's and the last
    run's) at ``now``: its next due time, and how overdue (``paused``: never; a name that is paused,
    or held by a run in progress)."""
    due = judge(found.cadence, _newest(starts), found.declared_at, now or datetime.now(timezone.utc), paused=paused)
    return DueFields(cadence_json(found.cadence),
                     due.next_due.strftime(ISO_FORMAT) if due.next_due is not None else None,
                     round(due.overdue_s, 3) if due.overdue_s is not None else None)


def _newest(starts: Sequence[object]) -> str | None:
    texts = [start for start in starts if isinstance(start, str) and start]
    return max(texts) if texts else None


def with_due_times(resolved: Settings, facts: list[JobFacts], ledger: Ledger | None) -> list[JobFacts]:
    """``lockrun metrics``' facts with each name's pause, next due start and overdue: the pauses and
    (with Redis) the fleet-wide declarations from the backend, the ledger's declarations else. A
    backend that cannot be asked leaves those gauges out (the ledger's metrics still matter)."""
    names = [job.name for job in facts]
    if not names:
        return facts
    pauses, backend_cadences = _pauses_and_cadences(resolved, names)
    declared = usable_declarations(names, backend_cadences, ledger)
    found = []
    for job in facts:
        paused = None if pauses is None else (job.name in pauses and not pauses[job.name].problem)
        found.append(_with_due(job, paused, declared.get(job.name)))
    return found


def _pauses_and_cadences(resolved: Settings, names: list[str]) -> tuple[dict[str, Any] | None, dict[str, object]]:
    """The names' pauses and declarations as the backend has them; no pauses (None) and no
    declarations when it cannot be asked."""
    from lockrun.backends.connect import open_backend

    try:
        backend = open_backend(resolved, resolved.socket_timeout or 5.0, resolved.connect_timeout)
        try:
            return backend.pauses(names), backend.cadences(names)
        finally:
            backend.close()
    except BackendUnavailable:
        return None, {}


def _with_due(job: JobFacts, paused: bool | None, declaration: Declared | None) -> JobFacts:
    """A job's facts with its pause and, if it declared a cadence, its next due start and overdue."""
    if declaration is None:
        return job._replace(paused=paused)
    due = judge(declaration.cadence, (job.last or {}).get("started_at"), declaration.declared_at,
                datetime.now(timezone.utc), paused=bool(paused))
    return job._replace(paused=paused, next_due_at=due.next_due.timestamp() if due.next_due else None,
                        overdue=due.overdue_s is not None if due.next_due else None)
