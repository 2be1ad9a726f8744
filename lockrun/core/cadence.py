"""How often a job is expected to start (``--every`` / ``--schedule``, ``--grace``), and when it is due.

A declaration travels with every run that makes it and is kept with the name (docs/operating.md
"Declaring a cadence"): as compact JSON, the same in the fleet record and the ledger. What comes
back may have been written by anyone: :func:`parse_cadence` keeps only a declaration it can
use. The due times are computed here, from the newest start and the declaration:

- ``--every D``: the next start is due D after the newest one (after the declaration itself when
  no run has started since);
- ``--schedule 'CRON'`` (5 fields, evaluated in its zone, by cronsim): due at the first fire time
  after the newest start.

A name is overdue once its due time plus the grace has passed with no start; a paused name never is.
"""

from __future__ import annotations

import functools
import json
import math
from datetime import datetime, timedelta, timezone, tzinfo
from typing import NamedTuple

from lockrun.core.clock import parse_iso
from lockrun.core.defaults import DEFAULT_GRACE_S

CRON_FIELDS = 5
#: A stored declaration longer than this was not written by lockrun.
MAX_DECLARATION = 512


class Cadence(NamedTuple):
    """One declaration: ``every_s`` or ``schedule`` (with its zone ``tz``), and the grace."""

    every_s: float | None = None
    schedule: str | None = None
    tz: str | None = None
    grace_s: float = DEFAULT_GRACE_S

    def to_json(self) -> str:
        """The stored form: compact, keys in one order, so that an unchanged declaration is the same text."""
        body: dict[str, object] = ({"every": self.every_s} if self.every_s is not None
                                   else {"schedule": self.schedule, "tz": self.tz})
        body["grace"] = self.grace_s
        return json.dumps(body, separators=(",", ":"))

    def describe(self) -> str:
        """``every 1h`` or ``0 3 * * * (Europe/Berlin)``, for status lines."""
        from lockrun.core.clock import exact_duration

        if self.every_s is not None:
            return f"every {exact_duration(self.every_s)}"
        return f"{self.schedule} ({self.tz or 'UTC'})"


def cron_problem(expression: str) -> str | None:
    """Why ``expression`` is no 5-field cron expression cronsim can evaluate, or None."""
    from cronsim import CronSim, CronSimError

    if len(expression.split()) != CRON_FIELDS:
        return f"expected {CRON_FIELDS} fields (minute hour day-of-month month day-of-week)"
    try:
        CronSim(expression, datetime.now(timezone.utc))
    except CronSimError as exc:
        return str(exc) or "not a cron expression"
    return None


def parse_cadence(text: object) -> Cadence | None:
    """A stored declaration (JSON text or bytes), or None when it is none lockrun can use."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str) or len(text) > MAX_DECLARATION:
        return None
    return _parsed(text)


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> Cadence | None:
    """:func:`parse_cadence` of one text: many names declare the same, and a schedule is checked by cronsim."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    grace = _seconds(data.get("grace"), allow_zero=True)
    grace_s = grace if grace is not None else DEFAULT_GRACE_S
    every = _seconds(data.get("every"))
    if every is not None:
        return Cadence(every_s=every, grace_s=grace_s)
    return _scheduled(data.get("schedule"), data.get("tz"), grace_s)


def _scheduled(schedule: object, tz: object, grace_s: float) -> Cadence | None:
    """A declared cron schedule and its zone, if they are ones lockrun can use."""
    if not isinstance(schedule, str) or cron_problem(schedule) is not None:
        return None
    if tz is not None and (not isinstance(tz, str) or _zone(tz) is None):
        return None
    return Cadence(schedule=schedule, tz=tz, grace_s=grace_s)


def _seconds(value: object, allow_zero: bool = False) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    ok = math.isfinite(number) and (number > 0 or (allow_zero and number == 0)) and number <= 365 * 86400
    return number if ok else None


def _zone(name: str) -> tzinfo | None:
    from zoneinfo import ZoneInfo

    try:
        return ZoneInfo(name)
    except Exception:  # noqa: BLE001 - ZoneInfoNotFoundError, ValueError: whatever an odd stored name raises
        return None


def due_after(cadence: Cadence, start: datetime) -> datetime:
    """The first due time after ``start`` (UTC)."""
    if cadence.every_s is not None:
        return start + timedelta(seconds=cadence.every_s)
    from cronsim import CronSim

    zone = (_zone(cadence.tz) if cadence.tz else None) or timezone.utc
    return next(CronSim(cadence.schedule or "", start.astimezone(zone))).astimezone(timezone.utc)


class Due(NamedTuple):
    """A name's due time (the first after its newest start), and how long past it a name with no
    start since is, once the grace is over too (None: not overdue)."""

    next_due: datetime | None
    overdue_s: float | None


def judge(cadence: Cadence | None, newest_start: object, declared_at: object, now: datetime,
          paused: bool = False) -> Due:
    """When ``cadence`` wants the next start after ``newest_start`` (an ISO time; None: the
    declaration's ``declared_at``), and whether it is overdue at ``now``. A paused name never is."""
    if cadence is None:
        return Due(None, None)
    start = parse_iso(newest_start) or parse_iso(declared_at)
    if start is None:
        return Due(None, None)
    try:
        due = due_after(cadence, start)
    except (OverflowError, ValueError, StopIteration):
        return Due(None, None)
    late = (now - due).total_seconds()
    if paused or late <= cadence.grace_s:
        return Due(due, None)
    return Due(due, late)


def overdue_text(seconds: float) -> str:
    """``2h13m``, ``3d4h``, ``45m``, ``30s``: how long a name is overdue, as the contract shows it."""
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m"
    return f"{secs}s"
