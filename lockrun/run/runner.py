"""One ``lockrun run``, start to finish: :class:`Run` sequences the steps, each kept elsewhere.

    journal       (journal.py)       the ledger row "running"
    lease client  (lease_client.py)  acquire; or wait (BLPOP) and --replace until --wait runs out
    supervise     (attempt.py)       the backstop (backstop.py) armed, the command exec'd
                                     (supervisor.py), the keeper (keeper.py) renewing; the main
                                     loop (watch.py) stops the command on a lost lease, --replace,
                                     --timeout or a forwarded signal; it and everything it started
                                     (strays.py) are reaped
    outcome       (outcome.py)       exit code, ledger status and note from how the command ended
    retry         (retry.py,         --retry: a failed attempt's row is final, the lock is kept
                  between_attempts.py)
                                     (renewed) through a pause, and the command runs again as a
                                     new attempt, a new row; --jitter sleeps before the acquire
    lease client                     release: compare-and-delete, wake a waiter, the fleet record
    delivery      (notify.py)        the final ping and the webhooks, if asked for
    journal                          the final row; a prune now and then; the metrics file

The order matters: the ledger row exists before anything can fail quietly, the lock is
released only after the command and everything it started are gone, and telling someone
(which may take seconds) comes after the release, never inside the lease. Each step is
described where it lives; docs/guarantees.md "What lockrun guarantees, and how" says why.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lockrun.backends.pause import Paused
from lockrun.backends.protocol import Backend
from lockrun.backends.values import Duplicate, FleetRecord, Holder, Lease, OnceKey, TooSoon
from lockrun.config import options as o
from lockrun.core.clock import iso_ago, utc_now_iso
from lockrun.core.defaults import (
    DEFAULT_FAILURE_TAIL,
)
from lockrun.core.errors import BackendUnavailable, CommandNotRunnable, ExitCode, LockrunError, Report
from lockrun.core.masking import mask_command
from lockrun.core.os_text import escaped_all
from lockrun.core.record import Status
from lockrun.core.redis_url import environment_for_command
from lockrun.core.run_ids import new_run_id
from lockrun.core.secret_names import Masking
from lockrun.ledger.store import RunRecord
from lockrun.run.attempt import Attempt, settled
from lockrun.run.backstop import Backstop
from lockrun.run.between_attempts import BetweenAttempts
from lockrun.run.journal import RunJournal
from lockrun.run.launcher import check_runnable
from lockrun.run.lease_client import LeaseClient
from lockrun.run.outcome import Outcome, busy_message, released_as, too_soon_note
from lockrun.run.supervisor import Supervisor
from lockrun.system.collection import resume_after_startup

if TYPE_CHECKING:
    from lockrun.config.resolve import Plan
    from lockrun.run.job import Job
    from lockrun.run.notify import Delivery


class Run:
    def __init__(
        self,
        plan: Plan,
        job: Job,
        *,
        backend_factory: Callable[[float], Backend],
        ledger_path: Path | str,
        backend_name: str,
        report: Report,
        ledger_keep_days: int | None = None,
        metrics_file: Path | None = None,
        backend_where: str | None = None,
        backend_from: str | None = None,
    ) -> None:
        self.plan = plan  # every option, resolved (config/resolve.py): read as self.plan[o.TTL]
        self.job = job  # what they come to for this run (run/command.py)
        self.backend_factory = backend_factory
        self.backend_name = backend_name
        self.backend_where = backend_where  # without credentials: it goes to the ledger and messages
        self._error_said = False  # an error line went out: the run's one line is said

        def say(level: str, message: str) -> None:
            if level == "error":
                self._error_said = True
            report(level, message)

        self.report: Report = say
        self.call_timeout = job.call_timeout
        self.run_id = new_run_id()  # a dashed UUID: the one format of every run id (core/run_ids)
        self.first_run_id = self.run_id  # --retry: every attempt's row names the first one's run id
        # The command line as every record of the run keeps it (the ledger, the holder's record,
        # the fleet record, webhooks): its secrets masked, once (docs/fleet.md "What is published").
        self.recorded_argv = mask_command(escaped_all(job.argv), job.masking)
        retried = bool(plan[o.RETRY])
        self._record = RunRecord(
            run_id=self.run_id, name=job.name, command=self.recorded_argv, backend=backend_name,
            started_at=utc_now_iso(), once_key=job.once_key, backend_where=backend_where, backend_from=backend_from,
            cadence=job.cadence, attempt=1 if retried else None, first_run_id=self.run_id if retried else None,
        )
        self._ledger_path, self._keep_days, self._metrics_file = ledger_path, ledger_keep_days, metrics_file
        self.journal = RunJournal(ledger_path, self._record, report=say, keep_days=ledger_keep_days,
                                  metrics_file=metrics_file)
        self.delivery: Delivery | None = None
        if plan[o.PING] or plan[o.NOTIFY_URLS]:
            from lockrun.run.notify import Delivery  # only runs that asked for a delivery pay for it

            self.delivery = Delivery(self.run_id, ping_url=plan[o.PING], ping_on_busy=plan[o.PING_ON_BUSY],
                                     notify_urls=plan[o.NOTIFY_URLS], notify_on=plan[o.NOTIFY_ON],
                                     slack=plan[o.NOTIFY_FORMAT] == "slack")

    def execute(self) -> Outcome:
        self.journal.open()
        try:
            return self._execute()
        except BaseException as exc:
            self.journal.finish_after_failure(exc)  # never a row left "running" by a lockrun that exits
            raise

    def _execute(self) -> Outcome:
        try:
            check_runnable(self.job.argv, shown=self.recorded_argv[0])
        except CommandNotRunnable as exc:
            self.report("error", str(exc))
            outcome = Outcome(exit_code=exc.exit_code, status=Status.ERROR, error=str(exc))
        else:
            outcome = self._run_under_lock()
        self.journal.say_problem(command_runs=False, error_said=self._error_said)
        self.journal.mark_ended()
        # The lock is released by now: telling someone may take seconds, never the lease.
        outcome = self._deliver(outcome)
        self.journal.finish(outcome)
        self.to_syslog(self.journal, outcome)
        return outcome

    def _deliver(self, outcome: Outcome) -> Outcome:
        if self.delivery is None:
            return outcome
        return delivered(self.delivery, self.journal, outcome, self.job.masking, self.report)

    def to_syslog(self, journal: RunJournal, outcome: Outcome) -> None:
        """--syslog: one line for a finished run, or for each finished --retry attempt."""
        if not self.plan[o.SYSLOG]:
            return
        from lockrun.run.syslog_line import send_run  # only runs that asked for it pay for it

        row = journal.row(outcome)
        attempt = row.get("attempt")
        send_run(row, attempt=attempt if isinstance(attempt, int) else 1, report=self.report)

    def _run_under_lock(self) -> Outcome:
        # lockrun's own credentials stay with lockrun: no Redis password in the command's environment.
        self._env = {**environment_for_command(os.environ), "LOCKRUN_NAME": self.job.name,
                     "LOCKRUN_RUN_ID": self.run_id}
        spool = None
        if self.job.output_on_failure:
            from lockrun.run.capture import OutputSpool  # only --output on-failure pays for it

            spool = OutputSpool(lambda line: self.report("warn", line))
        # Output goes through a pump (and its tail) when a tail is kept or held back (capture.py);
        # each --retry attempt's Supervisor gets the same (_attempts).
        self._tail_size = self.plan[o.CAPTURE_TAIL] or self.job.failure_tail or (
            DEFAULT_FAILURE_TAIL if spool else None)
        self._spool = spool
        supervisor = Supervisor(self.job.argv, env=self._env, capture_tail=self._tail_size,
                                keep_detached=self.plan[o.KEEP_DETACHED], spool=spool, masking=self.job.masking)
        supervisor.signals.install()
        backend = None
        try:
            try:
                if self.plan[o.JITTER] > 0 and self._jittered(supervisor):
                    return self.interrupted(supervisor.signals.received[0], "during --jitter, before the first"
                                                                               " try for the lock")
                backend = self.backend_factory(self.call_timeout)
                resume_after_startup()  # everything a run imports up front is loaded by now
                self.journal.acquire_began()  # the client is made: the wait begins
                outcome = self._locked_run(backend, supervisor)
            except BackendUnavailable as exc:
                outcome = Outcome(exit_code=ExitCode.UNAVAILABLE, status=Status.UNAVAILABLE, error=str(exc))
                self.report("error", str(exc))
            except LockrunError as exc:
                outcome = Outcome(exit_code=exc.exit_code, status=Status.ERROR, error=str(exc))
                self.report("error", str(exc))
            except Exception as exc:  # noqa: BLE001 - recorded, then reported as exit 125
                error = f"lockrun failed: {exc!r}"
                outcome = Outcome(exit_code=ExitCode.INTERNAL, status=Status.ERROR, error=error)
                self.report("error", error)
        finally:
            supervisor.close()
            if backend is not None:
                backend.close()
            if spool is not None:
                spool.close()
        self.journal.acquire_over()  # if it gave up, or failed
        return outcome

    def _jittered(self, supervisor: Supervisor) -> bool:
        """--jitter: sleep a random time below it before the first try for the lock (so before
        --wait begins); True when a signal ended the sleep."""
        from lockrun.run.retry import jitter  # only runs with --jitter or --retry import it

        slept = jitter(self.plan[o.JITTER], supervisor.signals)
        self.report("info", f"--jitter: slept {slept:.3f}s before the first try for {self.job.name!r}")
        return bool(supervisor.signals.received)

    def interrupted(self, signum: int, when: str, fencing_token: int | None = None) -> Outcome:
        """The run ends for a signal that came before (or between) its command's runs: said, recorded."""
        error = f"interrupted by signal {signum} {when}"
        self.report("error", error)
        return Outcome(exit_code=ExitCode.SIGNAL_BASE + signum, status=Status.ERROR, error=error,
                       fencing_token=fencing_token)

    def _locked_run(self, backend: Backend, supervisor: Supervisor) -> Outcome:
        lease_client = self._lease_client(backend)
        got = lease_client.acquire(self.job.wait, replace=self.plan[o.REPLACE], kill_after=self.plan[o.KILL_AFTER],
                                   interrupted=lambda: bool(supervisor.signals.received),
                                   interruptible=supervisor.signals.interrupting, get_ready=supervisor.prepare)
        self.journal.acquire_over()
        if supervisor.signals.received:
            return self._interrupted_before_the_command(lease_client, got, supervisor.signals.received[0])
        if not isinstance(got, Lease):
            return self._not_run(got)
        return self._held(backend, supervisor, lease_client, got)

    def _lease_client(self, backend: Backend) -> LeaseClient:
        job, plan = self.job, self.plan
        zone = job.once_zone
        if zone is not None:
            self.report("info", f"--once key {job.once_key!r} computed in {zone.name} ({zone.source})")
        once = None
        if job.once_key:
            once = OnceKey(job.once_key, plan[o.REMEMBER], zone=zone.name if zone else None,
                           zone_from=zone.source if zone else "")
        return LeaseClient(
            backend, job.name, plan[o.TTL], run_id=self.run_id, argv=self.recorded_argv, report=self.report,
            slots=plan[o.SLOTS], cadence=job.cadence, once=once, once_every=plan[o.ONCE_EVERY],
        )

    def _interrupted_before_the_command(self, lease_client: LeaseClient, got: object, signum: int) -> Outcome:
        error = f"interrupted by signal {signum} before the command started"
        outcome = Outcome(exit_code=ExitCode.SIGNAL_BASE + signum, status=Status.ERROR, error=error)
        if isinstance(got, Lease):
            self.journal.mark_ended()
            outcome = self._release(lease_client, got, outcome)
        self.report("error", error)
        return outcome

    def _not_run(self, got: Paused | Duplicate | TooSoon | Holder) -> Outcome:
        """The command does not run: the name is paused, its --once key or --once-every says it is
        done, or another holder has the lock. Said under -v (a malformed holder without it)."""
        name = self.job.name
        if isinstance(got, Holder):
            note = f"held by {got.describe()}" + (f"; malformed: {got.problem}" if got.problem else "")
            # Data lockrun did not write may never go away by itself: worth a line even without -v.
            label = backend_label(self.backend_name, self.backend_where)
            self.report("warn" if got.problem else "info", busy_message(got, label))
            return Outcome(exit_code=self.plan[o.BUSY_EXIT_CODE], status=Status.BUSY, note=note, holder=got)
        if isinstance(got, Paused):
            note, status = got.describe(), Status.PAUSED
        elif isinstance(got, Duplicate):
            note, status = f"--once key {got.key!r} already succeeded", Status.DUPLICATE
        else:
            note, status = too_soon_note(got, self.plan[o.ONCE_EVERY] or 0.0), Status.DUPLICATE
        self.report("info", f"{name!r}: {note}; skipped")
        return Outcome(exit_code=ExitCode.OK, status=status, note=note)

    def _held(self, backend: Backend, supervisor: Supervisor, lease_client: LeaseClient, lease: Lease) -> Outcome:
        """The command under the lease (its attempts), then the lock given back."""
        acquired_at = lease.sent_at  # --min-hold counts from the acquisition, whatever the attempts
        # Armed before the first exec (Attempt), kept through --retry pauses, retired before the release.
        backstop = Backstop() if self.plan[o.ON_LOST] == "terminate" else None
        try:
            outcome, lease = self._attempts(backend, supervisor, lease_client, lease, backstop)
        finally:
            if backstop is not None:
                backstop.disarm()
        if self._spool is not None and self.plan[o.RETRY]:  # the failed attempts' output, each under its line
            outcome = settled(self._spool, outcome)
        self.journal.mark_ended()
        hold_s = 0.0
        if self.job.min_hold and not outcome.lease_lost:
            hold_s = max(0.0, self.job.min_hold - (time.monotonic() - acquired_at))
        hold_until = iso_ago(-hold_s) if hold_s else ""
        if hold_s:
            outcome = outcome.noted(f"--min-hold keeps the lock taken until {hold_until}")
        return self._release(lease_client, lease, outcome, succeeded=outcome.status == Status.SUCCEEDED,
                             hold_s=hold_s, hold_until=hold_until)

    def _attempts(self, backend: Backend, supervisor: Supervisor, lease_client: LeaseClient, lease: Lease,
                  backstop: Backstop | None) -> tuple[Outcome, Lease]:
        """The command under the lease (attempt.py), and under --retry again after each failed attempt
        that may be retried (retry.py, between_attempts.py): the last attempt's outcome, and the
        lease as last renewed."""
        number, current = 1, supervisor
        while True:
            try:
                outcome, lease = Attempt(self, backend, current, lease, backstop, number).supervise()
                if not self._retry_due(outcome, number, supervisor):
                    return outcome, lease
                went_on = BetweenAttempts(self, backend, supervisor.signals, lease_client, backstop,
                                          number).go_on(lease, outcome)
            except BaseException as exc:
                # Whatever failed (the command is gone: Supervisor.finish), the lock is given back.
                self.journal.mark_ended()
                failed = Outcome(exit_code=ExitCode.INTERNAL, status=Status.ERROR,
                                 error=f"lockrun failed: {exc!r}", fencing_token=lease.fencing_token)
                lease_client.release(lease, record=FleetRecord(self.journal.row(failed)))
                raise
            finally:
                if current is not supervisor:
                    current.close()
            if isinstance(went_on, Outcome):
                return went_on, lease  # the run ended in the pause: the next attempt's row says how
            lease, number = went_on, number + 1
            # The previous attempt's group and descendants are gone (Supervisor.finish): a fresh one.
            current = Supervisor(self.job.argv, env={**self._env, "LOCKRUN_RUN_ID": self.run_id},
                                 capture_tail=self._tail_size, keep_detached=self.plan[o.KEEP_DETACHED],
                                 signals=supervisor.signals, spool=self._spool, masking=self.job.masking)

    def _retry_due(self, outcome: Outcome, number: int, supervisor: Supervisor) -> bool:
        retry = self.plan[o.RETRY]
        if not retry:
            return False
        from lockrun.run.retry import retry_due  # only runs with --jitter or --retry import it

        return retry_due(outcome, number, retry, bool(supervisor.signals.received))

    def next_attempt(self, number: int, lease_client: LeaseClient) -> None:
        """The next attempt's run id and ledger row "running" (it is the run's row from now on)."""
        self.run_id = new_run_id()
        lease_client.run_id = self.run_id  # what the holder record and the fleet's open entry name
        record = self._record._replace(run_id=self.run_id, started_at=utc_now_iso(), attempt=number,
                                       first_run_id=self.first_run_id)
        self.journal = RunJournal(self._ledger_path, record, report=self.report, keep_days=self._keep_days,
                                  metrics_file=self._metrics_file)
        self.journal.open()
        self.journal.say_problem(command_runs=True)

    def _release(self, lease_client: LeaseClient, lease: Lease, outcome: Outcome, *, succeeded: bool = False,
                 hold_s: float = 0.0, hold_until: str = "") -> Outcome:
        """Give the lock back, recording the run's end; the outcome as the release found the lock.

        Only the release script knows whether the lock was still this run's, so the fleet record
        gets both rows and keeps the true one; the ledger row follows the answer. A lock that was
        no longer ours (expired, evicted, stolen, cleared) means another run may have overlapped
        this one: one line says so, unless the run already said its lease was lost.
        """
        kept, lost = released_as(outcome, True), released_as(outcome, False)
        shared_tail = None if outcome.tail_private else outcome.output_tail  # docs/operating.md "Output"
        record = FleetRecord(self.journal.row(kept), shared_tail, if_lost=self.journal.row(lost))
        released = lease_client.release(lease, lost=outcome.lease_lost, succeeded=succeeded, hold_s=hold_s,
                                        hold_until=hold_until, record=record)
        if released is False and not outcome.lease_lost:  # a lost lease was said when it was lost
            self.report("warn", f"lock {lease.name!r} was no longer this run's when it released it (it expired, was"
                                " evicted, stolen or cleared): another run may have overlapped this one; its ledger"
                                " row says lock_lost_at_release")
        return released_as(outcome, released)


def delivered(delivery: Delivery, journal: RunJournal, outcome: Outcome, masking: Masking, report: Report) -> Outcome:
    """Final ping and webhooks; a failed delivery is a warning and a note on the row."""
    shared_tail = None if outcome.tail_private else outcome.output_tail  # docs/operating.md "Output"
    holder = outcome.holder
    if holder is not None:  # what kept the run out, as any host's record may say it: masked again
        holder = holder._replace(command=mask_command(list(holder.command), masking))
    failed = delivery.run_ended(journal.row(outcome), holder, shared_tail)
    if failed is None:
        return outcome
    report("warn", f"could not deliver notifications: {failed}")
    return outcome.noted(f"notification failed: {failed}")


def backend_label(backend_name: str, backend_where: str | None) -> str:
    """``redis redis://host:6379/0`` or ``local backend, this host only``: no credentials."""
    if backend_name == "local":
        return "local backend, this host only"
    return f"redis {backend_where}" if backend_where else "redis"
