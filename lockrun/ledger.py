"""The run ledger: one SQLite row per run, written before the command starts.

WAL mode and a busy timeout let many lockrun processes on one host write at
once; every write is a single autocommit statement, so no transaction ever has
to upgrade from reading to writing (the case where SQLite gives up with
"database is locked" instead of waiting).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from itertools import compress
from operator import itemgetter, not_
from pathlib import Path
from typing import Any, NamedTuple

from lockrun import host as this_host
from lockrun.clock import parse_iso, seconds_since, utc_now_iso
from lockrun.errors import LedgerError
from lockrun.record import IN_PROGRESS, NOT_A_RUN, ROW_FIELDS, Status
from lockrun.safefs import UnsafePath, private_dir

# Errors a query or write can end in besides sqlite3.Error: a value SQLite cannot store
# (an integer past 64 bits) is an OverflowError.
SQL_ERRORS = (sqlite3.Error, OverflowError)
# The files SQLite opens beside the database (WAL mode): none of them may be a link.
SIDE_FILES = ("-wal", "-shm", "-journal")

SCHEMA_VERSION = 5
BUSY_TIMEOUT_MS = 15000

#: Each schema version: the statements that take the ledger to it from the version before.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """
        CREATE TABLE IF NOT EXISTS runs (
            run_id        TEXT PRIMARY KEY,
            name          TEXT NOT NULL,
            status        TEXT NOT NULL,
            exit_code     INTEGER,
            signal        INTEGER,
            host          TEXT NOT NULL,
            pid           INTEGER NOT NULL,
            pid_start     INTEGER,
            boot_id       TEXT,
            command       TEXT NOT NULL,
            backend       TEXT NOT NULL,
            started_at    TEXT NOT NULL,
            ended_at      TEXT,
            duration_s    REAL,
            fencing_token INTEGER,
            once_key      TEXT,
            error         TEXT,
            note          TEXT
        )
        """,
        "CREATE INDEX IF NOT EXISTS runs_name_started ON runs (name, started_at)",
        "CREATE INDEX IF NOT EXISTS runs_started ON runs (started_at)",
        "CREATE INDEX IF NOT EXISTS runs_status ON runs (status, started_at)",
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ),
    # Totals per name and final status, kept as runs finish: the metrics read a few
    # rows instead of counting a million, and pruning old runs does not make
    # Prometheus counters go backwards.
    2: (
        """
        CREATE TABLE IF NOT EXISTS run_counts (
            name   TEXT NOT NULL,
            status TEXT NOT NULL,
            count  INTEGER NOT NULL,
            PRIMARY KEY (name, status)
        ) WITHOUT ROWID
        """,
        """
        INSERT OR IGNORE INTO run_counts (name, status, count)
        SELECT name, status, COUNT(*) FROM runs WHERE status != 'running' GROUP BY name, status
        """,
    ),
    # The last bytes of the command's output, with --capture-tail (shown by `lockrun show`).
    3: (
        "ALTER TABLE runs ADD COLUMN output_tail TEXT",
    ),
    # `lockrun timeline`: a lock name's runs that reach into a window are one range of this index
    # (by end time; a run still running has no end and sorts first), read without the table.
    4: (
        "CREATE INDEX IF NOT EXISTS runs_timeline ON runs (name, ended_at, started_at, status, duration_s, host)",
    ),
    # What lockrun exited with (what cron saw) beside the command's own code, how long the run
    # waited for the lock (started_at and duration_s now cover the command only), and how this
    # run's backend was configured, without credentials (for the shell-versus-runs hint).
    # Rows written before this version keep NULL: none of it was recorded then.
    5: (
        "ALTER TABLE runs ADD COLUMN exit_status INTEGER",
        "ALTER TABLE runs ADD COLUMN waited_s REAL",
        "ALTER TABLE runs ADD COLUMN backend_where TEXT",
        "ALTER TABLE runs ADD COLUMN backend_from TEXT",
    ),
}

# The columns of ``history --json``, in the order every reader prints them (the fleet record's too).
PUBLIC_FIELDS = ROW_FIELDS
_SELECT = "SELECT " + ", ".join(PUBLIC_FIELDS) + ", pid_start, boot_id FROM runs"
_SKIPS = "(" + ", ".join(f"'{status}'" for status in sorted(NOT_A_RUN)) + ")"  # outcomes where nothing ran, for SQL


class RunRecord(NamedTuple):
    """A run as the ledger stores it; ``finish`` fills in the outcome."""

    run_id: str
    name: str
    command: list[str]
    backend: str
    started_at: str
    status: str = Status.RUNNING
    host: str | None = None  # None: this host
    pid: int | None = None  # None: this process
    pid_start: int | None = None
    boot_id: str | None = None  # None: this boot
    once_key: str | None = None
    fencing_token: int | None = None
    backend_where: str | None = None  # the Redis URL without credentials, or the local state directory
    backend_from: str | None = None  # where that setting came from: --redis-url, LOCKRUN_REDIS_URL, a config file


#: The fields of a finished run that ``finish`` writes; the runner builds them in one place.
FINAL_FIELDS = (
    "status", "started_at", "ended_at", "duration_s", "waited_s", "exit_code", "signal", "exit_status",
    "fencing_token", "error", "note",
)


def _command_list(stored) -> list[str]:
    """The stored JSON argv as a list of strings, whatever the row holds."""
    try:
        command = json.loads(stored) if isinstance(stored, str) else stored
    except (ValueError, RecursionError):
        command = None
    if isinstance(command, list) and all(isinstance(arg, str) for arg in command):
        return command
    return [str(stored)] if stored not in (None, "") else []


def _text_or_none(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _int_or_none(value) -> int | None:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


#: known_dead(host, boot_id, pid, pid_start): is a recorded lockrun process certainly gone?
#: The rule is the caller's (host.known_dead); storage only hands over what was recorded.
KnownDead = Callable[[Any, Any, Any, Any], bool]


def _row_to_dict(row: sqlite3.Row, known_dead: KnownDead | None = None) -> dict:
    """One row as ``history --json`` shows it. SQLite keeps whatever type it was given, and a
    ledger may have been written by anyone: every column is read back as the type it should be.
    With ``known_dead``, a running row whose lockrun process is gone reads as abandoned."""
    item = {key: _text_or_none(row[key]) for key in PUBLIC_FIELDS}
    for key in ("exit_code", "signal", "exit_status", "pid", "fencing_token"):
        item[key] = _int_or_none(row[key])
    for key in ("duration_s", "waited_s"):
        seconds = row[key]
        item[key] = float(seconds) if isinstance(seconds, (int, float)) and math.isfinite(seconds) else None
    item["command"] = _command_list(row["command"])
    if (item["status"] == Status.RUNNING and known_dead is not None
            and known_dead(row["host"], row["boot_id"], row["pid"], row["pid_start"])):
        item["status"] = Status.ABANDONED  # its lockrun process is gone: it will never finish
    return item


def _rollback(db: sqlite3.Connection) -> None:
    """Undo a failed transaction, unless SQLite already did (it does on a full disk): the
    error that ended it is the one worth reporting, not "cannot rollback"."""
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass


class Ledger:
    """The run ledger of this host. Readers that show runs pass ``known_dead`` (host.known_dead):
    running rows whose lockrun process is gone then read as abandoned."""

    def __init__(self, path: Path | str, known_dead: KnownDead | None = None) -> None:
        self.path = Path(path)
        self._known_dead = known_dead
        self._db: sqlite3.Connection | None = None

    # -- opening ----------------------------------------------------------------------

    def open(self, create: bool = True) -> Ledger:
        """Open (and with ``create`` make) the database; raise LedgerError if it cannot."""
        try:
            self._check_files(create)
            db = sqlite3.connect(
                str(self.path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            db.row_factory = sqlite3.Row
            db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._db = db
            self._retry_locked(self._setup)
        except (OSError, sqlite3.Error) as exc:
            self.close()
            raise LedgerError(f"ledger {self.path}: {exc}{self._full_disk_hint()}") from None
        return self

    def _check_files(self, create: bool) -> None:
        """The ledger's directory is ours and private; the ledger and its side files are no links.

        A new ledger is created here, 0600 (it holds the commands' output tails), so that
        SQLite, which gives its -wal and -shm files the database's mode, keeps them private too.
        """
        try:
            private_dir(self.path.parent, "the ledger's directory", create=create)
        except UnsafePath as exc:
            raise LedgerError(str(exc)) from None
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            if not create:
                raise LedgerError(f"ledger {self.path} does not exist yet") from None
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
            except FileExistsError:
                pass  # another lockrun made it meanwhile: checked by the next look
            st = os.lstat(self.path)
        for path, info in ((self.path, st), *((Path(f"{self.path}{side}"), None) for side in SIDE_FILES)):
            if info is None:
                try:
                    info = os.lstat(path)
                except FileNotFoundError:
                    continue
            if not stat.S_ISREG(info.st_mode):
                kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
                raise LedgerError(f"ledger file {path} is {kind}; refusing to open it (remove it, or set --ledger)")

    def _full_disk_hint(self) -> str:
        """SQLite reports a full disk as "disk I/O error" at times: say so when it is."""
        try:
            fs = os.statvfs(self.path.parent)
        except OSError:
            return ""
        return " (the file system is full)" if fs.f_bavail == 0 else ""

    def _retry_locked(self, action):
        # Switching to WAL or creating the schema takes an exclusive lock for which
        # SQLite does not always call the busy handler; when forty processes start
        # on a fresh ledger, some must simply try again.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                return action()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _setup(self) -> None:
        db = self._db
        if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        if db.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for target in range(version + 1, SCHEMA_VERSION + 1):
                # Statement by statement: executescript() would COMMIT our IMMEDIATE transaction.
                for statement in _MIGRATIONS[target]:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {target}")
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    @contextlib.contextmanager
    def _connection(self, writing: bool = False) -> Iterator[sqlite3.Connection]:
        """The open database, for one operation: every SQLite error in it becomes a LedgerError
        that names the ledger (and, for a write, a full disk when it is one)."""
        if self._db is None:
            raise LedgerError(f"ledger {self.path} is not open")
        try:
            yield self._db
        except SQL_ERRORS as exc:
            raise LedgerError(f"ledger {self.path}: {exc}{self._full_disk_hint() if writing else ''}") from None

    def _write(self, sql: str, params: tuple) -> sqlite3.Cursor:
        with self._connection(writing=True) as db:
            return self._retry_locked(lambda: db.execute(sql, params))

    def _transaction(self, *statements: tuple[str, tuple]) -> None:
        """Several writes that land together or not at all."""
        with self._connection(writing=True) as db:

            def run() -> None:
                db.execute("BEGIN IMMEDIATE")  # take the write lock first: no upgrade deadlock
                try:
                    for sql, params in statements:
                        db.execute(sql, params)
                    db.execute("COMMIT")
                except BaseException:
                    _rollback(db)
                    raise

            self._retry_locked(run)

    # -- writes -------------------------------------------------------------------------

    def start(self, run: RunRecord) -> None:
        self._write(
            "INSERT INTO runs (run_id, name, status, host, pid, pid_start, boot_id, command, backend,"
            " started_at, once_key, fencing_token, backend_where, backend_from)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run.run_id,
                run.name,
                run.status,
                run.host or this_host.hostname(),
                run.pid or os.getpid(),
                run.pid_start,
                run.boot_id or this_host.boot_id(),
                json.dumps(run.command),
                run.backend,
                run.started_at,
                run.once_key,
                run.fencing_token,
                run.backend_where,
                run.backend_from,
            ),
        )

    def record_command_start(self, run_id: str, *, fencing_token: int, started_at: str, waited_s: float | None) -> None:
        """Noted as soon as the command runs, so that an abandoned run's row has it too: the
        fencing token, when the command started and how long the run waited for the lock."""
        self._write(
            "UPDATE runs SET fencing_token = ?, started_at = ?, waited_s = ? WHERE run_id = ?",
            (fencing_token, started_at, waited_s, run_id),
        )

    def finish(
        self,
        run_id: str,
        *,
        status: str,
        ended_at: str,
        duration_s: float | None,
        exit_code: int | None = None,
        signal: int | None = None,
        fencing_token: int | None = None,
        error: str | None = None,
        note: str | None = None,
        output_tail: str | None = None,
        exit_status: int | None = None,
        waited_s: float | None = None,
        started_at: str | None = None,
    ) -> None:
        """The final row; ``started_at`` (when given) replaces the time the row was written with
        the time the command started."""
        self._transaction(
            (
                "UPDATE runs SET status = ?, ended_at = ?, duration_s = ?, exit_code = ?, signal = ?,"
                " fencing_token = COALESCE(?, fencing_token), error = ?, note = ?, output_tail = ?,"
                " exit_status = ?, waited_s = ?, started_at = COALESCE(?, started_at)"
                " WHERE run_id = ?",
                (status, ended_at, duration_s, exit_code, signal, fencing_token, error, note, output_tail,
                 exit_status, waited_s, started_at, run_id),
            ),
            (
                "INSERT INTO run_counts (name, status, count) SELECT name, ?, 1 FROM runs WHERE run_id = ?"
                " ON CONFLICT (name, status) DO UPDATE SET count = count + 1",
                (status, run_id),
            ),
        )

    def record_event(self, run: RunRecord, *, status: str, note: str | None = None) -> None:
        """A finished row in one write, for things that are over at once (``unlock``)."""
        self.start(run)
        self.finish(run.run_id, status=status, ended_at=run.started_at, duration_s=0.0, note=note)

    # -- retention ----------------------------------------------------------------------

    def prune(self, older_than: str) -> int:
        """Delete finished rows started before the ISO time ``older_than``; never running ones."""
        return self._write("DELETE FROM runs WHERE started_at < ? AND status != 'running'", (older_than,)).rowcount

    def prune_now_and_then(self, older_than: str, every_s: float = 3600.0) -> int | None:
        """Prune at most once per ``every_s`` across all runs sharing this ledger.

        One indexed read per run decides; the DELETE itself runs about once an hour.
        """
        with self._connection() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'last_prune'").fetchone()
        if row is not None and parse_iso(row[0]) is not None and seconds_since(row[0]) < every_s:
            return None
        self._write("INSERT OR REPLACE INTO meta (key, value) VALUES ('last_prune', ?)", (utc_now_iso(),))
        return self.prune(older_than)

    # -- reads --------------------------------------------------------------------------

    def _query(self, sql: str, params: tuple) -> list[dict]:
        with self._connection() as db:
            return [_row_to_dict(row, self._known_dead) for row in db.execute(sql, params)]

    def history(
        self, name: str | None = None, *, limit: int = 20, status: str | None = None, since: str | None = None,
        host: str | None = None,
    ) -> list[dict]:
        """Newest first. ``since`` is an ISO timestamp; ``abandoned`` is derived, so it is filtered here."""
        where, params = [], []
        if name is not None:
            where.append("name = ?")
            params.append(name)
        if host is not None:
            where.append("host = ?")
            params.append(host)
        if since is not None:
            where.append("started_at >= ?")
            params.append(since)
        derived = status in IN_PROGRESS
        if status is not None:
            where.append("status = ?")
            params.append(Status.RUNNING if derived else status)
        sql = _SELECT + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY started_at DESC"
        if derived:  # few rows are ever running: read them all, then keep the ones asked for
            rows = [row for row in self._query(sql, tuple(params)) if row["status"] == status]
            return rows[:limit]
        return self._query(sql + " LIMIT ?", (*params, limit))

    def find_run(self, run_id_prefix: str) -> tuple[dict, str | None] | None:
        """The run whose id starts with ``run_id_prefix``, and its output tail.

        Raises LedgerError when the prefix matches several runs.
        """
        pattern = run_id_prefix + "%"  # the CLI lets only hex digits through: no LIKE wildcards
        with self._connection() as db:
            rows = db.execute(
                _SELECT.replace(" FROM runs", ", output_tail FROM runs") + " WHERE run_id LIKE ? LIMIT 2", (pattern,)
            ).fetchall()
        if len(rows) > 1:
            raise LedgerError(f"run id prefix {run_id_prefix!r} matches several runs: give more of it")
        return (_row_to_dict(rows[0], self._known_dead), rows[0]["output_tail"]) if rows else None

    def run_counts(self) -> list[tuple[str, str, int]]:
        """(name, status, count) of every finished run ever recorded, pruned ones included."""
        with self._connection() as db:
            return [tuple(row) for row in db.execute("SELECT name, status, count FROM run_counts ORDER BY 1, 2")]

    def _rows(self, cursor: sqlite3.Cursor, sql: str, params: dict) -> list[tuple]:
        """All rows of a query; text that is not UTF-8 (a row someone else wrote) is read with
        replacement characters instead of failing the whole query."""
        try:
            return cursor.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if "decode" not in str(exc):
                raise
        self._db.text_factory = lambda data: data.decode("utf-8", "replace")
        try:
            return cursor.execute(sql, params).fetchall()
        finally:
            self._db.text_factory = str

    def names(self) -> list[str]:
        """Every lock name in the ledger, one index seek each (a loose index scan, not a table scan)."""
        found: list[str] = []
        last = b""  # the raw bytes: a name that is not UTF-8 is stepped over, not fatal
        try:
            while True:
                row = self._db.execute(
                    "SELECT CAST(min(name) AS BLOB) FROM runs WHERE name > CAST(? AS TEXT)", (last,)
                ).fetchone()
                if row is None or row[0] is None:
                    return found
                last = row[0]
                try:
                    found.append(last.decode("utf-8"))
                except UnicodeDecodeError:
                    continue
        except sqlite3.Error as exc:
            raise LedgerError(f"ledger {self.path}: {exc}") from None

    def window_lanes(
        self, since: str, until: str, names: list[str] | None = None, *, host: str | None = None,
        by_host: bool = False,
    ) -> list[tuple[str, str | None]]:
        """The (name, host) lanes a timeline of [since, until) has, in order: names with a row in
        the window (every one of ``names`` when given), with ``by_host`` one lane per host."""
        if self._db is None:
            raise LedgerError(f"ledger {self.path} is not open")
        where = "name = :name AND ended_at >= :since AND started_at < :until" + (
            " AND host = :host" if host is not None else "")
        probe = f"SELECT 1 FROM runs WHERE {where} LIMIT 1"
        probe_open = "SELECT 1 FROM runs WHERE name = :name AND ended_at IS NULL AND started_at < :until" + (
            " AND host = :host LIMIT 1" if host is not None else " LIMIT 1")
        hosts_sql = (f"SELECT DISTINCT CAST(host AS TEXT) FROM runs WHERE {where} UNION"
                     " SELECT DISTINCT CAST(host AS TEXT) FROM runs WHERE name = :name AND ended_at IS NULL"
                     " AND started_at < :until" + (" AND host = :host" if host is not None else "") + " ORDER BY 1")
        lanes: list[tuple[str, str | None]] = []
        try:
            for name in self.names() if names is None else names:
                params = {"name": name, "since": since, "until": until, "host": host}
                if by_host:
                    hosts = [row[0] for row in self._rows(self._db.cursor(), hosts_sql, params)]
                    lanes.extend((name, h) for h in hosts)
                    if not hosts and names is not None:
                        lanes.append((name, None))
                elif names is not None or self._db.execute(probe, params).fetchone() \
                        or self._db.execute(probe_open, params).fetchone():
                    lanes.append((name, None))
        except sqlite3.Error as exc:
            raise LedgerError(f"ledger {self.path}: {exc}") from None
        return lanes

    def window(
        self, since: str, until: str, names: list[str] | None = None, *, host: str | None = None,
        with_host: bool = False, detail: bool = False,
    ) -> Iterator[tuple[str, list[tuple], list[tuple]]]:
        """(name, runs, skips) of each lock name with a row in [since, until), one name at a time.

        ``since`` and ``until`` are ISO timestamps. Runs and skips are plain tuples in the field
        order of ``timeline.RunSpan`` (started_at, ended_at, status, duration_s, then with
        ``with_host`` host, and with ``detail`` host, run_id and exit_code): plain, short tuples
        from one index range per name, because a busy week is a million rows, and yielded one name
        at a time so that only one name's runs are in memory. Runs: the finished ones ordered by
        end, then the unfinished ones (``ended_at`` None; ``running``, or ``abandoned`` when its
        process is known to be gone). Skips (``busy``, ``duplicate``, ``unlocked``) ordered by
        start. Names without a row in the window are left out unless named.
        """
        if self._db is None:
            raise LedgerError(f"ledger {self.path} is not open")
        extra = ", host, run_id, exit_code" if detail else (", host" if with_host else "")
        columns = ("started_at, ended_at, status,"
                   " CASE WHEN typeof(duration_s) IN ('real', 'integer') AND abs(duration_s) < 1e12 THEN duration_s END"
                   + extra)
        host_filter = " AND host = :host" if host is not None else ""
        # typeof() guards: a row someone else wrote with a number for a time must not end up
        # compared with text in Python.
        # One range of the index per name, runs and skips together (split below: cheaper than
        # reading the range twice). typeof() guards: a row someone else wrote with a number for a
        # time must not end up compared with text in Python.
        finished_sql = (
            f"SELECT {columns} FROM runs WHERE name = :name AND ended_at >= :since AND started_at < :until"
            f" AND typeof(started_at) = 'text' AND typeof(ended_at) = 'text'{host_filter} ORDER BY ended_at, started_at"
        )
        open_sql = (
            f"SELECT {columns}, host, boot_id, pid, pid_start FROM runs WHERE name = :name AND ended_at IS NULL"
            f" AND started_at < :until AND typeof(started_at) = 'text' AND status NOT IN {_SKIPS}{host_filter}"
            " ORDER BY started_at"
        )
        width = 7 if detail else (5 if with_host else 4)  # columns before the liveness ones
        try:
            cursor = self._db.cursor()
            cursor.row_factory = None  # plain tuples: several times cheaper than sqlite3.Row
            for name in self.names() if names is None else names:
                params = {"name": name, "since": since, "until": until, "host": host}
                runs = self._rows(cursor, finished_sql, params)
                skips: list[tuple] = []
                is_skip = list(map(NOT_A_RUN.__contains__, map(itemgetter(2), runs)))
                if any(is_skip):
                    skips = [row for row in compress(runs, is_skip) if row[0] >= since]
                    skips.sort()
                    runs = list(compress(runs, map(not_, is_skip)))
                for row in self._rows(cursor, open_sql, params):
                    status = row[2]
                    if status == Status.RUNNING and self._known_dead is not None and self._known_dead(*row[width:]):
                        status = Status.ABANDONED  # its lockrun process is gone: it will never finish
                    runs.append((row[0], None, status, None, *row[4:width]))
                if runs or skips or names is not None:
                    yield name, runs, skips
        except sqlite3.Error as exc:
            raise LedgerError(f"ledger {self.path}: {exc}") from None

    def recent_configurations(self, since: str, names: list[str] | None = None) -> list[dict]:
        """How this host's runs since ``since`` reached their backend, newest first: ``name``,
        ``backend``, ``backend_where``, ``backend_from``, ``started_at`` (``unlock`` rows are an
        operator's shell, not a run: left out)."""
        sql = ("SELECT name, backend, backend_where, backend_from, started_at FROM runs"
               " WHERE host = ? AND started_at >= ? AND status != 'unlocked'")
        params: list = [this_host.hostname(), since]
        if names:
            sql += " AND name IN (" + ", ".join("?" * len(names)) + ")"
            params += names
        with self._connection() as db:
            rows = db.execute(sql + " ORDER BY started_at DESC LIMIT 500", params).fetchall()
        return [{key: row[key] for key in row.keys()} for row in rows]

    def last_with_status(self, name: str, status: str) -> dict | None:
        rows = self._query(_SELECT + " WHERE name = ? AND status = ? ORDER BY started_at DESC LIMIT 1", (name, status))
        return rows[0] if rows else None

    def last_finished(self, name: str) -> dict | None:
        """The newest finished run of ``name``; skips and unlocks are not runs."""
        rows = self._query(
            _SELECT + " WHERE name = ? AND status NOT IN ('running', 'busy', 'duplicate', 'unlocked')"
            " ORDER BY started_at DESC LIMIT 1",
            (name,),
        )
        return rows[0] if rows else None
