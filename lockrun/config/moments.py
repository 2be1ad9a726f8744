"""Points in time as ``--since`` and ``--until`` take them (``timeline``, ``history``): a duration
ago in the one syntax of every time value (``90``, ``2m``, ``7d``), or a time (``yesterday``,
``14:00``, ``2026-11-30``). Pure; the window they make is ``views/timeline_window``'s.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta, timezone

from lockrun.config.values import TIME_SYNTAX, is_time_span, parse_time_span
from lockrun.core.errors import UsageError
from lockrun.core.printable import quoted

MAX_WINDOW_S = 3660 * 86400.0  # ten years and change
FIRST_YEAR, LAST_YEAR = 1970, 9998  # --since/--until times: far enough from datetime's own limits


def parse_moment(text: str, what: str, maximum: float = MAX_WINDOW_S) -> float | datetime:
    """A ``--since``/``--until`` value: a duration (``90``, ``90m``, ``1.5h``, ``7d``) in seconds, or a point in time.

    Times: ``now``, ``today`` and ``yesterday`` (local midnight), ``HH:MM[:SS]`` (today, local),
    and ISO 8601 dates and date-times (``2026-11-30``, ``2026-11-30 14:00``,
    ``2026-11-30T14:00:00Z``, ``...+01:00``); without an offset they are local time. A duration
    is at most ``maximum`` (the timeline's window; ``history --since``: 100 years).
    """
    value = str(text)
    if is_time_span(value):  # 90, 90s, 2m, 1.5h, 7d: the one syntax of every time value
        return parse_time_span(value, what, maximum=maximum)
    try:
        moment = _parse_time(value)
    except OverflowError:
        moment = datetime.min.replace(tzinfo=timezone.utc)  # out of range: said below
    if moment is None:
        raise UsageError(
            f"invalid {what} {quoted(text)}: expected a duration ({TIME_SYNTAX}) or a time (now, today,"
            " yesterday, 14:00, 2026-11-30, '2026-11-30 14:00', 2026-11-30T14:00:00Z)"
        )
    if not FIRST_YEAR <= moment.year <= LAST_YEAR:
        raise UsageError(f"invalid {what} {quoted(text)}: a time in the years {FIRST_YEAR} to {LAST_YEAR}")
    return moment


def _parse_time(value: str) -> datetime | None:
    if not value.isascii() or value != value.strip():  # ASCII digits only, nothing around them: the one rule
        return None
    local_now = datetime.now().astimezone()
    named = _named_moment(value.lower(), local_now)
    if named is not None:
        return named.astimezone(timezone.utc)
    try:
        if len(value) <= 8 and ":" in value:  # HH:MM or HH:MM:SS, today
            clock = time.fromisoformat(value)
            return _local(datetime.combine(local_now.date(), clock)).astimezone(timezone.utc)
        moment = _iso_moment(value)
    except ValueError:
        return None
    if not FIRST_YEAR <= moment.year <= LAST_YEAR:
        raise OverflowError(moment.year)
    return (_local(moment) if moment.tzinfo is None else moment).astimezone(timezone.utc)


def _named_moment(word: str, local_now: datetime) -> datetime | None:
    """``now``, ``today`` (its midnight) or ``yesterday`` (its midnight), in local time; else None."""
    midnight = datetime.combine(local_now.date(), time()).astimezone()
    words = {"now": local_now, "today": midnight, "yesterday": _local(datetime.combine(
        local_now.date() - timedelta(days=1), time()))}
    return words.get(word)


def _iso_moment(value: str) -> datetime:
    """An ISO 8601 date or time (``Z`` for UTC too); ValueError if it is none."""
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    return datetime.fromisoformat(value)


def _local(naive: datetime) -> datetime:
    return naive.astimezone()  # a naive datetime is taken as local time


def parse_pause_end(text: str, what: str, now_epoch_s: float, maximum_s: float) -> float:
    """``pause --until``: a time (``14:00``, ``2026-12-01``, ``2026-12-01T14:00:00Z``; local time
    without an offset) after now and at most ``maximum_s`` ahead, as epoch seconds. A duration is
    refused here: that is ``--for``."""
    value = str(text)
    if is_time_span(value):
        raise UsageError(f"invalid {what} {quoted(text)}: a time (14:00, 2026-12-01, 2026-12-01T14:00:00Z); for a"
                         " duration use --for")
    try:
        moment = _parse_time(value)
    except OverflowError:
        moment = None
    if moment is None:
        raise UsageError(f"invalid {what} {quoted(text)}: expected a time (14:00, 2026-12-01, '2026-12-01 14:00',"
                         " 2026-12-01T14:00:00Z)")
    ends = moment.timestamp()
    if not now_epoch_s < ends <= now_epoch_s + maximum_s:
        raise UsageError(f"invalid {what} {quoted(text)}: a time after now and at most {maximum_s / 86400:g}d ahead")
    return ends
