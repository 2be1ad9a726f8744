"""The timeline's reads of the run ledger: which lanes a window has, and their runs as rows.

A busy week is a million rows, so these reads return plain, short tuples (in the field order of
``timeline.RunSpan``) from one index range per name, one name at a time. ``ledger_lanes`` reads
the same runs as columns, for lanes that need no tuple per run. Both work through the ledger's
connection helper (``Ledger._connection``: "is it open", and SQLite errors as LedgerError); the
ledger hands them out (``Ledger.timeline()``, ``Ledger.lanes()``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from itertools import compress
from operator import itemgetter, not_
from typing import TYPE_CHECKING, Any

from lockrun.ledger_file import LIVENESS_COLUMNS
from lockrun.record import NOT_A_RUN, Status

if TYPE_CHECKING:
    from lockrun.ledger import KnownDead

#: The ledger's connection helper: the open database for one operation, SQLite errors translated.
Connection = Callable[[], contextlib.AbstractContextManager[sqlite3.Connection]]

#: A row as SQLite gives it (plain tuples: several times cheaper than sqlite3.Row).
Row = tuple[Any, ...]

SKIPS = "(" + ", ".join(f"'{status}'" for status in sorted(NOT_A_RUN)) + ")"  # outcomes where nothing ran, for SQL

# A run as the timeline reads it (RunSpan's first fields): a duration that is not a plain number
# is None, as it is for a run that has not ended.
SPAN = ("started_at, ended_at, status,"
        " CASE WHEN typeof(duration_s) IN ('real', 'integer') AND abs(duration_s) < 1e12 THEN duration_s END")
# RunSpan's fields for the SVG's tooltips.
DETAIL = ", host, run_id, exit_code, exit_status, signal"


def open_sql(columns: str, host_filter: str) -> str:
    """A name's rows without an end (skips aside), with what it takes to tell whether their
    lockrun is still alive after ``columns`` (LIVENESS_COLUMNS: host, boot id, pid, ...)."""
    return (
        f"SELECT {columns}, {LIVENESS_COLUMNS} FROM runs WHERE name = :name AND ended_at IS NULL"
        f" AND started_at < :until AND typeof(started_at) = 'text' AND status NOT IN {SKIPS}{host_filter}"
        " ORDER BY started_at"
    )


def open_status(row: Row, width: int, known_dead: KnownDead | None) -> Any:
    """A ``running`` row (of ``open_sql``) whose lockrun process is gone is ``abandoned``: it will
    never finish. ``width``: the columns before the liveness ones."""
    if row[2] == Status.RUNNING and known_dead is not None and known_dead(*row[width:width + 6]):
        return Status.ABANDONED
    return row[2]


def rows(db: sqlite3.Connection, cursor: sqlite3.Cursor, sql: str, params: dict[str, Any]) -> list[Row]:
    """All rows of a query; text that is not UTF-8 (a row someone else wrote) is read with
    replacement characters instead of failing the whole query."""
    try:
        return cursor.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc):
            raise
    db.text_factory = lambda data: data.decode("utf-8", "replace")
    try:
        return cursor.execute(sql, params).fetchall()
    finally:
        db.text_factory = str


def plain_cursor(db: sqlite3.Connection) -> sqlite3.Cursor:
    cursor = db.cursor()
    cursor.row_factory = None  # plain tuples: several times cheaper than sqlite3.Row
    return cursor


class LedgerTimeline:
    """The lanes of a window and their runs, as rows. ``known_dead`` (host.known_dead) turns a
    running row whose lockrun process is gone into ``abandoned``."""

    def __init__(self, connection: Connection, known_dead: KnownDead | None) -> None:
        self._connection = connection
        self._known_dead = known_dead

    def names(self) -> list[str]:
        """Every lock name in the ledger, one index seek each (a loose index scan, not a table scan)."""
        found: list[str] = []
        last = b""  # the raw bytes: a name that is not UTF-8 is stepped over, not fatal
        with self._connection() as db:
            while True:
                # Text names only: a BLOB sorts after every text, so "name > last" would find the
                # same BLOB again and again (a row someone else wrote must not hang the timeline).
                row = db.execute("SELECT CAST(min(name) AS BLOB) FROM runs"
                                 " WHERE name > CAST(? AS TEXT) AND typeof(name) = 'text'", (last,)).fetchone()
                if row is None or row[0] is None:
                    return found
                last = row[0]
                try:
                    found.append(last.decode("utf-8"))
                except UnicodeDecodeError:
                    continue

    def window_lanes(
        self, since: str, until: str, names: list[str] | None = None, *, host: str | None = None,
        by_host: bool = False,
    ) -> list[tuple[str, str | None]]:
        """The (name, host) lanes a timeline of [since, until) has, in order: names with a row in
        the window (every one of ``names`` when given), with ``by_host`` one lane per host."""
        host_filter = " AND host = :host" if host is not None else ""
        where = f"name = :name AND ended_at >= :since AND started_at < :until{host_filter}"
        where_open = f"name = :name AND ended_at IS NULL AND started_at < :until{host_filter}"
        probe = f"SELECT 1 FROM runs WHERE {where} LIMIT 1"
        probe_open = f"SELECT 1 FROM runs WHERE {where_open} LIMIT 1"
        hosts_sql = (f"SELECT DISTINCT CAST(host AS TEXT) FROM runs WHERE {where} UNION"
                     f" SELECT DISTINCT CAST(host AS TEXT) FROM runs WHERE {where_open} ORDER BY 1")
        lanes: list[tuple[str, str | None]] = []
        all_names = self.names() if names is None else names
        with self._connection() as db:
            for name in all_names:
                params = {"name": name, "since": since, "until": until, "host": host}
                if by_host:
                    hosts = [row[0] for row in rows(db, db.cursor(), hosts_sql, params)]
                    lanes.extend((name, h) for h in hosts)
                    if not hosts and names is not None:
                        lanes.append((name, None))
                elif names is not None or db.execute(probe, params).fetchone() \
                        or db.execute(probe_open, params).fetchone():
                    lanes.append((name, None))
        return lanes

    def window(
        self, since: str, until: str, names: list[str] | None = None, *, host: str | None = None,
        with_host: bool = False, detail: bool = False,
    ) -> Iterator[tuple[str, list[Row], list[Row]]]:
        """(name, runs, skips) of each lock name with a row in [since, until), one name at a time.

        ``since`` and ``until`` are ISO timestamps. Runs and skips are plain tuples in the field
        order of ``timeline.RunSpan`` (started_at, ended_at, status, duration_s, then with
        ``with_host`` host, and with ``detail`` host, run_id, exit_code, exit_status and signal):
        plain, short tuples from one index range per name, because a busy week is a million rows,
        and yielded one name at a time so that only one name's runs are in memory. Runs: the
        finished ones ordered by end, then the unfinished ones (``ended_at`` None; ``running``, or
        ``abandoned`` when its process is known to be gone). Skips (``busy``, ``duplicate``,
        ``unlocked``) ordered by start. Names without a row in the window are left out unless named.
        """
        columns = SPAN + (DETAIL if detail else (", host" if with_host else ""))
        host_filter = " AND host = :host" if host is not None else ""
        # One range of the index per name, runs and skips together (split below: cheaper than
        # reading the range twice). typeof() guards: a row someone else wrote with a number for a
        # time must not end up compared with text in Python.
        finished_sql = (
            f"SELECT {columns} FROM runs WHERE name = :name AND ended_at >= :since AND started_at < :until"
            f" AND typeof(started_at) = 'text' AND typeof(ended_at) = 'text'{host_filter} ORDER BY ended_at, started_at"
        )
        unfinished_sql = open_sql(columns, host_filter)
        width = 4 + (5 if detail else (1 if with_host else 0))  # the columns before the liveness ones
        all_names = self.names() if names is None else names
        with self._connection() as db:
            cursor = plain_cursor(db)
            for name in all_names:
                params = {"name": name, "since": since, "until": until, "host": host}
                runs = rows(db, cursor, finished_sql, params)
                skips: list[Row] = []
                is_skip = list(map(NOT_A_RUN.__contains__, map(itemgetter(2), runs)))
                if any(is_skip):
                    skips = [row for row in compress(runs, is_skip) if row[0] >= since]
                    skips.sort()
                    runs = list(compress(runs, map(not_, is_skip)))
                for row in rows(db, cursor, unfinished_sql, params):
                    runs.append((row[0], None, open_status(row, width, self._known_dead), None, *row[4:width]))
                if runs or skips or names is not None:
                    yield name, runs, skips

    def runs_started_at(self, name: str, starts: list[str], host: str | None = None) -> list[Row]:
        """The runs (skips aside) of ``name`` that started at one of ``starts``, as
        ``window(detail=True)`` gives them: the SVG's tooltips of runs drawn from a summary."""
        found: list[Row] = []
        host_filter = " AND host = ?" if host is not None else ""
        with self._connection() as db:
            cursor = plain_cursor(db)
            for chunk in range(0, len(starts), 500):  # well under SQLite's limit of parameters
                part = starts[chunk:chunk + 500]
                sql = (f"SELECT {SPAN}{DETAIL} FROM runs INDEXED BY runs_name_started"
                       f" WHERE name = ? AND started_at IN ({', '.join('?' * len(part))}) AND status NOT IN {SKIPS}"
                       f"{host_filter}")
                found += cursor.execute(sql, (name, *part, *([host] if host is not None else []))).fetchall()
        return found
