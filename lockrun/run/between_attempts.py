"""Between two attempts of a --retry run (docs/operating.md "Retries and jitter"): the failed
attempt's row and fleet event made final, a pause with the lock kept (a keeper renews it, the
backstop stays armed), then the next attempt begun under the same lease and fencing token; or the
run's end, when a signal, a lost lease or a --replace came during the pause.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from lockrun.backends.values import LOST, PREEMPTED, FleetRecord
from lockrun.config import options as o
from lockrun.core.clock import iso_ago
from lockrun.core.errors import BackendUnavailable, ExitCode
from lockrun.core.record import Status
from lockrun.run.attempt import RunState, start_keeper
from lockrun.run.keeper import must_stop_at
from lockrun.run.outcome import Outcome
from lockrun.run.retry import PauseEnd, pause, pause_s
from lockrun.run.watch import REPLACED

if TYPE_CHECKING:
    from lockrun.backends.protocol import Backend
    from lockrun.backends.values import Lease
    from lockrun.run.backstop import Backstop
    from lockrun.run.journal import RunJournal
    from lockrun.run.lease_client import LeaseClient
    from lockrun.run.signals import SignalRelay


class RetryingRun(RunState, Protocol):
    """What the pause asks of its run (runner.Run) besides what an attempt reads."""

    def to_syslog(self, journal: RunJournal, outcome: Outcome) -> None: ...

    def next_attempt(self, number: int, lease_client: LeaseClient) -> None: ...

    def interrupted(self, signum: int, when: str, fencing_token: int | None = None) -> Outcome: ...


class BetweenAttempts:
    """After attempt ``number`` failed: :meth:`go_on` is the lease the next one runs under, or the
    outcome of a run that ended in the pause (on the next attempt's row)."""

    def __init__(self, run: RetryingRun, backend: Backend, signals: SignalRelay, lease_client: LeaseClient,
                 backstop: Backstop | None, number: int) -> None:
        self.run, self.backend, self.signals, self.lease_client = run, backend, signals, lease_client
        self.backstop, self.number = backstop, number

    def go_on(self, lease: Lease, outcome: Outcome) -> Lease | Outcome:
        run, number = self.run, self.number
        delay = pause_s(number, run.plan[o.RETRY_DELAY])
        run.journal.mark_ended()
        finished = run.journal
        sent = time.monotonic()
        holder = {"attempt": str(number + 1), "retry_at": iso_ago(-delay)}
        shared_tail = None if outcome.tail_private else outcome.output_tail  # docs/operating.md "Output"
        record = FleetRecord(finished.row(outcome), shared_tail)
        # Not reached: the keeper goes on renewing, and the fleet record misses this attempt's end.
        found = self._call(lambda: self.backend.attempt_over(lease, holder, record), lease,
                           f"record the end of attempt {number}")
        lease = self._renewed(lease, found, sent)
        run.report("info", f"{run.job.name!r}: attempt {number} {outcome.status} (exit {outcome.exit_code});"
                           f" attempt {number + 1} of {run.plan[o.RETRY] + 1} in {delay:.1f}s, the lock kept")
        lease, ended = self._pause(lease, finished, outcome, found, delay)
        run.next_attempt(number + 1, self.lease_client)
        if ended is None:
            lease, ended = self._begin(lease)
        if ended is None:
            return lease
        return self._ended(ended, lease)

    def _pause(self, lease: Lease, finished: RunJournal, outcome: Outcome, found: str | None,
               delay: float) -> tuple[Lease, PauseEnd | None]:
        """The pause, with a keeper renewing the lease: the lease as renewed, and why the run ended
        in it (None: the next attempt may begin)."""
        keeper = start_keeper(self.run, self.backend, lease, self.signals, self.backstop, child_pid=lambda: None)
        ended: PauseEnd | None = None
        try:
            finished.finish(outcome)  # the attempt's final row, while the keeper renews
            self.run.to_syslog(finished, outcome)
            if found in (LOST, PREEMPTED):
                ended = lost_in_the_pause(found, keeper.lost_reason or "the lock was taken over or cleared")
            else:
                ended = pause(delay, keeper, self.signals)
        finally:
            keeper.stop()
            if self.backstop is not None:
                self.backstop.suspend()
        return keeper.renewed, ended

    def _begin(self, lease: Lease) -> tuple[Lease, PauseEnd | None]:
        """The next attempt begun in the backend (its holder record and fleet event), or why not."""
        number, signals = self.number + 1, self.signals
        start = self.lease_client.holder_info()
        sent = time.monotonic()
        found = self._call(lambda: self.backend.attempt_begins(
            lease, {"run_id": self.lease_client.run_id, "attempt": str(number), "retry_at": ""},
            {key: start[key] for key in ("run_id", "host", "pid", "command", "started_at", "ttl_ms")}),
            lease, f"begin attempt {number}")
        lease = self._renewed(lease, found, sent)
        if found in (LOST, PREEMPTED):
            return lease, lost_in_the_pause(found, "the lock was taken over or cleared (its token no longer matches)")
        if found is None and not signals.received:
            # No attempt starts on a lease the backend has not confirmed since the pause.
            return lease, PauseEnd(Status.LOST, why="the backend could not be reached to begin the attempt")
        if signals.received:  # as the pause ended: the next attempt never starts
            return lease, PauseEnd(Status.ERROR, signals.received[0])
        return lease, None

    def _ended(self, ended: PauseEnd, lease: Lease) -> Outcome:
        """The run's outcome when it ended in the pause, said in one line."""
        run = self.run
        run.journal.acquire_over()
        before = f"before attempt {self.number + 1}"
        if ended.signum is not None:
            return run.interrupted(ended.signum, f"during the --retry pause, {before}", lease.fencing_token)
        if ended.status == Status.PREEMPTED:  # not a lost lease: another run asked for it, and has it next
            said = f"replaced by --replace during the --retry pause {before}"
            run.report("warn", f"{run.job.name!r}: {said}")
            return Outcome(exit_code=ExitCode.LOST, status=Status.PREEMPTED, fencing_token=lease.fencing_token,
                           note=said, lease_lost=True)
        why = f"{ended.why}, during the --retry pause {before}"
        run.report("error", f"lease on {run.job.name!r} lost: {why}")
        return Outcome(exit_code=ExitCode.LOST, status=ended.status, fencing_token=lease.fencing_token,
                       note=f"lease lost: {why}", lease_lost=True)

    def _call(self, call: Callable[[], str], lease: Lease, step: str) -> str | None:
        """One backend call between attempts, tried again (after 50 ms, doubling to 500 ms) while the
        lease, as last renewed, is sure to hold (the keeper's deadline: keeper.py), and no signal came;
        None when no try reached the backend by then, said in one line."""
        deadline = must_stop_at(lease, self.run.plan[o.KILL_AFTER])
        delay = 0.05
        while True:
            try:
                return call()
            except BackendUnavailable as exc:
                problem = exc
            if self.signals.received or time.monotonic() + delay >= deadline:
                self.run.report("warn", f"{self.run.job.name!r}: could not {step} ({problem})")
                return None
            self.signals.wait(time.monotonic() + delay)
            delay = min(delay * 2, 0.5)

    @staticmethod
    def _renewed(lease: Lease, found: str | None, sent: float) -> Lease:
        """The lease as a call between attempts, sent at ``sent``, renewed it. Under --replicas such
        a renewal is not acknowledged by WAIT: it does not push the deadline on."""
        if found is None or found == LOST or lease.replicas:
            return lease
        return lease._replace(sent_at=sent)


def lost_in_the_pause(found: str, why: str) -> PauseEnd:
    """A renewal between attempts found the lease lost, or asked for by a --replace."""
    return PauseEnd(Status.PREEMPTED, why=REPLACED) if found == PREEMPTED else PauseEnd(Status.LOST, why=why)
