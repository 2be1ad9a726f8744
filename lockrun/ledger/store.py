"""The run ledger: one SQLite row per run, written before the command starts.

WAL mode and a busy timeout let many lockrun processes on one host write at
once; every write is a single autocommit statement, so no transaction ever has
to upgrade from reading to writing (the case where SQLite gives up with
"database is locked" instead of waiting).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sqlite3
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from lockrun.core.clock import seconds_since, utc_now_iso
from lockrun.core.errors import LedgerError
from lockrun.core.record import IN_PROGRESS, Row, Status
from lockrun.core.run_ids import run_id_digits
from lockrun.ledger.file import (
    BUSY_TIMEOUT_MS,
    FINISHED_RUN,
    NOT_PAUSED,
    check_files,
    full_disk_hint,
    migrate,
    retry_locked,
    rollback,
)
from lockrun.ledger.rows import SELECT, history_query, row_to_dict
from lockrun.system import host as this_host

if TYPE_CHECKING:
    from lockrun.ledger.timeline import KnownDead, LedgerTimeline

# Errors a query or write can end in besides sqlite3.Error: a value SQLite cannot store
# (an integer past 64 bits) is an OverflowError.
SQL_ERRORS = (sqlite3.Error, OverflowError)


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
    pid_ns: int | None = None  # None: this process's PID namespace
    machine_id: str | None = None  # None: this machine
    cadence: str | None = None  # the run's declared cadence (core/cadence), kept with the name
    attempt: int | None = None  # --retry: which attempt (1, 2, ...); None: a run without --retry
    first_run_id: str | None = None  # --retry: the first attempt's run id


#: The flag_counts entry of a run --warn-after found slow (lockrun_slow_runs_total).
SLOW_FLAG = "slow"

#: The fields of a finished run that ``finish`` writes; the runner builds them in one place.
FINAL_FIELDS = (
    "status", "started_at", "ended_at", "duration_s", "waited_s", "exit_code", "signal", "exit_status",
    "fencing_token", "error", "note", "lock_lost_at_release",
)


#: One more flagged run of the run's name (flag_counts), by the run's id.
_COUNT_FLAG = ("INSERT INTO flag_counts (name, flag, count) SELECT name, ?, 1 FROM runs WHERE run_id = ?"
               " ON CONFLICT (name, flag) DO UPDATE SET count = count + 1")


def _insert(run: RunRecord) -> tuple[str, tuple[Any, ...]]:
    """The row "running" of ``run``; what it leaves None is this host's, process's, boot's."""
    return (
        "INSERT INTO runs (run_id, name, status, host, pid, pid_start, boot_id, command, backend,"
        " started_at, once_key, fencing_token, backend_where, backend_from, pid_ns, machine_id, attempt,"
        " first_run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            run.pid_ns or this_host.pid_ns(),
            run.machine_id or this_host.machine_id() or None,
            run.attempt,
            run.first_run_id,
        ),
    )


def _declare(run: RunRecord) -> tuple[str, tuple[Any, ...]]:
    """The run's declared cadence, kept with its name."""
    # Written only when it changed (the newest declaration wins): most runs declare the same.
    return (
        "INSERT INTO cadences (name, declaration, declared_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE"
        " SET declaration = excluded.declaration, declared_at = excluded.declared_at"
        " WHERE cadences.declaration != excluded.declaration",
        (run.name, run.cadence, run.started_at),
    )


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
            check_files(self.path, create)
            db = sqlite3.connect(
                str(self.path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            db.row_factory = sqlite3.Row
            db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._db = db
            retry_locked(lambda: migrate(db))
        except (OSError, sqlite3.Error) as exc:
            self.close()
            raise LedgerError(f"ledger {self.path}: {exc}{full_disk_hint(self.path)}") from None
        return self

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
            raise LedgerError(f"ledger {self.path}: {exc}{full_disk_hint(self.path) if writing else ''}") from None

    def _write(self, sql: str, params: tuple[Any, ...]) -> sqlite3.Cursor:
        with self._connection(writing=True) as db:
            return retry_locked(lambda: db.execute(sql, params))

    def _transaction(self, *statements: tuple[str, tuple[Any, ...]]) -> None:
        """Several writes that land together or not at all."""
        with self._connection(writing=True) as db:

            def run() -> None:
                db.execute("BEGIN IMMEDIATE")  # take the write lock first: no upgrade deadlock
                try:
                    for sql, params in statements:
                        db.execute(sql, params)
                    db.execute("COMMIT")
                except BaseException:
                    rollback(db)
                    raise

            retry_locked(run)

    # -- writes -------------------------------------------------------------------------

    def start(self, run: RunRecord) -> None:
        """The row "running"; and the run's declared cadence, when it changed, in the same transaction."""
        if run.cadence is None:
            self._write(*_insert(run))
        else:
            self._transaction(_insert(run), _declare(run))

    def known_names(self) -> list[str]:
        """Every name this ledger has a finished run or a declared cadence of (small tables: no walk
        of the runs)."""
        with self._connection() as db:
            found = db.execute("SELECT name FROM run_counts UNION SELECT name FROM cadences").fetchall()
        return sorted({str(name) for (name,) in found})

    def cadences(self, names: list[str] | None = None) -> dict[str, tuple[object, object]]:
        """Each name's declared cadence as stored (declaration, declared_at), whoever wrote it."""
        with self._connection() as db:
            found = db.execute("SELECT name, declaration, declared_at FROM cadences").fetchall()
        wanted = set(names) if names is not None else None
        return {str(name): (declaration, declared_at) for name, declaration, declared_at in found
                if wanted is None or name in wanted}

    def record_command_start(self, run_id: str, *, fencing_token: int, started_at: str, waited_s: float | None) -> None:
        """Noted as soon as the command runs, so that an abandoned run's row has it too: the
        fencing token, when the command started and how long the run waited for the lock."""
        self._write(
            "UPDATE runs SET fencing_token = ?, started_at = ?, waited_s = ? WHERE run_id = ?",
            (fencing_token, started_at, waited_s, run_id),
        )

    def record_slow(self, run_id: str, *, slow_at: str, note: str) -> None:
        """``--warn-after``: the running row is slow since ``slow_at`` (its note says so until the
        final row's), and its name's count of slow runs goes up by one."""
        self._transaction(
            ("UPDATE runs SET slow_at = ?, note = ? WHERE run_id = ? AND status = ?",
             (slow_at, note, run_id, Status.RUNNING.value)),
            (_COUNT_FLAG, (SLOW_FLAG, run_id)),
        )

    def slow_running(self) -> dict[str, str]:
        """run_id -> when it was found slow, of the running rows ``--warn-after`` found slow."""
        with self._connection() as db:
            rows = db.execute("SELECT run_id, slow_at FROM runs WHERE status = ? AND slow_at IS NOT NULL",
                              (Status.RUNNING.value,))
            return {str(run_id): str(slow_at) for run_id, slow_at in rows}

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
        lock_lost_at_release: bool | None = None,
    ) -> None:
        """The final row; ``started_at`` (when given) replaces the time the row was written with
        the time the command started."""
        lost = None if lock_lost_at_release is None else int(bool(lock_lost_at_release))
        counted = [(_COUNT_FLAG, ("lock_lost_at_release", run_id))] if lost else []
        self._transaction(
            (
                "UPDATE runs SET status = ?, ended_at = ?, duration_s = ?, exit_code = ?, signal = ?,"
                " fencing_token = COALESCE(?, fencing_token), error = ?, note = ?, output_tail = ?,"
                " exit_status = ?, waited_s = ?, started_at = COALESCE(?, started_at), lock_lost_at_release = ?"
                " WHERE run_id = ?",
                (status, ended_at, duration_s, exit_code, signal, fencing_token, error, note, output_tail,
                 exit_status, waited_s, started_at, lost, run_id),
            ),
            (
                "INSERT INTO run_counts (name, status, count) SELECT name, ?, 1 FROM runs WHERE run_id = ?"
                " ON CONFLICT (name, status) DO UPDATE SET count = count + 1",
                (status, run_id),
            ),
            *counted,
        )

    def record_event(self, run: RunRecord, *, status: str, note: str | None = None) -> None:
        """A finished row in one write, for things that are over at once (``unlock``)."""
        self.start(run)
        self.finish(run.run_id, status=status, ended_at=run.started_at, duration_s=0.0, note=note)

    # -- retention ----------------------------------------------------------------------

    def prune(self, older_than: str) -> int:
        """Delete finished rows started before the ISO time ``older_than``; never running ones."""
        return self._write(f"DELETE FROM runs WHERE started_at < ? AND status != '{Status.RUNNING}'",
                           (older_than,)).rowcount

    def prune_now_and_then(self, older_than: str, every_s: float = 3600.0) -> int | None:
        """Prune at most once per ``every_s`` across all runs sharing this ledger.

        One indexed read per run decides; the DELETE itself runs about once an hour.
        """
        with self._connection() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'last_prune'").fetchone()
        elapsed = seconds_since(row[0]) if row is not None else None
        if elapsed is not None and elapsed < every_s:
            return None
        self._write("INSERT OR REPLACE INTO meta (key, value) VALUES ('last_prune', ?)", (utc_now_iso(),))
        return self.prune(older_than)

    # -- reads --------------------------------------------------------------------------

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[Row]:
        with self._connection() as db:
            return [row_to_dict(row, self._known_dead) for row in db.execute(sql, params)]

    def history(
        self, name: str | None = None, *, limit: int = 20, statuses: Collection[str] | None = None,
        since: str | None = None, host: str | None = None,
    ) -> list[Row]:
        """Newest first; ``statuses``: only runs with one of them. ``since`` is an ISO timestamp;
        ``abandoned`` is derived (a ``running`` row of a dead lockrun), so it is filtered here."""
        wanted = frozenset(statuses) if statuses is not None else None
        if wanted is not None and not wanted:
            return []  # none asked for: none match
        sql, params = history_query(name, host, since, wanted)
        if wanted is None or not wanted & IN_PROGRESS:
            return self._query(sql + " LIMIT ?", (*params, limit))
        return self._in_progress(sql, params, wanted, limit)

    def _in_progress(self, sql: str, params: list[Any], wanted: frozenset[str], limit: int) -> list[Row]:
        """Running or abandoned asked for: a running row is either, so rows are read (newest first)
        until enough are the ones asked for."""
        rows: list[Row] = []
        with self._connection() as db:
            for raw in db.execute(sql, tuple(params)):
                row = row_to_dict(raw, self._known_dead)
                if row["status"] in wanted:
                    rows.append(row)
                    if len(rows) >= limit:
                        break
        return rows

    def find_run(self, run_id_prefix: str) -> tuple[Row, str | None] | None:
        """The run whose id starts with ``run_id_prefix``, and its output tail.

        Raises LedgerError when the prefix matches several runs.
        """
        # By hex digits, dashes ignored: a prefix may be given with or without its dashes
        # (core/run_ids). The CLI lets only hex digits and dashes through: no LIKE wildcards.
        pattern = run_id_digits(run_id_prefix) + "%"
        with self._connection() as db:
            rows = db.execute(
                SELECT.replace(" FROM runs", ", output_tail FROM runs")
                + " WHERE REPLACE(run_id, '-', '') LIKE ? LIMIT 2", (pattern,)
            ).fetchall()
        if len(rows) > 1:
            raise LedgerError(f"run id prefix {run_id_prefix!r} matches several runs: give more of it")
        return (row_to_dict(rows[0], self._known_dead), rows[0]["output_tail"]) if rows else None

    def run_counts(self) -> list[tuple[str, str, int]]:
        """(name, status, count) of every finished run ever recorded, pruned ones included."""
        with self._connection() as db:
            return [tuple(row) for row in db.execute("SELECT name, status, count FROM run_counts ORDER BY 1, 2")]

    def flag_counts(self) -> list[tuple[str, str, int]]:
        """(name, flag, count) of the flagged runs ever recorded (lock_lost_at_release, slow), pruned ones included."""
        with self._connection() as db:
            return [tuple(row) for row in db.execute("SELECT name, flag, count FROM flag_counts ORDER BY 1, 2")]

    def timeline(self) -> LedgerTimeline:
        """The timeline's reads: the lanes of a window and their runs (ledger_timeline.py)."""
        from lockrun.ledger.timeline import LedgerTimeline  # not on the run path

        return LedgerTimeline(self._connection, self._known_dead)

    def recent_configurations(self, since: str, names: list[str] | None = None) -> list[dict[str, Any]]:
        """How this host's runs since ``since`` reached their backend, newest first: ``name``,
        ``backend``, ``backend_where``, ``backend_from``, ``started_at`` (``unlock`` rows are an
        operator's shell, not a run: left out)."""
        sql = ("SELECT name, backend, backend_where, backend_from, started_at FROM runs"
               f" WHERE host = ? AND started_at >= ? AND status != '{Status.UNLOCKED}'")
        params: list[Any] = [this_host.hostname(), since]
        if names:
            sql += " AND name IN (" + ", ".join("?" * len(names)) + ")"
            params += names
        with self._connection() as db:
            rows = db.execute(sql + " ORDER BY started_at DESC LIMIT 500", params).fetchall()
        return [dict(zip(row.keys(), row, strict=True)) for row in rows]

    def last_with_status(self, name: str, status: str) -> Row | None:
        rows = self._query(SELECT + " WHERE name = ? AND status = ? ORDER BY started_at DESC LIMIT 1", (name, status))
        return rows[0] if rows else None

    def last_finished(self, name: str) -> Row | None:
        """The newest finished run of ``name``, an abandoned one included (a running row whose
        lockrun is gone, when this ledger judges liveness); skips and unlocks are not runs."""
        if self._known_dead is not None:
            # The runs still "running" are the ones in progress now, and the dead: a few at most.
            recent = self._query(
                SELECT + f" WHERE name = ? AND (({FINISHED_RUN} AND {NOT_PAUSED}) OR status = ?)"
                " ORDER BY started_at DESC LIMIT 20",
                (name, Status.RUNNING),
            )
            for row in recent:
                if row["status"] != Status.RUNNING:
                    return row
        rows = self._query(
            SELECT + f" WHERE name = ? AND {FINISHED_RUN} AND {NOT_PAUSED}"
            " ORDER BY started_at DESC LIMIT 1",
            (name,),
        )
        return rows[0] if rows else None

    def abandoned_counts(self) -> dict[str, int]:
        """Per name, how many running rows read as abandoned (their lockrun is gone): counted by
        the readers, since nothing ever writes that status. Empty without a liveness judge."""
        if self._known_dead is None:
            return {}
        counts: dict[str, int] = {}
        for row in self._query(SELECT + " WHERE status = ?", (Status.RUNNING,)):
            if row["status"] == Status.ABANDONED:
                counts[row["name"]] = counts.get(row["name"], 0) + 1
        return counts

    def judging_liveness(self, known_dead: KnownDead) -> Ledger:
        """This ledger, on the same connection, reading running rows of dead lockruns as abandoned."""
        judged = copy.copy(self)
        judged._known_dead = known_dead
        return judged
