"""The window of `lockrun timeline` from ``--since`` and ``--until``: durations and points in time.

Pure, like ``timeline``, whose ``Window`` this resolves.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta, timezone

from lockrun.core.errors import UsageError
from lockrun.views.timeline import Window

MAX_WINDOW_S = 3660 * 86400.0  # ten years and change
FIRST_YEAR, LAST_YEAR = 1970, 9998  # --since/--until times: far enough from datetime's own limits


def parse_moment(text: str, what: str) -> float | datetime:
    """A ``--since``/``--until`` value: a duration (``90m``, ``24h``, ``7d``) in seconds, or a point in time.

    Times: ``now``, ``today`` and ``yesterday`` (local midnight), ``HH:MM[:SS]`` (today, local),
    and ISO 8601 dates and date-times (``2026-11-30``, ``2026-11-30 14:00``,
    ``2026-11-30T14:00:00Z``, ``...+01:00``); without an offset they are local time.
    """
    from lockrun.config.values import parse_duration  # settings is the home of every duration rule

    value = str(text).strip()
    if value and value[-1] in "smhd" and value[:-1].replace(".", "", 1).isdigit():
        return parse_duration(value, what, maximum=MAX_WINDOW_S)
    try:
        moment = _parse_time(value)
    except OverflowError:
        moment = datetime.min.replace(tzinfo=timezone.utc)  # out of range: said below
    if moment is None:
        raise UsageError(
            f"invalid {what} {text!r}: expected a duration (90m, 24h, 7d) or a time (now, today, yesterday, "
            "14:00, 2026-11-30, '2026-11-30 14:00', 2026-11-30T14:00:00Z)"
        )
    if not FIRST_YEAR <= moment.year <= LAST_YEAR:
        raise UsageError(f"invalid {what} {text!r}: a time in the years {FIRST_YEAR} to {LAST_YEAR}")
    return moment


def _parse_time(value: str) -> datetime | None:
    local_now = datetime.now().astimezone()
    midnight = datetime.combine(local_now.date(), time()).astimezone()
    words = {"now": local_now, "today": midnight, "yesterday": _local(datetime.combine(
        local_now.date() - timedelta(days=1), time()))}
    if value.lower() in words:
        return words[value.lower()].astimezone(timezone.utc)
    try:
        if len(value) <= 8 and ":" in value:  # HH:MM or HH:MM:SS, today
            clock = time.fromisoformat(value)
            return _local(datetime.combine(local_now.date(), clock)).astimezone(timezone.utc)
        if value.endswith(("Z", "z")):
            value = value[:-1] + "+00:00"
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if not FIRST_YEAR <= moment.year <= LAST_YEAR:
        raise OverflowError(moment.year)
    return (_local(moment) if moment.tzinfo is None else moment).astimezone(timezone.utc)


def _local(naive: datetime) -> datetime:
    return naive.astimezone()  # a naive datetime is taken as local time


def resolve_window(since: float | datetime, until: float | datetime | None, now: datetime | None = None) -> Window:
    """``--since`` as a duration is the window's length, ending at ``--until`` (default: now);
    ``--until`` as a duration is that long ago."""
    now = now or datetime.now(timezone.utc)
    try:
        end = now if until is None else (now - timedelta(seconds=until) if isinstance(until, float) else until)
        start = end - timedelta(seconds=since) if isinstance(since, float) else since
    except OverflowError:
        raise UsageError("--since/--until: that is before the year 1") from None
    if start >= end:
        raise UsageError(f"--since ({_shown(start)}) must be before --until ({_shown(end)})")
    if (end - start).total_seconds() > MAX_WINDOW_S:
        raise UsageError(f"--since/--until: a window of at most {int(MAX_WINDOW_S // 86400)} days")
    return Window(start, end, now)


def _shown(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z").strip()
