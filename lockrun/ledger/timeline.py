"""The timeline's reads of the run ledger: which lanes a window has, and each lane's runs.

A busy week is a million rows, so a lane's runs come from one index range per name, one name at
a time, in one order: the finished ones by end (then start, then status), then those without an
end by start. ``window`` reads them as plain, short rows (with every detail the SVG's tooltips
want). ``columns`` reads the same runs without a Python object per run: when each started and
ended as two comma-joined strings (SQLite joins one range of ``runs_timeline``), the same for the
few that did not succeed, per status, from ``runs_notable``, and the median and longest duration
walked in ``runs_durations`` (both partial indexes: ledger_file, migration 6). ``timeline.chart``
draws a lane from its columns when its runs follow one another; any other lane is read as rows
and drawn by ``timeline.layout``. The ledger hands these reads out (``Ledger.timeline()``) with
its connection helper: "is it open", and SQLite errors as LedgerError.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from itertools import compress
from operator import itemgetter, not_
from typing import Any, NamedTuple

from lockrun.core.record import NOT_A_RUN, Status
from lockrun.ledger.file import FINISHED_RUN, LIVENESS_COLUMNS, NOT_PAUSED, NOTABLE, rollback
from lockrun.ledger.timeline_columns import (
    Others,
    add_tail,
    append_run,
    as_written,
    last_status,
    others_of,
    split_joined,
    written,
)

#: The ledger's connection helper: the open database for one operation, SQLite errors translated.
Connection = Callable[[], contextlib.AbstractContextManager[sqlite3.Connection]]

#: A row as SQLite gives it (plain tuples: several times cheaper than sqlite3.SqlRow).
SqlRow = tuple[Any, ...]

#: known_dead(boot_id, pid, pid_start, pid_ns, machine_id): is a recorded lockrun process
#: certainly gone? The rule is the caller's (host.known_dead); storage only hands over what was
#: recorded (of any type: a ledger may have been written by anyone).
KnownDead = Callable[[Any, Any, Any, Any, Any], bool]  # ledger_file.LIVENESS_COLUMNS, in that order

SKIPS = "(" + ", ".join(f"'{status}'" for status in sorted(NOT_A_RUN)) + ")"  # outcomes where nothing ran, for SQL

# A run as the timeline reads it (views/timeline.Span's first fields): a duration that is not a plain number
# is None, as it is for a run that has not ended.
SPAN = ("started_at, ended_at, status,"
        " CASE WHEN typeof(duration_s) IN ('real', 'integer') AND abs(duration_s) < 1e12 THEN duration_s END")
# Span's fields for the SVG's tooltips.
DETAIL = ", host, run_id, exit_code, exit_status, signal"
# The durations SPAN counts, as ranges of runs_durations (text and blobs sort after numbers).
_USABLE = "duration_s > -1e12 AND duration_s < 1e12"
_UNUSABLE = ("duration_s IS NULL", "duration_s <= -1e12", "duration_s >= 1e12")
_SUCCEEDED = str(Status.SUCCEEDED)
# Not a skip, in the form SQLite checks fastest: almost every run succeeded, and a comparison
# each costs half what NOT IN does.
_A_RUN = ("(status = '" + _SUCCEEDED + "' OR (" + " AND ".join(f"status != '{status}'" for status in sorted(NOT_A_RUN))
          + "))")


class Columns(NamedTuple):
    """One lock name's runs in a window as columns (``LedgerTimeline.columns``), in ``window``'s order."""

    starts: list[str]
    ends: list[str]  # a run without an end: as drawn (running: to the chart's now; abandoned: at its start)
    others: Others  # the runs that did not succeed, per status: starts, ends
    last_status: Any  # of the last run
    marks: list[SqlRow]  # (started_at, ended_at, status) of each skip that started in the window, by start
    median_s: float | None
    max_s: float | None
    as_written: bool  # every time as lockrun writes it (clock.ISO_FORMAT: 27 ASCII characters)


def open_sql(columns: str, host_filter: str) -> str:
    """A name's rows without an end (skips aside), with what it takes to tell whether their
    lockrun is still alive after ``columns`` (LIVENESS_COLUMNS: boot id, pid, ...)."""
    return (
        f"SELECT {columns}, {LIVENESS_COLUMNS} FROM runs WHERE name = :name AND ended_at IS NULL"
        f" AND started_at < :until AND typeof(started_at) = 'text' AND status NOT IN {SKIPS}{host_filter}"
        " ORDER BY started_at"
    )


def open_status(row: SqlRow, width: int, known_dead: KnownDead | None) -> Any:
    """A ``running`` row (of ``open_sql``) whose lockrun process is gone is ``abandoned``: it will
    never finish. ``width``: the columns before the liveness ones."""
    if row[2] == Status.RUNNING and known_dead is not None and known_dead(*row[width:width + 5]):
        return Status.ABANDONED
    return row[2]


def rows(db: sqlite3.Connection, cursor: sqlite3.Cursor, sql: str, params: dict[str, Any]) -> list[SqlRow]:
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
    cursor.row_factory = None  # plain tuples: several times cheaper than sqlite3.SqlRow
    return cursor


class LedgerTimeline:
    """The lanes of a window and their runs. ``known_dead`` (host.known_dead) turns a running row
    whose lockrun process is gone into ``abandoned``."""

    def __init__(self, connection: Connection, known_dead: KnownDead | None) -> None:
        self._connection = connection
        self._known_dead = known_dead

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read inside sees the ledger as it was at the first one (WAL: writers go on), so
        that a lane's several reads agree."""
        with self._connection() as db:
            db.execute("BEGIN")
            try:
                yield
            finally:
                # It only read. A chart stream abandoned half-way may be closed after the ledger
                # (at exit, say): then there is nothing left to end, and nothing to say.
                with contextlib.suppress(sqlite3.ProgrammingError):
                    rollback(db)

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
                    lanes += _host_lanes(db, name, hosts_sql, params, named=names is not None)
                elif names is not None or _any_row(db, params, probe, probe_open):
                    lanes.append((name, None))
        return lanes

    def window(
        self, since: str, until: str, names: list[str] | None = None, *, host: str | None = None,
        with_host: bool = False, detail: bool = False,
    ) -> Iterator[tuple[str, list[SqlRow], list[SqlRow]]]:
        """(name, runs, skips) of each lock name with a row in [since, until), one name at a time.

        ``since`` and ``until`` are ISO timestamps. Runs and skips are plain tuples in the field
        order of ``views/timeline.Span`` (started_at, ended_at, status, duration_s, then with
        ``with_host`` host, and with ``detail`` host, run_id, exit_code, exit_status and signal),
        yielded one name at a time so that only one name's runs are in memory. Runs: the finished
        ones by end (then start, then status: the index's order), then the unfinished ones
        (``ended_at`` None; ``running``, or ``abandoned`` when its process is known to be gone).
        Skips (``busy``, ``duplicate``, ``unlocked``) ordered by start. Names without a row in the
        window are left out unless named.
        """
        columns, width = _window_columns(detail, with_host)  # width: the columns before the liveness ones
        host_filter = " AND host = :host" if host is not None else ""
        # One range of the index per name, runs and skips together (split below: cheaper than
        # reading the range twice). typeof() guards: a row someone else wrote with a number for a
        # time must not end up compared with text in Python.
        finished_sql = (
            f"SELECT {columns} FROM runs INDEXED BY runs_timeline WHERE name = :name AND ended_at >= :since"
            " AND started_at < :until AND typeof(started_at) = 'text' AND typeof(ended_at) = 'text'"
            f"{host_filter} ORDER BY ended_at, started_at, status"
        )
        unfinished_sql = open_sql(columns, host_filter)
        all_names = self.names() if names is None else names
        with self._connection() as db:
            cursor = plain_cursor(db)
            for name in all_names:
                params = {"name": name, "since": since, "until": until, "host": host}
                runs, skips = _without_skips(rows(db, cursor, finished_sql, params), since)
                for row in rows(db, cursor, unfinished_sql, params):
                    runs.append((row[0], None, open_status(row, width, self._known_dead), None, *row[4:width]))
                if runs or skips or names is not None:
                    yield name, runs, skips

    def odd_names(self) -> set[str]:
        """Names with a row that the columns would count differently than its row, to be read as
        rows: one that ended but still says ``running`` (``runs_durations`` leaves it out; a few
        seeks: few rows are running), or a start that is a blob (the column's text affinity makes
        numbers text; blobs sort after text: one range of ``runs_started``)."""
        sql = (f"SELECT CAST(name AS BLOB) FROM runs WHERE status = '{Status.RUNNING}' AND ended_at IS NOT NULL"
               " UNION SELECT CAST(name AS BLOB) FROM runs WHERE started_at >= X''")
        with self._connection() as db:
            found = db.execute(sql).fetchall()
        return {row[0].decode("utf-8", "replace") for row in found if isinstance(row[0], bytes)}

    def columns(self, name: str, since: str, until: str, open_end: str, host: str | None = None) -> Columns | None:
        """``name``'s runs in [since, until), as ``window`` reads them, as columns; None when a value
        holds a comma (it would split in two), and for ``odd_names`` (not asked here). ``open_end``:
        where a running run is drawn to (now, at most the window's end).

        The runs that end in the window are one range of ``runs_timeline``, their starts and ends
        joined into two strings by SQLite (a million rows cost a few hundred milliseconds less so
        than as tuples); those that did not succeed (a few per cent) are joined again per status,
        from ``runs_notable``, and so are the skips, read as rows; so are the runs that end after
        the window and those without an end (a handful). A row that starts after the window but
        ends inside it (lockrun would not write one) starts after it ends: the layout refuses
        columns whose runs do not follow one another, and the lane is read as rows.
        """
        params = {"name": name, "since": since, "until": until, "host": host}
        host_filter = " AND host = :host" if host is not None else ""
        in_window = f"name = :name AND ended_at >= :since AND ended_at < :until{host_filter}"
        with self._connection() as db:
            count, joined_starts, joined_ends, by_status = _joined(db, in_window, params)
            cursor = plain_cursor(db)
            marks = rows(db, cursor, "SELECT started_at, ended_at, status FROM runs INDEXED BY runs_notable"
                                     f" WHERE {in_window} AND {NOTABLE} AND status IN {SKIPS}", params)
            tail = rows(db, cursor, _tail_sql(host_filter), params)
            unfinished = rows(db, cursor, open_sql(SPAN, host_filter), params)
            starts, ends = split_joined(joined_starts, count), split_joined(joined_ends, count)
            others = others_of(by_status)
            if others is None or starts is None or ends is None:
                return None
            last = last_status(starts, ends, others)
            marks, edges = _skips_in(marks, since, until)
            last, durations = add_tail(starts, ends, others, marks, tail, since, last)
            last = _add_unfinished(starts, ends, others, unfinished, open_end, self._known_dead, last)
            figures = self._median_and_longest(db, in_window, params, count, durations)
        if figures is None:
            return None
        marks.sort()
        # The SVG draws a lane by stretches only if each time is as lockrun writes it: the joined
        # ones are checked at once, the few others (the skips, the runs after the window or not
        # ended) one by one.
        all_written = as_written(joined_starts, count) and as_written(joined_ends, count) and all(
            map(written, [*edges, *starts[count:], *ends[count:]]))
        return Columns(starts, ends, others, last, marks, *figures, all_written)

    def _median_and_longest(self, db: sqlite3.Connection, in_window: str, params: dict[str, Any], runs: int,
                            tail: list[float]) -> tuple[float | None, float | None] | None:
        """The median and the longest duration of a name's runs, exactly as the layout works them
        out from every run: the window's ``runs`` (finished, skips aside) have their durations in
        ``runs_durations``, ``tail`` holds those of the runs that ended after it. The median walks
        the index in order of duration to the middle instead of sorting; None if the index does
        not bear the count out."""
        where = _durations_where(db, in_window, params)
        # Three ranges of the index (an OR of them would read all of it): usually empty.
        unusable = sum(db.execute(f"SELECT count(*) {where} AND {outside}", params).fetchone()[0]
                       for outside in _UNUSABLE)
        count = runs - unusable + len(tail)
        if count <= 0:
            return None, None
        middle = count // 2
        wanted = [middle] if count % 2 else [middle - 1, middle]
        # The k-th smallest of them all is among the index's (k - len(tail))-th to k-th: the ones
        # before those are smaller than every one picked, whatever the tail holds.
        offset = max(0, wanted[0] - len(tail))
        walk = f"SELECT duration_s {where} AND {_USABLE} ORDER BY duration_s"
        limits = {**params, "limit": wanted[-1] - offset + 1, "offset": offset}
        walked = [row[0] for row in db.execute(f"{walk} LIMIT :limit OFFSET :offset", limits)]
        top = [row[0] for row in db.execute(f"{walk} DESC LIMIT 1", params)]
        median = _median(sorted(walked + tail), wanted, offset)
        return None if median is None else (median, max(top + tail))

    def runs_started_at(self, name: str, starts: list[str], host: str | None = None) -> list[SqlRow]:
        """The runs (skips aside) of ``name`` that started at one of ``starts``, as
        ``window(detail=True)`` gives them: the SVG's tooltips of runs drawn without their rows."""
        found: list[SqlRow] = []
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


def _skips_in(marks: list[SqlRow], since: str, until: str) -> tuple[list[SqlRow], list[Any]]:
    """The skips that started in the window, and their starts and ends."""
    marks = [mark for mark in marks if since <= mark[0] < until]
    return marks, [time for mark in marks for time in mark[:2]]


def _durations_where(db: sqlite3.Connection, in_window: str, params: dict[str, Any]) -> str:
    """Where the durations of the window's finished runs are, in ``runs_durations``."""
    if params["host"] is None and _all_in_window(db, params):
        # half the work
        return f"FROM runs INDEXED BY runs_durations WHERE name = :name AND {FINISHED_RUN} AND {NOT_PAUSED}"
    return f"FROM runs INDEXED BY runs_durations WHERE {in_window} AND {FINISHED_RUN} AND {NOT_PAUSED}"


def _median(merged: list[float], wanted: list[int], offset: int) -> float | None:
    """The median of them all, from the ``wanted`` middle (one or two) of ``merged``, which begins
    at the ``offset``-th smallest; None if it holds too few."""
    if len(merged) <= wanted[-1] - offset:
        return None
    values = [merged[k - offset] for k in wanted]
    return values[0] if len(values) == 1 else (values[0] + values[1]) / 2


def _host_lanes(db: sqlite3.Connection, name: str, hosts_sql: str, params: dict[str, Any],
                named: bool) -> list[tuple[str, str | None]]:
    """A name's lanes, one per host with a row in the window; a ``named`` one has a lane anyway."""
    hosts = [row[0] for row in rows(db, db.cursor(), hosts_sql, params)]
    lanes: list[tuple[str, str | None]] = [(name, host) for host in hosts]
    return lanes if hosts or not named else [(name, None)]


def _any_row(db: sqlite3.Connection, params: dict[str, Any], probe: str, probe_open: str) -> bool:
    return bool(db.execute(probe, params).fetchone() or db.execute(probe_open, params).fetchone())


def _window_columns(detail: bool, with_host: bool) -> tuple[str, int]:
    """``window``'s columns, and how many come before the liveness ones."""
    if detail:
        return SPAN + DETAIL, 9
    return (SPAN + ", host", 5) if with_host else (SPAN, 4)


def _without_skips(runs: list[SqlRow], since: str) -> tuple[list[SqlRow], list[SqlRow]]:
    """The runs, and apart from them the skips that started in the window, by start."""
    is_skip = list(map(NOT_A_RUN.__contains__, map(itemgetter(2), runs)))
    if not any(is_skip):
        return runs, []
    skips = sorted(row for row in compress(runs, is_skip) if row[0] >= since)
    return list(compress(runs, map(not_, is_skip))), skips


def _all_in_window(db: sqlite3.Connection, params: dict[str, Any]) -> bool:
    """Whether every finished run of the name ended in [since, until) (a ledger no older than the
    window): then a walk by duration need not look at each end. Two seeks, and one into the few
    rows without an end."""
    first, last = (db.execute(f"SELECT {edge}(ended_at) FROM runs INDEXED BY runs_timeline WHERE name = :name",
                              params).fetchone()[0] for edge in ("min", "max"))
    unended = db.execute("SELECT 1 FROM runs INDEXED BY runs_timeline WHERE name = :name AND ended_at IS NULL"
                         f" AND {FINISHED_RUN} AND {NOT_PAUSED} LIMIT 1", params).fetchone()
    return (isinstance(first, str) and isinstance(last, str) and params["since"] <= first and last < params["until"]
            and unended is None)


def _joined(db: sqlite3.Connection, in_window: str,
            params: dict[str, Any]) -> tuple[int, bytes | None, bytes | None, list[SqlRow]]:
    """The window's runs (skips aside): how many, their starts and their ends, each joined into
    one string; and per status, the same of those that did not succeed (typeof(status) first)."""
    db.text_factory = bytes  # the joined strings as stored: decoded once, by split_joined
    try:
        count, joined_starts, joined_ends = db.execute(
            "SELECT count(*), group_concat(started_at), group_concat(ended_at) FROM runs"
            f" INDEXED BY runs_timeline WHERE {in_window} AND {_A_RUN}", params).fetchone()
        by_status = db.execute(
            "SELECT typeof(status), status, count(*), group_concat(started_at), group_concat(ended_at)"
            f" FROM runs INDEXED BY runs_notable WHERE {in_window} AND {NOTABLE} AND status NOT IN {SKIPS}"
            " GROUP BY status", params).fetchall()
    finally:
        db.text_factory = str
    return count, joined_starts, joined_ends, by_status


def _add_unfinished(starts: list[str], ends: list[str], others: Others, unfinished: list[SqlRow], open_end: str,
                    known_dead: KnownDead | None, last: Any) -> Any:
    """The runs without an end, after the others, drawn to ``open_end`` while running: the status
    of the last run."""
    for row in unfinished:
        status = open_status(row, 4, known_dead)
        last = append_run(starts, ends, others, row[0],
                          max(row[0], open_end) if status == Status.RUNNING else row[0], status)
    return last


def _tail_sql(host_filter: str) -> str:
    """The rows that end after the window but started in it, as ``window`` reads them."""
    return (f"SELECT {SPAN} FROM runs INDEXED BY runs_timeline WHERE name = :name AND ended_at >= :until"
            " AND started_at < :until AND typeof(started_at) = 'text' AND typeof(ended_at) = 'text'"
            f"{host_filter} ORDER BY ended_at, started_at, status")
