"""The ``--once`` key rules: a key template expanded with strftime in the name's zone, and the key
of a ``--once-per`` period (docs/reference.md "`--once KEY` and `--once-per PERIOD`: idempotency").
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from lockrun.core.errors import UsageError
from lockrun.core.printable import quoted

if TYPE_CHECKING:
    from lockrun.core.zones import Zone


ONCE_KEY_RULE = "1 to 200 characters from A-Z a-z 0-9 . _ : @ / - after strftime expansion"
_ONCE_KEY_RE = re.compile(r"[A-Za-z0-9._:@/\-]{1,200}")


def expand_once_key(template: str, zone: Zone | None = None) -> str:
    """``report-%Y-%m-%d`` -> ``report-2026-11-29``, in ``zone`` (None: the process's local time)."""
    from lockrun.core.zones import strftime

    key = strftime(template, zone)
    if not _ONCE_KEY_RE.fullmatch(key):
        raise UsageError(f"invalid --once key {quoted(template)} (expands to {quoted(key)}): use {ONCE_KEY_RULE}")
    return key


# --once-per PERIOD: the key is the period's start in local time, so a crontab needs no %.
ONCE_PERIODS = {"hour": "%Y-%m-%dT%H", "day": "%Y-%m-%d", "week": "%G-W%V", "month": "%Y-%m"}


def once_key_for_period(period: str, now: float | None = None, zone: Zone | None = None) -> str:
    """``day`` -> ``2026-12-01``; ``week`` is the ISO week (``2026-W49``), ``hour`` ``2026-12-01T14``;
    the period's start in ``zone`` (None: the process's local time)."""
    from lockrun.core.zones import strftime

    return strftime(ONCE_PERIODS[period], zone, now)
