"""The window of `lockrun timeline` from ``--since`` and ``--until``: durations and points in time.

Pure, like ``timeline``, whose ``Window`` this resolves.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from lockrun.config.moments import MAX_WINDOW_S, parse_moment
from lockrun.core.errors import UsageError
from lockrun.views.timeline import Window

__all__ = ["parse_moment", "resolve_window"]  # parse_moment lives in config/, where history finds it too


def resolve_window(since: float | datetime, until: float | datetime | None, now: datetime | None = None) -> Window:
    """``--since`` as a duration is the window's length, ending at ``--until`` (default: now);
    ``--until`` as a duration is that long ago."""
    now = now or datetime.now(timezone.utc)
    start, end = _bounds(since, until, now)
    if start >= end:
        raise UsageError(f"--since ({_shown(start)}) must be before --until ({_shown(end)})")
    if (end - start).total_seconds() > MAX_WINDOW_S:
        raise UsageError(f"--since/--until: a window of at most {int(MAX_WINDOW_S // 86400)} days")
    return Window(start, end, now)


def _bounds(since: float | datetime, until: float | datetime | None, now: datetime) -> tuple[datetime, datetime]:
    """The window's start and end: a duration counted back from the end (``until``: from now)."""
    try:
        end = now if until is None else (now - timedelta(seconds=until) if isinstance(until, float) else until)
        start = end - timedelta(seconds=since) if isinstance(since, float) else since
    except OverflowError:
        raise UsageError("--since/--until: that is before the year 1") from None
    return start, end


def _shown(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z").strip()
