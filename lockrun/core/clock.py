"""Wall-clock timestamps as lockrun stores them: ISO 8601 UTC, fixed width, so they sort as text.

Deadlines never use these: they live on the monotonic clock (see keeper.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

ISO_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

#: No time lockrun writes is this late (epoch seconds: about the year 5138). One at or past it,
#: read back from Redis or disk, is foreign: far enough inside datetime's year 9999 that a year
#: or more added to it (a next due time) still formats.
EPOCH_S_LIMIT = 10**11


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).strftime(ISO_FORMAT)


def iso_ago(seconds: float) -> str:
    """The timestamp ``seconds`` before now."""
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds)).strftime(ISO_FORMAT)


def parse_iso(text: object) -> datetime | None:
    """A stored timestamp, or None for anything that is not one (rows may hold any type)."""
    if not isinstance(text, str) or not text.endswith("Z"):
        return None
    try:
        # fromisoformat is C code, strptime is not: status parses one per held lock.
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def seconds_since(text: object, now: datetime | None = None) -> float | None:
    """Age of a stored timestamp in seconds, or None if it cannot be read."""
    then = parse_iso(text)
    if then is None:
        return None
    return round(((now or datetime.now(timezone.utc)) - then).total_seconds(), 3)


def age_s(text: object, now: datetime | None = None) -> float | None:
    """How long ago a stored timestamp was, never less than 0: a timestamp ahead of ``now`` (its
    writer's clock is ahead of the reader's) is taken as just now. None if it cannot be read."""
    seconds = seconds_since(text, now)
    return None if seconds is None else max(0.0, seconds)


def reading_clock(stamped: object, age: object) -> datetime | None:
    """The clock an age was measured on, as of the reading: ``stamped`` + ``age`` (a heartbeat
    and its age, both by a Redis server's TIME); None when either is missing."""
    then = parse_iso(stamped)
    if then is None or isinstance(age, bool) or not isinstance(age, (int, float)) or not abs(age) < 1e9:
        return None
    return then + timedelta(seconds=age)


def human_duration(seconds: float | None) -> str:
    """``42.0s``, ``3.5m``, ``2.1h``, ``4.0d``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    value = float(seconds)
    for limit, unit, size in ((60, "s", 1), (3600, "m", 60), (86400, "h", 3600)):
        if abs(value) < limit:
            return f"{value / size:.1f}{unit}"
    return f"{value / 86400:.1f}d"


def exact_duration(seconds: float) -> str:
    """A duration as it would be typed: ``90d``, ``12h``, ``30m``, else seconds (``45s``, ``1.5s``)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
