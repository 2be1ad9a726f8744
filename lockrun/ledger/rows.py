"""A run's row of the ledger read back: the columns every reader prints, in their order, each as
the type it should be whoever wrote it, and the query ``Ledger.history`` asks with."""

from __future__ import annotations

import json
import math
import sqlite3
from typing import TYPE_CHECKING, Any

from lockrun.core.readers import sql_int, text_or_none
from lockrun.core.record import IN_PROGRESS, ROW_FIELDS, Row, Status

if TYPE_CHECKING:
    from lockrun.ledger.timeline import KnownDead

# The columns of ``history --json``, in the order every reader prints them (the fleet record's too).
PUBLIC_FIELDS = ROW_FIELDS
SELECT = "SELECT " + ", ".join(PUBLIC_FIELDS) + ", pid_start, boot_id, pid_ns, machine_id FROM runs"


def _command_list(stored: object) -> list[str]:
    """The stored JSON argv as a list of strings, whatever the row holds."""
    try:
        command = json.loads(stored) if isinstance(stored, str) else stored
    except (ValueError, RecursionError):
        command = None
    if isinstance(command, list) and all(isinstance(arg, str) for arg in command):
        return command
    return [str(stored)] if stored not in (None, "") else []


def row_to_dict(row: sqlite3.Row, known_dead: KnownDead | None = None) -> Row:
    """One row as ``history --json`` shows it. SQLite keeps whatever type it was given, and a
    ledger may have been written by anyone: every column is read back as the type it should be.
    With ``known_dead``, a running row whose lockrun process is gone reads as abandoned."""
    item: Row = {key: text_or_none(row[key]) for key in PUBLIC_FIELDS}
    for key in ("exit_code", "signal", "exit_status", "pid", "fencing_token", "attempt"):
        item[key] = sql_int(row[key])
    for key in ("duration_s", "waited_s"):
        item[key] = _seconds(row[key])
    item["lock_lost_at_release"] = _flag(row["lock_lost_at_release"])
    item["command"] = _command_list(row["command"])
    if item["status"] == Status.RUNNING and _process_gone(row, known_dead):
        item["status"] = Status.ABANDONED  # its lockrun process is gone: it will never finish
    return item


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _flag(value: object) -> bool | None:
    return bool(value) if isinstance(value, int) and value in (0, 1) else None


def _process_gone(row: sqlite3.Row, known_dead: KnownDead | None) -> bool:
    """Whether the lockrun process that wrote ``row`` is known to be gone."""
    return known_dead is not None and known_dead(row["boot_id"], row["pid"], row["pid_start"], row["pid_ns"],
                                                 row["machine_id"])


def _as_stored(wanted: frozenset[str]) -> list[str]:
    """The statuses as the ledger stores them: ``abandoned`` is a ``running`` row."""
    return sorted({Status.RUNNING.value if status in IN_PROGRESS else status for status in wanted})


def history_query(name: str | None, host: str | None, since: str | None,
                  wanted: frozenset[str] | None) -> tuple[str, list[Any]]:
    """``Ledger.history``'s SELECT, newest first, and its parameters: the filters given, and the
    statuses ``wanted`` as stored (``abandoned`` is a running row of a dead lockrun)."""
    given = [(clause, value) for clause, value in (("name = ?", name), ("host = ?", host), ("started_at >= ?", since))
             if value is not None]
    where = [clause for clause, _value in given]
    params: list[Any] = [value for _clause, value in given]
    if wanted is not None:
        stored = _as_stored(wanted)
        where.append(f"status IN ({', '.join('?' * len(stored))})")
        params.extend(stored)
    return SELECT + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY started_at DESC", params
