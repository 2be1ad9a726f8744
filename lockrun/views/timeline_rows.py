"""Timeline lanes from ``history --json``-shaped rows, from any source (the fleet record, or rows
read back some other way than the ledger's own reads): each row read defensively as a Span.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timezone
from operator import itemgetter
from typing import Any

from lockrun.core.clock import parse_iso
from lockrun.views.timeline import MARK_STATUSES, Lane, Span, Window, iso, lanes

_START, _END, _STATUS = 0, 1, 2  # a Span's first fields (timeline.RunSpan)


def lanes_from_rows(rows: Iterable[dict[str, Any]], window: Window, *, host: str | None = None,
                    by_host: bool = False) -> list[Lane]:
    """Lanes from ``history --json``-shaped rows, from any source (the ledger, the fleet record).

    Rows are read defensively: a row whose times cannot be read is left out; only the runs that
    overlap the window (and the skips inside it) are kept.
    """
    since, until = iso(window.since), iso(window.until)
    per_name: dict[str, tuple[list[Span], list[Span]]] = {}
    for row in rows:
        span = _span(row, host)
        if span is None or not _overlaps(span, since, until):
            continue
        runs, marks = per_name.setdefault(row["name"], ([], []))
        if span[_STATUS] not in MARK_STATUSES:
            runs.append(span)
        elif span[_START] >= since:
            marks.append(span)
    for _runs, marks in per_name.values():
        marks.sort(key=itemgetter(_START))  # by start alone: two skips at one moment may differ in any field
    return list(lanes(((name, *per_name[name]) for name in sorted(per_name)), by_host))


def _overlaps(span: Span, since: str, until: str) -> bool:
    return span[_START] < until and (span[_END] is None or span[_END] >= since)


def _span(row: object, host: str | None) -> Span | None:
    """A row as a Span, or None: not a row of a name, another host's (``host``), or times that
    cannot be read."""
    if not isinstance(row, dict) or not isinstance(row.get("name"), str):
        return None
    if host is not None and row.get("host") != host:
        return None
    times = _times(row)
    if times is None:
        return None
    return (*times, row.get("status") if isinstance(row.get("status"), str) else "?",
            _finite(row.get("duration_s")), _text(row.get("host")), _text(row.get("run_id")),
            _integer(row.get("exit_code")), _integer(row.get("exit_status")), _integer(row.get("signal")))


def _times(row: dict[Any, Any]) -> tuple[str, str | None] | None:
    """A row's start and end (None: not ended) in the ledger's form; None when one cannot be read."""
    started = _canonical(row.get("started_at"))
    ended = _canonical(row.get("ended_at")) if row.get("ended_at") is not None else None
    if started is None or (ended is None and row.get("ended_at") is not None):
        return None
    return started, ended


def _finite(value: object) -> float | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return None
    return float(value)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _canonical(value: object) -> str | None:
    """Any ISO time a source wrote, in the ledger's fixed-width form (so that it sorts as text)."""
    if not isinstance(value, str):
        return None
    if len(value) == 27 and value.endswith("Z") and parse_iso(value) is not None:
        return value
    moment = _moment(value)
    if moment is None:
        return None
    try:
        return iso(moment)
    except (OverflowError, ValueError):
        return None


def _moment(value: str) -> datetime | None:
    """An ISO time (``Z`` for UTC too; no zone: UTC, as stored times are); None if it is none."""
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment
