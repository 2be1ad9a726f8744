"""The ledger rows of one run, and the moments they record.

    open: the row "running", from the moment lockrun began
      -> the command starts: its start, the wait and the fencing token, written from a thread
      -> the final row (the one mapping from an outcome to every record of the run: see row)
      -> now and then a prune, and the metrics file if one is asked for

The ledger is best effort (docs/guarantees.md "What lockrun guarantees, and how"): a ledger that cannot
be opened or written never stops the command. A ledger that cannot be opened is said once,
and only when it is clear what that means for the run (see :meth:`RunJournal.say_problem`).

Every row ends: a run whose lockrun fails between the row "running" and the final row still
gets its final row (``error``, exit 125: :meth:`RunJournal.finish_after_failure`), and every
text the rows carry is :func:`~lockrun.core.os_text.escaped` first, so that an argv, a path or a
host name that is not valid UTF-8 (``lockrun -- $'\xff'``) is recorded, not refused by SQLite.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lockrun.core.clock import iso_ago, utc_now_iso
from lockrun.core.errors import ExitCode, LedgerError, Report
from lockrun.core.os_text import escaped_all
from lockrun.core.record import Status
from lockrun.ledger.store import FINAL_FIELDS, Ledger, RunRecord
from lockrun.run.outcome import Outcome
from lockrun.system import host

#: What a ledger write can fail with besides LedgerError: a value SQLite cannot encode. Never
#: expected (rows are escaped first), and never a reason for a run to end in a traceback.
WRITE_ERRORS = (LedgerError, ValueError)


class RunJournal:
    def __init__(
        self,
        ledger_path: Path | str,
        run: RunRecord,
        *,
        report: Report,
        keep_days: int | None = None,
        metrics_file: Path | None = None,
    ) -> None:
        """``run`` is the row "running" to write; its ``started_at`` is when lockrun began."""
        self.ledger_path, self.report = ledger_path, report
        self.run = type(run)(*escaped_all(tuple(run)))  # an argv that is not UTF-8 is kept, escaped
        self._finished = False
        self.keep_days, self.metrics_file = keep_days, metrics_file  # what finish does besides the row
        self.ledger: Ledger | None = None
        self._problem: str | None = None  # why the ledger could not be opened, not yet said
        self._command_start_noted: threading.Thread | None = None
        # The command's own start and end: the final row's started_at, ended_at and duration_s.
        # A run whose command never started keeps run.started_at, ends when lockrun gave up,
        # and has no duration.
        self.command_started_wall: str | None = None
        self._command_started_mono: float | None = None
        self.ended_wall: str | None = None
        self.duration_s: float | None = None
        # From the first attempt to take the lock (connecting included) until it was ours or
        # lockrun gave up; None when it never tried (the command cannot run, the URL is unusable).
        self._acquire_started_mono: float | None = None
        self.waited_s: float | None = None

    # -- the moments of the run -------------------------------------------------------------

    def acquire_began(self) -> None:
        self._acquire_started_mono = time.monotonic()

    def acquire_over(self) -> None:
        """The lock is ours, or lockrun gave up on it (busy, interrupted, failed): the wait ends."""
        if self.waited_s is None and self._acquire_started_mono is not None:
            self.waited_s = round(time.monotonic() - self._acquire_started_mono, 6)

    def command_started(self, wall: str, mono: float, fencing_token: int) -> None:
        """The command was exec'd at ``wall`` (``mono`` on the monotonic clock) under ``fencing_token``."""
        self.command_started_wall = wall
        self._command_started_mono = mono
        self._note_command_start(fencing_token)

    def command_ended(self) -> None:
        """The command's whole group is gone: its end and duration."""
        self.ended_wall = utc_now_iso()
        if self._command_started_mono is not None:
            self.duration_s = round(time.monotonic() - self._command_started_mono, 6)

    def running_for(self) -> float | None:
        """Seconds since the command started (None: it has not)."""
        if self._command_started_mono is None:
            return None
        return round(time.monotonic() - self._command_started_mono, 6)

    def mark_ended(self) -> None:
        """The run's end: the command is gone (or never started); releasing and telling come after.
        A command that ran has its end and duration already (see :meth:`command_ended`); one that
        never started ends now and has no duration."""
        if self.ended_wall is None:
            self.ended_wall = utc_now_iso()

    def row(self, outcome: Outcome) -> dict[str, Any]:
        """The run's final row as ``history --json`` shows it: the one mapping from an outcome to
        what the ledger, webhooks and every other record of the run say."""
        row: dict[str, Any] = escaped_all({
            "run_id": self.run.run_id, "name": self.run.name, "status": outcome.status,
            "exit_code": outcome.command_exit, "signal": outcome.signal,
            "exit_status": outcome.exit_code,  # what lockrun exits with: what cron and the shell see
            "host": host.hostname(), "pid": os.getpid(), "command": self.run.command,
            "backend": self.run.backend,
            "started_at": self.command_started_wall or self.run.started_at, "ended_at": self.ended_wall,
            "duration_s": self.duration_s, "waited_s": self.waited_s,
            "fencing_token": outcome.fencing_token, "once_key": self.run.once_key, "error": outcome.error,
            "note": outcome.note, "lock_lost_at_release": outcome.lock_lost_at_release,
            "attempt": self.run.attempt, "first_run_id": self.run.first_run_id,
        })
        return row

    # -- the rows -------------------------------------------------------------------------

    def open(self) -> None:
        """Open the ledger and write the row "running"; a failure is kept for :meth:`say_problem`."""
        # Often the state directory is also what the local backend needs, and then the
        # backend's error is the one line to print: hence not said here.
        try:
            self.ledger = Ledger(self.ledger_path).open()
        except WRITE_ERRORS as exc:
            self._problem = f"cannot open the run ledger ({exc})"
            self.ledger = None
            return
        try:
            self.ledger.start(self.run._replace(pid_start=host.own_start()))
        except WRITE_ERRORS as exc:
            self._problem = f"cannot write to the run ledger ({exc})"
            self.ledger.close()
            self.ledger = None

    def say_problem(self, command_runs: bool, error_said: bool = False) -> None:
        """Warn once that this run has no ledger row, in words that fit what happens next;
        not when the command does not run and an error line (``error_said``) said why."""
        if self._problem is None:
            return
        problem, self._problem = self._problem, None
        if command_runs:
            self.report("warn", f"{problem}; the command runs regardless")
        elif not error_said:
            self.report("warn", f"{problem}; this run is not recorded")

    def _note_command_start(self, fencing_token: int) -> None:
        """Put the fencing token, the command's start and the wait on the running row, from a
        thread: a busy ledger must never hold up the loop that enforces the lease, and a SIGKILLed
        holder's row should still name them."""
        ledger = self.ledger
        if ledger is None or self.command_started_wall is None:
            return
        started_at, waited_s = self.command_started_wall, self.waited_s
        # No thread for it: the final row carries the fencing token all the same.
        self._write_aside(lambda: ledger.record_command_start(self.run.run_id, fencing_token=fencing_token,
                                                              started_at=started_at, waited_s=waited_s))

    def _write_aside(self, write: Callable[[], object]) -> None:
        """Run one ledger write in a thread of its own, after the one before it (one connection,
        one writer at a time); finish() waits for the last. A write that fails is a warning; a
        thread that cannot start leaves the write to the final row."""
        before = self._command_start_noted

        def run() -> None:
            if before is not None:
                before.join()
            try:
                write()
            except WRITE_ERRORS as exc:
                self.report("warn", f"cannot write to the run ledger ({exc}); the command runs regardless")

        noting = threading.Thread(target=run, name="lockrun-ledger", daemon=True)
        try:
            noting.start()
        except RuntimeError:
            return
        self._command_start_noted = noting

    def command_slow(self, note: str) -> None:
        """``--warn-after``: the running row is slow (``slow_at``, ``note``), written from a thread
        as the command's start is: a busy ledger never holds up the main loop."""
        ledger = self.ledger
        if ledger is None:
            return
        slow_at = utc_now_iso()
        # No thread for it: the final row's note says it all the same.
        self._write_aside(lambda: ledger.record_slow(self.run.run_id, slow_at=slow_at, note=note))

    def finish(self, outcome: Outcome) -> None:
        """The final row; then, now and then, a prune, and the metrics file."""
        self._finished = True
        if self._command_start_noted is not None:
            self._command_start_noted.join()  # one connection, one writer at a time
        row = self.row(outcome)
        final = {key: row[key] for key in FINAL_FIELDS}
        self._call("write to", lambda ledger: ledger.finish(self.run.run_id, **final, output_tail=outcome.output_tail))
        if self.keep_days:
            keep_s = self.keep_days * 86400.0
            self._call("prune", lambda ledger: ledger.prune_now_and_then(iso_ago(keep_s)))
        if self.metrics_file is not None and self.ledger is not None:
            self._write_metrics(self.metrics_file, self.ledger)
        if self.ledger is not None:
            self.ledger.close()

    def finish_after_failure(self, exc: BaseException) -> None:
        """lockrun failed after the row "running" and before its final row: the row ends anyway
        (``error``, exit 125), never left "running" for a process that is about to exit."""
        if self._finished:
            return
        self.mark_ended()
        with contextlib.suppress(Exception):  # the failure being reported is the one that matters
            self.finish(Outcome(exit_code=ExitCode.INTERNAL, status=Status.ERROR, error=f"lockrun failed: {exc!r}"))

    def _call(self, action: str, fn: Callable[[Ledger], object]) -> None:
        if self.ledger is None:
            return
        try:
            fn(self.ledger)
        except WRITE_ERRORS as exc:
            self.report("warn", f"cannot {action} the run ledger ({exc}); the command runs regardless")
            self.ledger.close()
            self.ledger = None

    def _write_metrics(self, path: Path, ledger: Ledger) -> None:
        from lockrun.ledger import metrics  # only runs that asked for it pay for the import

        try:
            from lockrun.system.host import known_dead

            judged = ledger.judging_liveness(known_dead)  # abandoned runs counted, as `lockrun metrics` does
            name = self.run.name
            metrics.write_job_file(path, name, lambda: metrics.ledger_facts(judged, (name,)))
        except (OSError, LedgerError) as exc:  # a device there (NotRegularFile) too: it is left alone
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            self.report("warn", f"cannot write the metrics file {path} ({reason})")
