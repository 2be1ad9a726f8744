"""A timeline lane's runs read from the ledger as columns and figures, not as rows.

For a busy week (a million runs) a Python tuple per run costs more than all the rest of the
chart (bench/NOTES.md, "Timeline"). ``lane_summary`` draws a lane whose runs follow one another
from what these reads give: each run's start and end as one comma-joined string per column, the
few runs that did not succeed from an index of their own (``runs_notable``), and the median and
longest duration walked in an index by duration (``runs_durations``). Both indexes are partial
(ledger_file, migration 6); a query uses one only when it repeats the index's WHERE clause word
for word, hence ``NOTABLE`` and ``FINISHED_RUN``. Anything these reads cannot vouch for (a status
that is not text, a name with a row lockrun would not write) sends the lane back to its rows
(``ledger_timeline``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from lockrun.ledger_file import FINISHED_RUN, NOTABLE, rollback
from lockrun.ledger_timeline import SPAN, Connection, Row, open_sql, open_status, plain_cursor, rows
from lockrun.record import Status

if TYPE_CHECKING:
    from lockrun.ledger import KnownDead

# Durations the timeline counts (``SPAN``'s CASE): numbers only; text and blobs sort after them.
_USABLE = "duration_s > -1e12 AND duration_s < 1e12"
_UNUSABLE = ("duration_s IS NULL", "duration_s <= -1e12", "duration_s >= 1e12")


class LaneColumns(NamedTuple):
    """One lock name's rows in a timeline's window, as columns (see ``LaneReads.columns``)."""

    starts: bytes | None  # started_at of every row that ended in the window, comma-joined, by end
    ends: bytes | None  # their ended_at, in the same order
    by_status: dict[str, tuple[bytes | None, bytes | None]]  # status but running/succeeded -> (starts, ends)
    tail: list[Row]  # rows that ended after the window but started in it: (started, ended, status, duration, host)
    open_runs: list[Row]  # rows without an end: (started, None, status, None)


class LaneReads:
    """The summaries' reads of one ledger. ``known_dead`` (host.known_dead) turns a running row
    whose lockrun process is gone into ``abandoned``, as ``LedgerTimeline.window`` does."""

    def __init__(self, connection: Connection, known_dead: KnownDead | None) -> None:
        self._connection = connection
        self._known_dead = known_dead

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read inside sees the ledger as it was at the first one (WAL: writers go on)."""
        with self._connection() as db:
            db.execute("BEGIN")
            try:
                yield
            finally:
                # It only read. A chart stream abandoned half-way may be closed after the ledger
                # (at exit, say): then there is nothing left to end, and nothing to say.
                with contextlib.suppress(sqlite3.ProgrammingError):
                    rollback(db)

    def names_drawn_from_rows(self) -> set[str]:
        """Names with a row lockrun would not write, that a summary would count differently than
        the rows do: one that ended but still says ``running`` (a few seeks: few rows are
        running), or a start that is a blob (the column's text affinity makes numbers text;
        blobs sort after text: one range of ``runs_started``)."""
        sql = (f"SELECT CAST(name AS BLOB) FROM runs WHERE status = '{Status.RUNNING}' AND ended_at IS NOT NULL"
               " UNION SELECT CAST(name AS BLOB) FROM runs WHERE started_at >= X''")
        with self._connection() as db:
            found = db.execute(sql).fetchall()
        return {row[0].decode("utf-8", "replace") for row in found if isinstance(row[0], bytes)}

    def columns(self, name: str, since: str, until: str, host: str | None = None) -> LaneColumns | None:
        """One lock name's rows that reach into [since, until), as columns rather than rows.

        ``starts`` and ``ends``: every row (skips too) that ended in the window, each column one
        comma-joined string in the order of the ``runs_timeline`` index (by end, then start,
        then status), as bytes; a million rows cost a few hundred milliseconds less this way
        than as tuples. ``by_status``: the same two columns for each status other than
        ``running`` and ``succeeded`` (few rows, from ``runs_notable``). ``tail``: the rows
        that end after the window but started in it, and ``open_runs``: those that have not
        ended, both as ``LedgerTimeline.window`` gives them. None when a status is not text.
        """
        params = {"name": name, "since": since, "until": until, "host": host}
        host_filter = " AND host = :host" if host is not None else ""
        with self._connection() as db:
            statuses = _notable_statuses(db, name)
            if statuses is None:
                return None
            # Nothing of this name ended after the window (a window that ends now): the range
            # needs no end, and a comparison a row less.
            last = db.execute("SELECT max(ended_at) FROM runs INDEXED BY runs_timeline WHERE name = ?",
                              (name,)).fetchone()[0]
            all_before = isinstance(last, str) and last < until
            in_window = "ended_at >= :since" + ("" if all_before else " AND ended_at < :until") + host_filter
            main_sql = ("SELECT group_concat(started_at), group_concat(ended_at) FROM runs INDEXED BY runs_timeline"
                        f" WHERE name = :name AND {in_window}")
            status_sql = ("SELECT group_concat(started_at), group_concat(ended_at) FROM runs INDEXED BY runs_notable"
                          f" WHERE name = :name AND {NOTABLE} AND status = :status AND {in_window}")
            db.text_factory = bytes  # timestamps as they are stored: no decoding, no objects per row
            try:
                starts, ends = db.execute(main_sql, params).fetchone()
                by_status = {}
                for status in statuses:
                    pair = db.execute(status_sql, {**params, "status": status}).fetchone()
                    if pair[0] is not None:
                        by_status[status] = (pair[0], pair[1])
            finally:
                db.text_factory = str
            cursor = plain_cursor(db)
            tail = rows(db, cursor, _tail_sql(host_filter), params) if not all_before else []
            open_runs = [(row[0], None, open_status(row, 4, self._known_dead), None)
                         for row in rows(db, cursor, open_sql(SPAN, host_filter), params)]
        return LaneColumns(starts, ends, by_status, tail, open_runs)

    def durations(self, name: str, since: str, until: str, host: str | None, finished: int,
                  tail: list[float]) -> tuple[float | None, float | None] | None:
        """The median and the longest duration of ``name``'s finished runs in the window, exactly
        as the timeline's layout works them out from every run: ``finished`` is how many runs
        ended in [since, until) (skips aside), ``tail`` the durations of those that ended after it.

        The median walks ``runs_durations`` in order of duration to the middle, instead of
        sorting every duration: half a name's entries, a few C-level steps each. None if the
        index does not hold as many durations as ``finished`` says (the lane is then drawn from
        its rows).
        """
        params = {"name": name, "since": since, "until": until, "host": host}
        with self._connection() as db:
            where = f"FROM runs INDEXED BY runs_durations WHERE name = :name AND {FINISHED_RUN}"
            if host is not None or not _all_in_window(db, name, since, until):
                # Each entry's end is read and compared: twice the cost of a bare walk.
                where += " AND ended_at >= :since AND ended_at < :until"
                where += " AND host = :host" if host is not None else ""
            walk = f"SELECT duration_s {where} AND {_USABLE} ORDER BY duration_s"
            # Three ranges of the index (an OR of them would read all of it): usually empty.
            unusable = sum(db.execute(f"SELECT count(*) {where} AND {outside}", params).fetchone()[0]
                           for outside in _UNUSABLE)
            count = finished - unusable + len(tail)
            if count <= 0:
                return None, None
            # The k-th smallest of the window's durations and the tail's is among the window's
            # (k - len(tail))-th to k-th (the tail has a handful of runs, usually none).
            middle = count // 2
            wanted = [middle] if count % 2 else [middle - 1, middle]
            offset = max(0, wanted[0] - len(tail))
            limits = {**params, "limit": wanted[-1] - offset + 1, "offset": offset}
            walked = [row[0] for row in db.execute(f"{walk} LIMIT :limit OFFSET :offset", limits)]
            top = [row[0] for row in db.execute(f"{walk} DESC LIMIT 1", params)]
        merged = sorted(walked + tail)
        if len(merged) <= wanted[-1] - offset:
            return None
        values = [merged[k - offset] for k in wanted]
        median = values[0] if len(values) == 1 else (values[0] + values[1]) / 2
        return median, max(top + tail)


def _tail_sql(host_filter: str) -> str:
    """The rows that end after the window but started in it, as ``LedgerTimeline.window`` reads them."""
    return (f"SELECT {SPAN}, host FROM runs INDEXED BY runs_timeline WHERE name = :name AND ended_at >= :until"
            " AND started_at < :until AND typeof(started_at) = 'text' AND typeof(ended_at) = 'text'"
            f"{host_filter} ORDER BY ended_at, started_at")


def _notable_statuses(db: sqlite3.Connection, name: str) -> list[str] | None:
    """The statuses of ``name``'s rows in ``runs_notable``, one index seek each; None if one is not
    text (or not UTF-8)."""
    first = f"SELECT status FROM runs INDEXED BY runs_notable WHERE name = ? AND {NOTABLE} ORDER BY status LIMIT 1"
    after = (f"SELECT status FROM runs INDEXED BY runs_notable WHERE name = ? AND {NOTABLE} AND status > ?"
             " ORDER BY status LIMIT 1")
    found: list[str] = []
    try:
        row = db.execute(first, (name,)).fetchone()
        while row is not None:
            if not isinstance(row[0], str):
                return None
            found.append(row[0])
            row = db.execute(after, (name, row[0])).fetchone()
    except sqlite3.OperationalError as exc:
        if "decode" in str(exc):
            return None  # text that is not UTF-8
        raise
    return found


def _all_in_window(db: sqlite3.Connection, name: str, since: str, until: str) -> bool:
    """Whether every finished run of ``name`` in the ledger ended in [since, until) (a ledger no
    older than the window): then the walk by duration need not look at the ends. Two index
    seeks, and one into the few rows without an end."""
    first, last = (db.execute(f"SELECT {edge}(ended_at) FROM runs INDEXED BY runs_timeline WHERE name = ?",
                              (name,)).fetchone()[0] for edge in ("min", "max"))
    unended = db.execute(
        f"SELECT 1 FROM runs INDEXED BY runs_timeline WHERE name = ? AND ended_at IS NULL AND {FINISHED_RUN} LIMIT 1",
        (name,)).fetchone()
    return isinstance(first, str) and isinstance(last, str) and since <= first and last < until and unended is None
