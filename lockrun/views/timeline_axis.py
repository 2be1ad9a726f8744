"""The time axis of `lockrun timeline`: where its ticks go and what they say, in local time.

Pure, like ``timeline``: the text chart and the SVG both place their ticks from here.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, time, timedelta, timezone

from lockrun.views.timeline import Window

_MINUTE, _HOUR, _DAY = 60, 3600, 86400
_STEPS = (1, 2, 5, 10, 15, 30, _MINUTE, 2 * _MINUTE, 5 * _MINUTE, 10 * _MINUTE, 15 * _MINUTE, 30 * _MINUTE,
          _HOUR, 2 * _HOUR, 3 * _HOUR, 6 * _HOUR, 12 * _HOUR, _DAY, 2 * _DAY, 7 * _DAY, 14 * _DAY)
_MONTH_STEPS = (1, 3, 6, 12, 24, 60)


def ticks(window: Window, columns: int) -> list[tuple[int, str]]:
    """(column, label) of each tick, in local time: on the hour for a day, at midnight for a week.

    The step is the smallest one whose labels fit between two ticks with a space to spare.
    """
    per_column = window.seconds / columns
    for step in _STEPS:
        if step / per_column >= _label_width(step) + 1:
            return _place(_aligned(window, step), window, columns, step)
    for months in _MONTH_STEPS:
        if months * 28 * _DAY / per_column >= (5 if months >= 12 else 8):  # "2026" or "2026-11", and a space
            return _place(_month_starts(window, months), window, columns, months * 28 * _DAY)
    return []


def _label_width(step: int) -> int:
    if step < _MINUTE:
        return 8  # 14:03:10
    return 6  # 14:00, and "Tue 01" at midnight; "Tue 01" or "Nov 30" for day steps


def _label(moment: datetime, step: int, window: Window) -> str:
    local = moment.astimezone()
    if step >= 12 * 28 * _DAY:
        return local.strftime("%Y")
    if step >= 28 * _DAY:
        return local.strftime("%Y-%m")
    if step >= _DAY or (local.hour, local.minute, local.second) == (0, 0, 0):
        return local.strftime("%a %d" if window.seconds <= 16 * _DAY else "%b %d")
    return local.strftime("%H:%M:%S" if step < _MINUTE else "%H:%M")


def _aligned(window: Window, step: int) -> Iterable[datetime]:
    """Local wall-clock multiples of ``step`` (weeks start on Monday) within the window."""
    local_since = window.since.astimezone()
    midnight = datetime.combine(local_since.date(), time())  # naive local
    if step >= 7 * _DAY:
        midnight -= timedelta(days=midnight.weekday())
    elif step >= _DAY:
        midnight -= timedelta(days=midnight.toordinal() % (step // _DAY))
    elapsed = (local_since.replace(tzinfo=None) - midnight).total_seconds()
    moment = midnight + timedelta(seconds=step * int(elapsed // step))
    seen = set()
    while True:
        aware = _local(moment).astimezone(timezone.utc)
        if aware >= window.until:
            return
        if aware >= window.since and aware not in seen:
            seen.add(aware)
            yield aware
        moment += timedelta(seconds=step)


def _month_starts(window: Window, months: int) -> Iterable[datetime]:
    local = window.since.astimezone()
    year, month = local.year, local.month - (local.month - 1) % months
    while True:
        moment = _local(datetime(year, month, 1)).astimezone(timezone.utc)
        if moment >= window.until:
            return
        if moment >= window.since:
            yield moment
        month += months
        if month > 12:
            year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
        if year > 9999:
            return


def _place(moments: Iterable[datetime], window: Window, columns: int, step: int) -> list[tuple[int, str]]:
    """Each label starts at its tick's column; one that would run into the previous label or
    past the right edge is left out (its tick too)."""
    placed: list[tuple[int, str]] = []
    free_from = 0
    for moment in moments:
        column = window.column_of(moment, columns)
        label = _label(moment, step, window)
        if column < free_from or column + len(label) > columns:
            continue
        placed.append((column, label))
        free_from = column + len(label) + 1
    return placed


def _local(naive: datetime) -> datetime:
    return naive.astimezone()  # a naive datetime is taken as local time
