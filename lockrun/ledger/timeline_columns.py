"""A lane's runs as columns (ledger/timeline.py ``LedgerTimeline.columns``): the comma-joined
starts and ends SQLite gives, split; the runs that did not succeed, per status; the runs read one
by one after them; and the status of the last run. Pure: lists in, lists out.
"""

from __future__ import annotations

from typing import Any

from lockrun.core.record import NOT_A_RUN, Status

#: The runs that did not succeed, per status: their starts and their ends.
Others = dict[Any, tuple[list[str], list[str]]]
#: A row as SQLite gives it.
SqlRow = tuple[Any, ...]

_SUCCEEDED = str(Status.SUCCEEDED)
WRITTEN = len("2026-11-30T14:03:12.000000Z")  # a time as lockrun writes it (clock.ISO_FORMAT)


def split_joined(joined: bytes | None, count: int) -> list[str] | None:
    """``count`` values that SQLite joined with commas, or None if a value held a comma itself."""
    if joined is None:
        return [] if count == 0 else None
    values = joined.decode("utf-8", "replace").split(",")
    return values if len(values) == count else None


def others_of(by_status: list[SqlRow]) -> Others | None:
    """The runs that did not succeed, per status, split; None for a status that is a number or a
    blob, or a value that held a comma."""
    others: Others = {}
    for kind, status, status_count, status_starts, status_ends in by_status:
        pair = split_joined(status_starts, status_count), split_joined(status_ends, status_count)
        if kind != b"text" or pair[0] is None or pair[1] is None:
            return None
        others[status.decode("utf-8", "replace")] = (pair[0], pair[1])
    return others


def add_tail(starts: list[str], ends: list[str], others: Others, marks: list[SqlRow], tail: list[SqlRow], since: str,
             last: Any) -> tuple[Any, list[float]]:
    """The runs that end after the window, after the others (and their skips to ``marks``): the
    status of the last run, and their durations."""
    durations: list[float] = []
    for started, ended, status, duration in tail:
        if status in NOT_A_RUN:
            if started >= since:
                marks.append((started, ended, status))
            continue
        last = append_run(starts, ends, others, started, ended, status)
        if duration is not None:
            durations.append(duration)
    return last, durations


def append_run(starts: list[str], ends: list[str], others: Others, start: str, end: str, status: Any) -> Any:
    """One more run after the others (one that ends after the window, or has not ended); its status."""
    starts.append(start)
    ends.append(end)
    if status != Status.SUCCEEDED:
        status_starts, status_ends = others.setdefault(status, ([], []))
        status_starts.append(start)
        status_ends.append(end)
    return status


def last_status(starts: list[str], ends: list[str], others: Others) -> Any:
    """The status of the last of the runs in index order (by end, start, then status): of several
    with the same end and start, the last status in that order; None when there are none."""
    if not starts:
        return None
    end, start = ends[-1], starts[-1]
    tied = _trailing(starts, ends, start, end)
    present = set()
    for status, (status_starts, status_ends) in others.items():
        same = _trailing(status_starts, status_ends, start, end)  # a status's own runs are in the same order
        if same:
            present.add(status)
            tied -= same
    if tied > 0:
        present.add(_SUCCEEDED)
    return max(present)


def _trailing(starts: list[str], ends: list[str], start: str, end: str) -> int:
    """How many of the last runs started at ``start`` and ended at ``end``."""
    count = 0
    while count < len(starts) and ends[-1 - count] == end and starts[-1 - count] == start:
        count += 1
    return count


def written(time: object) -> bool:
    """A time as lockrun writes it (clock.ISO_FORMAT: 27 ASCII characters)."""
    return isinstance(time, str) and len(time) == WRITTEN and time.isascii()


def as_written(joined: bytes | None, count: int) -> bool:
    """Whether ``count`` values that SQLite joined with commas (and no more commas) are all times
    as lockrun writes them: then a comma stands after every 27 bytes, and all are ASCII."""
    return joined is None or (len(joined) == count * (WRITTEN + 1) - 1 and joined.isascii()
                              and joined[WRITTEN::WRITTEN + 1] == b"," * (count - 1))
