"""The shape of one run as every reader shows it (``history --json``), and its flat string form.

The ledger stores runs in SQLite; the fleet record (docs/fleet.md "One fleet, one memory")
stores them in Redis as flat field/value strings, written by the lock scripts and read
back by any host. Whatever comes back from Redis may have been written by someone else,
so :func:`row_from_fields` accepts anything and keeps only values of the right type.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from lockrun.core.readers import parse_bool, parse_command, parse_float, parse_int, text_of


class Status(str, Enum):
    """A run's ledger status: one vocabulary for the ledger, the fleet record, the CLI, the
    tables and charts, webhooks and metrics (docs/operating.md "The run ledger")."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"  # the command exited 0
    FAILED = "failed"  # the command exited non-zero
    BUSY = "busy"  # the lock was held elsewhere: skipped
    DUPLICATE = "duplicate"  # the --once key had already succeeded: skipped
    PAUSED = "paused"  # the name was paused (lockrun pause): skipped
    TIMEOUT = "timeout"  # --timeout expired: lockrun stopped the command
    LOST = "lost"  # the lease was lost: lockrun stopped the command
    PREEMPTED = "preempted"  # another run asked to replace this one (--replace)
    KILLED = "killed"  # a signal lockrun did not send for a timeout or a lost lease ended the command
    UNAVAILABLE = "unavailable"  # the backend could not be reached
    ERROR = "error"  # the command could not start, or lockrun failed
    UNLOCKED = "unlocked"  # unlock's record of clearing a lock
    ABANDONED = "abandoned"  # shown for a running row whose lockrun is gone: it will never finish

    __str__ = str.__str__  # "failed", as stored, in f-strings and messages too


#: The statuses a run can end in (what --notify-on may name): all but running, unlocked and
#: abandoned, which no run ends in.
FINAL_STATUSES = (
    Status.SUCCEEDED, Status.FAILED, Status.BUSY, Status.DUPLICATE, Status.TIMEOUT, Status.LOST,
    Status.PREEMPTED, Status.KILLED, Status.UNAVAILABLE, Status.ERROR, Status.PAUSED,
)
#: Outcomes where nothing ran: skips, and the record of an unlock. Not a "last run".
NOT_A_RUN = frozenset({Status.BUSY, Status.DUPLICATE, Status.UNLOCKED, Status.PAUSED})
#: Stored as running; read as abandoned once its lockrun is known to be gone.
IN_PROGRESS = frozenset({Status.RUNNING, Status.ABANDONED})
#: ``history --status failures``: every way a run can go wrong (docs/operating.md "The run ledger").
FAILURES = "failures"
FAILURE_STATUSES = (
    Status.FAILED, Status.TIMEOUT, Status.LOST, Status.KILLED, Status.ABANDONED, Status.ERROR, Status.UNAVAILABLE,
)

#: A run row as ``history --json`` prints it: each of ROW_FIELDS to a JSON value (text, a
#: number, the command as a list of strings, or None where it is not known).
Row = dict[str, Any]

# The fields of a run row, in the order ``history --json`` prints them.
ROW_FIELDS = (
    "run_id",
    "name",
    "status",
    "exit_code",
    "signal",
    "host",
    "pid",
    "command",
    "backend",
    "started_at",
    "ended_at",
    "duration_s",
    "fencing_token",
    "once_key",
    "error",
    "note",
    "exit_status",
    "waited_s",
    "lock_lost_at_release",
    "attempt",  # --retry: 1, 2, ... (None: a run without --retry); docs/operating.md "Retries and jitter"
    "first_run_id",  # --retry: the run id of the first attempt (None: a run without --retry)
)
INT_FIELDS = frozenset({"exit_code", "signal", "pid", "fencing_token", "exit_status", "attempt"})
FLOAT_FIELDS = frozenset({"duration_s", "waited_s"})
# True: the release found the lock no longer this run's (expired, evicted, stolen, cleared), so
# another run may have overlapped it; False: released as its own; None: no release (a skip, a
# run that never held the lock, a release that did not reach the backend, rows from before).
BOOL_FIELDS = frozenset({"lock_lost_at_release"})
# The field of the fleet record's ``counts`` hash that counts those runs (the release script
# spells it out too). No status has a colon: readers of statuses skip it.
LOST_AT_RELEASE_COUNT = "flag:lock_lost_at_release"
# What a release script chooses between (the run's note and whether the lock was still its own):
# the end of a row's JSON, after everything else (see row_json_parts).
RELEASE_DECIDES = ("note", "lock_lost_at_release")


# A field longer than this was not written by lockrun either (errors and notes are one line).
TEXT_LIMIT = 4096
# The output tail kept in the fleet's ``last`` record (the ledger keeps what --capture-tail asked).
FLEET_TAIL_BYTES = 4096


def row_json_parts(row: Row) -> tuple[str, str]:
    """A run row as one JSON object (the fleet's ``last`` record keeps it so, to be read fast), cut
    in two: everything but RELEASE_DECIDES (without the closing brace), and those fields with the
    brace. A release script appends one of two tails to one head, so it can record whether the
    lock was still the run's without a JSON library (Redis' cjson would round a fencing token to
    14 digits)."""
    shown = {field: row.get(field) for field in ROW_FIELDS if field not in ("name", "backend", *RELEASE_DECIDES)}
    head = json.dumps(shown)[:-1]
    tail = json.dumps({field: row.get(field) for field in RELEASE_DECIDES})[1:]
    return head, (", " + tail if shown else tail)


def fields_from_json(text: object) -> dict[str, object]:
    """The fields of a row kept as JSON (:func:`row_json_parts`); anything unreadable is no fields."""
    try:
        parsed = json.loads(text_of(text)) if isinstance(text, (str, bytes)) else None
    except (ValueError, RecursionError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def row_from_fields(name: str, fields: Mapping[Any, object], backend: str = "redis") -> Row:
    """A run row from stored string fields, whoever wrote them.

    Unknown fields are dropped, values of the wrong type read as None, text is cut
    at TEXT_LIMIT: a hostile or broken record shows as a strange run, never as an error.
    """
    raw = {text_of(key): value for key, value in fields.items()}
    row: Row = {}
    for field in ROW_FIELDS:
        if field == "name":
            row[field] = name
        elif field == "backend":
            row[field] = backend
        else:
            row[field] = _read_field(field, raw.get(field))
    if not row["status"]:
        row["status"] = "unknown"
    return row


def _text_field(value: object) -> str:
    return text_of(value)[:TEXT_LIMIT]


#: How a stored field of a run row is read (any other: as text, cut at TEXT_LIMIT).
_FIELD_READERS: dict[str, Callable[[object], object]] = {
    "command": parse_command,
    **dict.fromkeys(INT_FIELDS, parse_int),
    **dict.fromkeys(FLOAT_FIELDS, parse_float),
    **dict.fromkeys(BOOL_FIELDS, parse_bool),
}


def _read_field(field: str, value: object) -> object:
    """A field's stored value as the row holds it; a missing one is None (the command: [])."""
    if value is None:
        return [] if field == "command" else None
    return _FIELD_READERS.get(field, _text_field)(value)


def tail_for_fleet(tail: str | None) -> str:
    """The last FLEET_TAIL_BYTES of an output tail, cut on a character boundary; "" for none."""
    if not tail:
        return ""
    data = tail.encode("utf-8", "replace")
    if len(data) <= FLEET_TAIL_BYTES:
        return tail
    return data[-FLEET_TAIL_BYTES:].decode("utf-8", "ignore")
