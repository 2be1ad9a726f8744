"""One attempt of the command under the lease, from the exec to the reaping of all it started
(docs/internals.md "One run, step by step", steps 3 to 6): the backstop armed before the exec, the
keeper renewing, the main loop (watch.py) stopping the command on a lost lease, --replace,
--timeout or a forwarded signal, and the outcome (outcome.py) with the output the run keeps.
The runner runs one; under --retry, between_attempts.py runs the pauses between several.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from lockrun.config import options as o
from lockrun.core.clock import exact_duration, utc_now_iso
from lockrun.core.errors import CommandNotRunnable, Report
from lockrun.core.record import Status
from lockrun.run.keeper import Keeper, backstop_for, expires_at, lease_problem
from lockrun.run.outcome import Outcome, Stop, command_outcome
from lockrun.run.watch import watch

if TYPE_CHECKING:
    from lockrun.backends.protocol import Backend
    from lockrun.backends.values import Lease
    from lockrun.config.resolve import Plan
    from lockrun.run.backstop import Backstop
    from lockrun.run.capture import OutputSpool
    from lockrun.run.job import Job
    from lockrun.run.journal import RunJournal
    from lockrun.run.notify import Delivery
    from lockrun.run.signals import SignalRelay
    from lockrun.run.supervisor import Supervisor


class RunState(Protocol):
    """What an attempt reads of its run (runner.Run): its options, its current row, its voice."""

    plan: Plan
    job: Job
    journal: RunJournal
    report: Report
    delivery: Delivery | None
    call_timeout: float


def start_keeper(run: RunState, backend: Backend, lease: Lease, signals: SignalRelay, backstop: Backstop | None,
                 child_pid: Callable[[], int | None]) -> Keeper:
    """A started keeper of ``lease`` (as last renewed), re-arming the backstop after each renewal."""
    if backstop is not None:
        backstop.resume(backstop_for(expires_at(lease), lease.ttl))
    keeper = Keeper(
        backend,
        lease,
        kill_after=run.plan[o.KILL_AFTER],
        call_timeout=run.call_timeout,
        wake=signals.wake,
        child_pid=child_pid,
        on_renewed=(lambda expiry: backstop.arm(backstop_for(expiry, lease.ttl))) if backstop else None,
    )
    keeper.start()  # a keeper that cannot start marks the lease lost: the watch stops the command
    return keeper


def settled(spool: OutputSpool, outcome: Outcome) -> Outcome:
    """--output on-failure at the run's end: the held output written out if the run did not
    succeed, else dropped; output that could not be written out is on the row too."""
    spool.settle(failed=outcome.status != Status.SUCCEEDED)
    return outcome.noted("; ".join(spool.lost)) if spool.lost else outcome


class Attempt:
    """The command run once under the lease (attempt ``number`` of a --retry run)."""

    def __init__(self, run: RunState, backend: Backend, supervisor: Supervisor, lease: Lease,
                 backstop: Backstop | None, number: int = 1) -> None:
        self.run, self.backend, self.supervisor, self.lease = run, backend, supervisor, lease
        self.backstop, self.number = backstop, number
        self.slow_note: str | None = None  # --warn-after found the command slow (judged per attempt)

    def supervise(self) -> tuple[Outcome, Lease]:
        """The outcome, and the lease as last renewed (a --retry attempt goes on from there)."""
        run, supervisor, lease, backstop = self.run, self.supervisor, self.lease, self.backstop
        self._say_it_begins()
        run.journal.say_problem(command_runs=True)
        try:
            started_mono, started_wall = time.monotonic(), utc_now_iso()
            timeout = run.plan[o.TIMEOUT]
            if timeout:  # the command would have been killed there, however slow its reader
                supervisor.output_until = started_mono + timeout + run.plan[o.KILL_AFTER]
            child_pid = supervisor.spawn({"LOCKRUN_FENCING_TOKEN": str(lease.fencing_token)})
        except CommandNotRunnable as exc:
            if backstop is not None:
                backstop.suspend()
            run.report("error", str(exc))
            return Outcome(exit_code=exc.exit_code, status=Status.ERROR, error=str(exc),
                           fencing_token=lease.fencing_token), lease
        keeper = None
        try:
            # From here on the command runs: whatever fails, it is stopped before the lock goes.
            run.journal.command_started(started_wall, started_mono, lease.fencing_token)
            if run.delivery is not None and self.number == 1:  # one start ping for the whole run
                run.delivery.command_started()
            keeper = start_keeper(run, self.backend, lease, supervisor.signals, backstop, child_pid=lambda: child_pid)
            stop = self._watch(keeper)
        finally:
            # Also on an unexpected error: all it started is gone before the lock is released.
            if backstop is not None:
                backstop.suspend()  # the command is gone or going: what follows may outlast the lease
            child = supervisor.finish()
            run.journal.command_ended()
            if keeper is not None:
                keeper.stop()
        outcome = command_outcome(
            child, stop, preempted=keeper is not None and keeper.preempted, fencing_token=lease.fencing_token,
            kill_after=run.plan[o.KILL_AFTER], backstop_error=backstop.error if backstop else None,
            output_tail=supervisor.tail.text() if supervisor.tail else None, strays_note=supervisor.strays_note(),
            success_exits=run.plan[o.SUCCESS_EXIT],
        )
        return self._noted(outcome), keeper.renewed if keeper is not None else lease

    def _say_it_begins(self) -> None:
        """One line under -v, and the backstop armed before the exec: from its first instant the
        command cannot outlive the lease, even if lockrun is stopped or starved (not under
        --on-lost continue, which asks for that)."""
        run, lease, backstop = self.run, self.lease, self.backstop
        if self.number == 1:
            run.report("info", f"acquired {run.job.name!r} (fencing token {lease.fencing_token},"
                               f" ttl {run.plan[o.TTL]:g}s)")
        else:
            run.report("info", f"attempt {self.number} of {run.plan[o.RETRY] + 1} under {run.job.name!r} (fencing"
                               f" token {lease.fencing_token})")
        if backstop is not None:
            backstop.resume(backstop_for(expires_at(lease), lease.ttl))
            if backstop.error and self.number == 1:
                # Run without it rather than not at all (a sandbox may forbid POSIX timers), but say so.
                run.report("warn", f"no backstop timer ({backstop.error}): if lockrun is stopped or starved, "
                                   "its command may outlive the lease")

    def _watch(self, keeper: Keeper) -> Stop:
        run, supervisor = self.run, self.supervisor
        # What would have stopped the command also ends the wait for a slow reader (Pump.drain).
        supervisor.output_abandoned = lambda: (keeper.preempted or lease_problem(keeper, time.monotonic()) is not None)
        return watch(supervisor, keeper, self.backstop, name=run.job.name, timeout=run.plan[o.TIMEOUT],
                     kill_after=run.plan[o.KILL_AFTER], on_lost=run.plan[o.ON_LOST], report=run.report,
                     warn_after=run.plan[o.WARN_AFTER], on_slow=self._command_slow)

    def _noted(self, outcome: Outcome) -> Outcome:
        """The outcome with what the attempt noticed on its way: output lost, slowness, the tail the
        run keeps, and --output on-failure's held output written out or kept for later."""
        supervisor, run = self.supervisor, self.run
        if supervisor.tail is not None and supervisor.tail.lost:  # output that went nowhere is on the record
            outcome = outcome.noted("; ".join(supervisor.tail.lost))
        if self.slow_note is not None:
            outcome = outcome.noted(self.slow_note)
        outcome = self._kept_tail(outcome)
        if supervisor.spool is None:
            return outcome
        # The whole group is gone and the pump drained: this attempt's output is all there.
        if run.plan[o.RETRY] and outcome.status != Status.SUCCEEDED:
            # Kept under a line naming the attempt: written out if no later attempt succeeds
            # (the runner settles the spool when the attempts are over).
            supervisor.spool.mark_attempt(f"lockrun: attempt {self.number} of {run.plan[o.RETRY] + 1} of"
                                          f" {run.job.name!r}: {outcome.status} (exit {outcome.exit_code})")
            return outcome
        return settled(supervisor.spool, outcome)

    def _kept_tail(self, outcome: Outcome) -> Outcome:
        """The tail the run keeps: all of --capture-tail's, everywhere it goes; without it, a failed
        run's (the default one, this host's ledger only); none of a run that succeeded."""
        if self.run.plan[o.CAPTURE_TAIL] is not None or outcome.output_tail is None:
            return outcome
        if self.run.job.failure_tail is None or outcome.status == Status.SUCCEEDED:
            return outcome._replace(output_tail=None)
        return outcome._replace(tail_private=True)

    def _command_slow(self) -> None:
        """--warn-after: the command is still running (the main loop calls this once per command)."""
        run = self.run
        warn_after = run.plan[o.WARN_AFTER]
        assert warn_after is not None
        after = exact_duration(warn_after)
        self.slow_note = f"slow: still running after --warn-after {after}"
        run.report("warn", f"{run.job.name!r} is slow: still running after --warn-after {after}")
        run.journal.command_slow(self.slow_note)
        if run.delivery is not None:
            running = run.journal.row(Outcome(exit_code=0, status=Status.RUNNING, note=self.slow_note))
            run.delivery.command_slow({**running, "exit_status": None, "ended_at": None,
                                       "duration_s": run.journal.running_for()}, self.slow_note)
