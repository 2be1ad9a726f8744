"""The ledger's file: checked before SQLite opens it, and its schema, migrated when it is opened.

The schema is a list of versions (``MIGRATIONS``); ``PRAGMA user_version`` says which of them a
ledger has. A ledger is migrated in one IMMEDIATE transaction, so that many lockrun processes
starting on an old ledger at once migrate it once.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from lockrun.core.errors import LedgerError
from lockrun.core.record import Status
from lockrun.system.safefs import UnsafePath, check_owner_and_mode, private_dir

# The files SQLite opens beside the database (WAL mode): none of them may be a link.
SIDE_FILES = ("-wal", "-shm", "-journal")
BUSY_TIMEOUT_MS = 15000

# The WHERE clauses of the timeline's partial indexes (migration 6). A query uses such an index
# only when its own WHERE repeats the clause word for word: queries take these strings.
NOTABLE = f"status NOT IN ('{Status.RUNNING}', '{Status.SUCCEEDED}')"  # failures, skips and the rest: few rows
# A run that ran and ended (not running, not a skip, not an unlock).
FINISHED_RUN = (f"status NOT IN ('{Status.RUNNING}', '{Status.BUSY}', '{Status.DUPLICATE}',"
                f" '{Status.UNLOCKED}')")
# A paused skip (lockrun pause) came after migration 6: its rows are in runs_durations, whose WHERE
# must stay word for word as the ledgers have it, so a query of finished runs adds this clause.
NOT_PAUSED = f"status != '{Status.PAUSED}'"

SCHEMA_VERSION = 11

#: What tells whether a running row's lockrun is alive (host.known_dead takes them in this order).
LIVENESS_COLUMNS = "boot_id, pid, pid_start, pid_ns, machine_id"


#: Each schema version: the statements that take the ledger to it from the version before.
MIGRATIONS: dict[int, tuple[str, ...]] = {
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
    # `lockrun timeline` drawn from columns (ledger_timeline.py): the few runs that did not
    # succeed, and the skips, by name and status; and every finished run by name and duration
    # (an exact median walks to the middle of a name's entries instead of sorting them). Both
    # partial: a running row is in neither, so starting a run writes nothing to them; finishing
    # one adds an entry to each it belongs to (a success or a skip to one, a failure to both).
    6: (
        f"CREATE INDEX IF NOT EXISTS runs_notable ON runs (name, status, ended_at, started_at, host) WHERE {NOTABLE}",
        "CREATE INDEX IF NOT EXISTS runs_durations ON runs (name, duration_s, ended_at, host, status)"
        f" WHERE {FINISHED_RUN}",
    ),
    # Whether the release found the lock no longer the run's (1: it may have overlapped another
    # run; 0: released as its own; NULL: no release, or none recorded then), and, per name, how
    # many runs were so flagged, kept as they finish (like run_counts: prune never lowers a
    # Prometheus counter). docs/guarantees.md "A run that lost its lock says so".
    7: (
        "ALTER TABLE runs ADD COLUMN lock_lost_at_release INTEGER",
        """
        CREATE TABLE IF NOT EXISTS flag_counts (
            name  TEXT NOT NULL,
            flag  TEXT NOT NULL,
            count INTEGER NOT NULL,
            PRIMARY KEY (name, flag)
        ) WITHOUT ROWID
        """,
    ),
    # Which process a row's pid is: the inode of its PID namespace and the machine's machine-id(5).
    # A pid means that process only in that namespace, on that machine, in that boot; a host name
    # proves neither (host.known_dead). Older rows keep NULL and are judged as before, carefully.
    8: (
        "ALTER TABLE runs ADD COLUMN pid_ns INTEGER",
        "ALTER TABLE runs ADD COLUMN machine_id TEXT",
    ),
    # When a run was found slow (--warn-after; docs/operating.md "Output"): set while it runs, so that
    # `status` can say so; counted per name in flag_counts ('slow') at that moment.
    9: (
        "ALTER TABLE runs ADD COLUMN slow_at TEXT",
    ),
    # Each name's declared cadence (--every/--schedule, --grace: docs/operating.md "Declaring a
    # cadence"), as core/cadence stores it, and when it was first declared so: the newest wins.
    10: (
        """
        CREATE TABLE IF NOT EXISTS cadences (
            name        TEXT PRIMARY KEY,
            declaration TEXT NOT NULL,
            declared_at TEXT NOT NULL
        ) WITHOUT ROWID
        """,
    ),
    # --retry: each attempt is its own row, numbered from 1, and names the first attempt's run id
    # (docs/operating.md "Retries and jitter"). NULL: a run without --retry, or a row from before.
    11: (
        "ALTER TABLE runs ADD COLUMN attempt INTEGER",
        "ALTER TABLE runs ADD COLUMN first_run_id TEXT",
    ),
}


def check_files(path: Path, create: bool) -> None:
    """The ledger's directory is ours and private; the ledger and its side files are no links.

    A new ledger is created here, 0600 (it holds the commands' output tails), so that
    SQLite, which gives its -wal and -shm files the database's mode, keeps them private too.
    """
    try:
        private_dir(path.parent, "the ledger's directory", create=create)
    except UnsafePath as exc:
        raise LedgerError(str(exc)) from None
    st = _ledger_stat(path, create)
    for side_path, info in ((path, st), *((Path(f"{path}{side}"), None) for side in SIDE_FILES)):
        if info is None:
            try:
                info = os.lstat(side_path)
            except FileNotFoundError:
                continue
        _check_file(side_path, info)


def _ledger_stat(path: Path, create: bool) -> os.stat_result:
    """The ledger's lstat, once it exists (with ``create``: made now, 0600, if it did not)."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        if not create:
            raise LedgerError(f"ledger {path} does not exist yet") from None
        with contextlib.suppress(FileExistsError):  # another lockrun made it meanwhile: checked by the next look
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        return os.lstat(path)


def _check_file(side_path: Path, info: os.stat_result) -> None:
    """A ledger file (or a side file): a regular file, ours, writable by nobody else."""
    if not stat.S_ISREG(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
        raise LedgerError(f"ledger file {side_path} is {kind}; refusing to open it (remove it, or set --ledger)")
    try:
        # Someone else's ledger, or one others may write, could be made to say anything (and
        # it keeps the commands' output tails): as for the config file, StrictModes' rule.
        check_owner_and_mode(side_path, info, "ledger file")
    except UnsafePath as exc:
        raise LedgerError(str(exc)) from None


def full_disk_hint(path: Path) -> str:
    """SQLite reports a full disk as "disk I/O error" at times: say so when it is."""
    try:
        fs = os.statvfs(path.parent)
    except OSError:
        return ""
    return " (the file system is full)" if fs.f_bavail == 0 else ""


_T = TypeVar("_T")


def retry_locked(action: Callable[[], _T]) -> _T:
    """``action()``, again while SQLite says "locked", for up to the busy timeout.

    Switching to WAL or creating the schema takes an exclusive lock for which SQLite does not
    always call the busy handler; when forty processes start on a fresh ledger, some must simply
    try again."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return action()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def migrate(db: sqlite3.Connection) -> None:
    """WAL mode, and the schema of ``SCHEMA_VERSION``: the migrations a ledger lacks, at once."""
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
            for statement in MIGRATIONS[target]:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {target}")
        db.execute("COMMIT")
    except BaseException:
        rollback(db)
        raise


def rollback(db: sqlite3.Connection) -> None:
    """Undo a failed transaction, unless SQLite already did (it does on a full disk): the
    error that ended it is the one worth reporting, not "cannot rollback"."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
