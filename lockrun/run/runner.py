"""One ``lockrun run``, start to finish: :class:`Run` sequences the steps, each kept elsewhere.

    journal       (journal.py)       the ledger row "running"
    lease client  (lease_client.py)  acquire; or wait (BLPOP) and --replace until --wait runs out
    supervise     (here)             the backstop (backstop.py) armed, the command exec'd
                                     (supervisor.py), the keeper (keeper.py) renewing; the main
                                     loop (watch.py) stops the command on a lost lease, --replace,
                                     --timeout or a forwarded signal; it and everything it started
                                     (strays.py) are reaped
    outcome       (outcome.py)       exit code, ledger status and note from how the command ended
    retry         (retry.py)         --retry: a failed attempt's row is final, the lock is kept
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
from lockrun.backends.values import LOST, PREEMPTED, Duplicate, FleetRecord, Holder, Lease, OnceKey, TooSoon
from lockrun.config import options as o
from lockrun.core.clock import exact_duration, iso_ago, utc_now_iso
from lockrun.core.defaults import (
    DEFAULT_FAILURE_TAIL,
)
from lockrun.core.errors import BackendUnavailable, CommandNotRunnable, ExitCode, LockrunError, Report
from lockrun.core.masking import mask_command
from lockrun.core.os_text import escaped_all
from lockrun.core.record import Status
from lockrun.core.redis_url import environment_for_command
from lockrun.core.run_ids import new_run_id
from lockrun.ledger.store import RunRecord
from lockrun.run.backstop import Backstop
from lockrun.run.journal import RunJournal
from lockrun.run.keeper import Keeper, backstop_for, expires_at, lease_problem, must_stop_at
from lockrun.run.launcher import check_runnable
from lockrun.run.lease_client import LeaseClient
from lockrun.run.outcome import Outcome, busy_message, command_outcome, released_as, too_soon_note
from lockrun.run.supervisor import Supervisor
from lockrun.run.watch import REPLACED, watch
from lockrun.system.collection import resume_after_startup

if TYPE_CHECKING:
    from lockrun.config.resolve import Plan
    from lockrun.run.capture import OutputSpool
    from lockrun.run.job import Job
    from lockrun.run.notify import Delivery
    from lockrun.run.retry import PauseEnd
    from lockrun.run.signals import SignalRelay


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
        self._slow_note: str | None = None  # --warn-after found the command slow
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
        self._to_syslog(self.journal, outcome)
        return outcome

    def _to_syslog(self, journal: RunJournal, outcome: Outcome) -> None:
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
                    return self._interrupted(supervisor.signals.received[0], "during --jitter, before the first"
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

    def _interrupted(self, signum: int, when: str, fencing_token: int | None = None) -> Outcome:
        """The run ends for a signal that came before (or between) its command's runs: said, recorded."""
        error = f"interrupted by signal {signum} {when}"
        self.report("error", error)
        return Outcome(exit_code=ExitCode.SIGNAL_BASE + signum, status=Status.ERROR, error=error,
                       fencing_token=fencing_token)

    def _locked_run(self, backend: Backend, supervisor: Supervisor) -> Outcome:
        job, plan = self.job, self.plan
        zone = job.once_zone
        if zone is not None:
            self.report("info", f"--once key {job.once_key!r} computed in {zone.name} ({zone.source})")
        once = None
        if job.once_key:
            once = OnceKey(job.once_key, plan[o.REMEMBER], zone=zone.name if zone else None,
                           zone_from=zone.source if zone else "")
        lease_client = LeaseClient(
            backend, job.name, plan[o.TTL], run_id=self.run_id, argv=self.recorded_argv, report=self.report,
            slots=plan[o.SLOTS], cadence=job.cadence, once=once, once_every=plan[o.ONCE_EVERY],
        )
        got = lease_client.acquire(self.job.wait, replace=self.plan[o.REPLACE], kill_after=self.plan[o.KILL_AFTER],
                                   interrupted=lambda: bool(supervisor.signals.received),
                                   interruptible=supervisor.signals.interrupting, get_ready=supervisor.prepare)
        self.journal.acquire_over()
        if supervisor.signals.received:
            signum = supervisor.signals.received[0]
            error = f"interrupted by signal {signum} before the command started"
            outcome = Outcome(exit_code=ExitCode.SIGNAL_BASE + signum, status=Status.ERROR, error=error)
            if isinstance(got, Lease):
                self.journal.mark_ended()
                outcome = self._release(lease_client, got, outcome)
            self.report("error", error)
            return outcome
        if isinstance(got, Paused):
            note = got.describe()
            self.report("info", f"{self.job.name!r}: {note}; skipped")
            return Outcome(exit_code=ExitCode.OK, status=Status.PAUSED, note=note)
        if isinstance(got, Duplicate):
            note = f"--once key {got.key!r} already succeeded"
            self.report("info", f"{self.job.name!r}: {note}; skipped")
            return Outcome(exit_code=ExitCode.OK, status=Status.DUPLICATE, note=note)
        if isinstance(got, TooSoon):
            note = too_soon_note(got, self.plan[o.ONCE_EVERY] or 0.0)
            self.report("info", f"{self.job.name!r}: {note}; skipped")
            return Outcome(exit_code=ExitCode.OK, status=Status.DUPLICATE, note=note)
        if isinstance(got, Holder):
            note = f"held by {got.describe()}" + (f"; malformed: {got.problem}" if got.problem else "")
            # Data lockrun did not write may never go away by itself: worth a line even without -v.
            self.report("warn" if got.problem else "info", busy_message(got, self._backend_label()))
            return Outcome(exit_code=self.plan[o.BUSY_EXIT_CODE], status=Status.BUSY, note=note, holder=got)
        lease = got
        acquired_at = lease.sent_at  # --min-hold counts from the acquisition, whatever the attempts
        # Armed before the first exec (_supervise), kept through --retry pauses, retired before the release.
        backstop = Backstop() if self.plan[o.ON_LOST] == "terminate" else None
        try:
            outcome, lease = self._attempts(backend, supervisor, lease_client, lease, backstop)
        finally:
            if backstop is not None:
                backstop.disarm()
        if self._spool is not None and self.plan[o.RETRY]:  # the failed attempts' output, each under its line
            outcome = self._settled(self._spool, outcome)
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
        """The command under the lease, and under --retry again after each failed attempt that may
        be retried (retry.py): the last attempt's outcome, and the lease as last renewed."""
        attempt, current = 1, supervisor
        while True:
            try:
                self._slow_note = None  # --warn-after is judged per attempt
                outcome, lease = self._supervise(backend, current, lease, backstop, attempt)
                if not self.plan[o.RETRY]:
                    return outcome, lease
                from lockrun.run.retry import retry_due  # only runs with --jitter or --retry import it

                if not retry_due(outcome, attempt, self.plan[o.RETRY], bool(supervisor.signals.received)):
                    return outcome, lease
                went_on = self._between_attempts(backend, supervisor, lease_client, lease, backstop, outcome,
                                                 attempt)
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
            lease, attempt = went_on, attempt + 1
            # The previous attempt's group and descendants are gone (Supervisor.finish): a fresh one.
            current = Supervisor(self.job.argv, env={**self._env, "LOCKRUN_RUN_ID": self.run_id},
                                 capture_tail=self._tail_size, keep_detached=self.plan[o.KEEP_DETACHED],
                                 signals=supervisor.signals, spool=self._spool, masking=self.job.masking)

    def _between_attempts(self, backend: Backend, supervisor: Supervisor, lease_client: LeaseClient, lease: Lease,
                          backstop: Backstop | None, outcome: Outcome, attempt: int) -> Lease | Outcome:
        """After a failed attempt: record it (its row and fleet event are final), pause with the
        lock kept, and begin the next attempt; the lease as renewed, or the outcome of a run that
        ended in the pause (a signal, a lost lease, a --replace) on the next attempt's row."""
        from lockrun.run.retry import PauseEnd, pause, pause_s

        signals = supervisor.signals
        delay = pause_s(attempt, self.plan[o.RETRY_DELAY])
        self.journal.mark_ended()
        finished = self.journal
        sent = time.monotonic()
        holder = {"attempt": str(attempt + 1), "retry_at": iso_ago(-delay)}
        shared_tail = None if outcome.tail_private else outcome.output_tail  # docs/operating.md "Output"
        record = FleetRecord(finished.row(outcome), shared_tail)
        # Not reached: the keeper goes on renewing, and the fleet record misses this attempt's end.
        found = self._between(lambda: backend.attempt_over(lease, holder, record), lease, signals,
                              f"record the end of attempt {attempt}")
        lease = self._renewed(lease, found, sent)
        self.report("info", f"{self.job.name!r}: attempt {attempt} {outcome.status} (exit {outcome.exit_code});"
                            f" attempt {attempt + 1} of {self.plan[o.RETRY] + 1} in {delay:.1f}s, the lock kept")
        keeper = self._keeper(backend, lease, signals, backstop, child_pid=lambda: None)
        ended: PauseEnd | None = None
        try:
            finished.finish(outcome)  # the attempt's final row, while the keeper renews
            self._to_syslog(finished, outcome)
            if found in (LOST, PREEMPTED):
                ended = PauseEnd(Status.PREEMPTED, why=REPLACED) if found == PREEMPTED else \
                    PauseEnd(Status.LOST, why=keeper.lost_reason or "the lock was taken over or cleared")
            else:
                ended = pause(delay, keeper, signals)
        finally:
            keeper.stop()
            if backstop is not None:
                backstop.suspend()
        lease = keeper.renewed
        self._next_attempt(attempt + 1, lease_client)
        if ended is None:
            start = lease_client.holder_info()
            sent = time.monotonic()
            found = self._between(lambda: backend.attempt_begins(
                lease, {"run_id": self.run_id, "attempt": str(attempt + 1), "retry_at": ""},
                {key: start[key] for key in ("run_id", "host", "pid", "command", "started_at", "ttl_ms")}),
                lease, signals, f"begin attempt {attempt + 1}")
            lease = self._renewed(lease, found, sent)
            if found in (LOST, PREEMPTED):
                ended = PauseEnd(Status.PREEMPTED, why=REPLACED) if found == PREEMPTED else \
                    PauseEnd(Status.LOST, why="the lock was taken over or cleared (its token no longer matches)")
            elif found is None and not signals.received:
                # No attempt starts on a lease the backend has not confirmed since the pause.
                ended = PauseEnd(Status.LOST, why="the backend could not be reached to begin the attempt")
            elif signals.received:  # as the pause ended: the next attempt never starts
                ended = PauseEnd(Status.ERROR, signals.received[0])
        if ended is None:
            return lease
        self.journal.acquire_over()
        before = f"before attempt {attempt + 1}"
        if ended.signum is not None:
            return self._interrupted(ended.signum, f"during the --retry pause, {before}", lease.fencing_token)
        if ended.status == Status.PREEMPTED:  # not a lost lease: another run asked for it, and has it next
            said = f"replaced by --replace during the --retry pause {before}"
            self.report("warn", f"{self.job.name!r}: {said}")
            return Outcome(exit_code=ExitCode.LOST, status=Status.PREEMPTED, fencing_token=lease.fencing_token,
                           note=said, lease_lost=True)
        why = f"{ended.why}, during the --retry pause {before}"
        self.report("error", f"lease on {self.job.name!r} lost: {why}")
        return Outcome(exit_code=ExitCode.LOST, status=ended.status, fencing_token=lease.fencing_token,
                       note=f"lease lost: {why}", lease_lost=True)

    def _between(self, call: Callable[[], str], lease: Lease, signals: SignalRelay, step: str) -> str | None:
        """One backend call between attempts, tried again (after 50 ms, doubling to 500 ms) while the
        lease, as last renewed, is sure to hold (the keeper's deadline: keeper.py), and no signal came;
        None when no try reached the backend by then, said in one line."""
        deadline = must_stop_at(lease, self.plan[o.KILL_AFTER])
        delay = 0.05
        while True:
            try:
                return call()
            except BackendUnavailable as exc:
                problem = exc
            if signals.received or time.monotonic() + delay >= deadline:
                self.report("warn", f"{self.job.name!r}: could not {step} ({problem})")
                return None
            signals.wait(time.monotonic() + delay)
            delay = min(delay * 2, 0.5)

    def _renewed(self, lease: Lease, found: str | None, sent: float) -> Lease:
        """The lease as a call between attempts, sent at ``sent``, renewed it. Under --replicas such
        a renewal is not acknowledged by WAIT: it does not push the deadline on."""
        if found is None or found == LOST or lease.replicas:
            return lease
        return lease._replace(sent_at=sent)

    def _next_attempt(self, attempt: int, lease_client: LeaseClient) -> None:
        """The next attempt's run id and ledger row "running" (it is the run's row from now on)."""
        self.run_id = new_run_id()
        lease_client.run_id = self.run_id  # what the holder record and the fleet's open entry name
        record = self._record._replace(run_id=self.run_id, started_at=utc_now_iso(), attempt=attempt,
                                       first_run_id=self.first_run_id)
        self.journal = RunJournal(self._ledger_path, record, report=self.report, keep_days=self._keep_days,
                                  metrics_file=self._metrics_file)
        self.journal.open()
        self.journal.say_problem(command_runs=True)

    def _keeper(self, backend: Backend, lease: Lease, signals: SignalRelay, backstop: Backstop | None,
                child_pid: Callable[[], int | None]) -> Keeper:
        """A started keeper of ``lease`` (as last renewed), re-arming the backstop after each renewal."""
        if backstop is not None:
            backstop.resume(backstop_for(expires_at(lease), lease.ttl))
        keeper = Keeper(
            backend,
            lease,
            kill_after=self.plan[o.KILL_AFTER],
            call_timeout=self.call_timeout,
            wake=signals.wake,
            child_pid=child_pid,
            on_renewed=(lambda expiry: backstop.arm(backstop_for(expiry, lease.ttl))) if backstop else None,
        )
        keeper.start()  # a keeper that cannot start marks the lease lost: the watch stops the command
        return keeper

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

    def _supervise(self, backend: Backend, supervisor: Supervisor, lease: Lease, backstop: Backstop | None,
                   attempt: int = 1) -> tuple[Outcome, Lease]:
        """Run the command under the lease: from the exec to the reaping of all it started. The
        outcome, and the lease as last renewed (a --retry attempt goes on from there)."""
        if attempt == 1:
            self.report("info", f"acquired {self.job.name!r} (fencing token {lease.fencing_token},"
                                f" ttl {self.plan[o.TTL]:g}s)")
        else:
            self.report("info", f"attempt {attempt} of {self.plan[o.RETRY] + 1} under {self.job.name!r} (fencing token"
                                f" {lease.fencing_token})")
        # Armed before the exec: from its first instant the command cannot outlive the lease,
        # even if lockrun is stopped or starved. Not under --on-lost continue, which asks for that.
        if backstop is not None:
            backstop.resume(backstop_for(expires_at(lease), lease.ttl))
            if backstop.error and attempt == 1:
                # Run without it rather than not at all (a sandbox may forbid POSIX timers), but say so.
                self.report("warn", f"no backstop timer ({backstop.error}): if lockrun is stopped or starved, "
                                    "its command may outlive the lease")
        self.journal.say_problem(command_runs=True)
        try:
            started_mono, started_wall = time.monotonic(), utc_now_iso()
            timeout = self.plan[o.TIMEOUT]
            if timeout:  # the command would have been killed there, however slow its reader
                supervisor.output_until = started_mono + timeout + self.plan[o.KILL_AFTER]
            child_pid = supervisor.spawn({"LOCKRUN_FENCING_TOKEN": str(lease.fencing_token)})
        except CommandNotRunnable as exc:
            if backstop is not None:
                backstop.suspend()
            self.report("error", str(exc))
            return Outcome(exit_code=exc.exit_code, status=Status.ERROR, error=str(exc),
                           fencing_token=lease.fencing_token), lease
        keeper = None
        try:
            # From here on the command runs: whatever fails, it is stopped before the lock goes.
            self.journal.command_started(started_wall, started_mono, lease.fencing_token)
            if self.delivery is not None and attempt == 1:  # one start ping for the whole run
                self.delivery.command_started()
            keeper = self._keeper(backend, lease, supervisor.signals, backstop, child_pid=lambda: child_pid)
            # What would have stopped the command also ends the wait for a slow reader (Pump.drain).
            supervisor.output_abandoned = lambda: (keeper.preempted
                                                   or lease_problem(keeper, time.monotonic()) is not None)
            stop = watch(supervisor, keeper, backstop, name=self.job.name, timeout=self.plan[o.TIMEOUT],
                         kill_after=self.plan[o.KILL_AFTER], on_lost=self.plan[o.ON_LOST], report=self.report,
                         warn_after=self.plan[o.WARN_AFTER], on_slow=self._command_slow)
        finally:
            # Also on an unexpected error: all it started is gone before the lock is released.
            if backstop is not None:
                backstop.suspend()  # the command is gone or going: what follows may outlast the lease
            child = supervisor.finish()
            self.journal.command_ended()
            if keeper is not None:
                keeper.stop()
        renewed = keeper.renewed if keeper is not None else lease
        outcome = command_outcome(
            child, stop, preempted=keeper is not None and keeper.preempted, fencing_token=lease.fencing_token,
            kill_after=self.plan[o.KILL_AFTER], backstop_error=backstop.error if backstop else None,
            output_tail=supervisor.tail.text() if supervisor.tail else None, strays_note=supervisor.strays_note(),
            success_exits=self.plan[o.SUCCESS_EXIT],
        )
        if supervisor.tail is not None and supervisor.tail.lost:  # output that went nowhere is on the record
            outcome = outcome.noted("; ".join(supervisor.tail.lost))
        if self._slow_note is not None:
            outcome = outcome.noted(self._slow_note)
        outcome = self._kept_tail(outcome)
        if supervisor.spool is not None:
            # The whole group is gone and the pump drained: this attempt's output is all there.
            failed = outcome.status != Status.SUCCEEDED
            if self.plan[o.RETRY] and failed:
                # Kept under a line naming the attempt: written out if no later attempt succeeds
                # (_locked_run settles the spool when the attempts are over).
                supervisor.spool.mark_attempt(f"lockrun: attempt {attempt} of {self.plan[o.RETRY] + 1} of"
                                              f" {self.job.name!r}: {outcome.status} (exit {outcome.exit_code})")
            else:
                outcome = self._settled(supervisor.spool, outcome)
        return outcome, renewed

    @staticmethod
    def _settled(spool: OutputSpool, outcome: Outcome) -> Outcome:
        """--output on-failure at the run's end: the held output written out if the run did not
        succeed, else dropped; output that could not be written out is on the row too."""
        spool.settle(failed=outcome.status != Status.SUCCEEDED)
        return outcome.noted("; ".join(spool.lost)) if spool.lost else outcome

    def _kept_tail(self, outcome: Outcome) -> Outcome:
        """The tail the run keeps: all of --capture-tail's, everywhere it goes; without it, a failed
        run's (the default one, this host's ledger only); none of a run that succeeded."""
        if self.plan[o.CAPTURE_TAIL] is not None or outcome.output_tail is None:
            return outcome
        if self.job.failure_tail is None or outcome.status == Status.SUCCEEDED:
            return outcome._replace(output_tail=None)
        return outcome._replace(tail_private=True)

    def _command_slow(self) -> None:
        """--warn-after: the command is still running (the main loop calls this once per command)."""
        warn_after = self.plan[o.WARN_AFTER]
        assert warn_after is not None
        after = exact_duration(warn_after)
        self._slow_note = f"slow: still running after --warn-after {after}"
        self.report("warn", f"{self.job.name!r} is slow: still running after --warn-after {after}")
        self.journal.command_slow(self._slow_note)
        if self.delivery is not None:
            running = self.journal.row(Outcome(exit_code=0, status=Status.RUNNING, note=self._slow_note))
            self.delivery.command_slow({**running, "exit_status": None, "ended_at": None,
                                        "duration_s": self.journal.running_for()}, self._slow_note)

    def _deliver(self, outcome: Outcome) -> Outcome:
        """Final ping and webhooks; a failed delivery is a warning and a note on the row."""
        if self.delivery is None:
            return outcome
        shared_tail = None if outcome.tail_private else outcome.output_tail  # docs/operating.md "Output"
        holder = outcome.holder
        if holder is not None:  # what kept the run out, as any host's record may say it: masked again
            holder = holder._replace(command=mask_command(list(holder.command), self.job.masking))
        failed = self.delivery.run_ended(self.journal.row(outcome), holder, shared_tail)
        if failed is None:
            return outcome
        self.report("warn", f"could not deliver notifications: {failed}")
        return outcome.noted(f"notification failed: {failed}")

    def _backend_label(self) -> str:
        """``redis redis://host:6379/0`` or ``local backend, this host only``: no credentials."""
        if self.backend_name == "local":
            return "local backend, this host only"
        return f"redis {self.backend_where}" if self.backend_where else "redis"
