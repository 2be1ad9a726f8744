"""One block's run (docs/python.md): what ``with lockrun.lock("name")`` does on entry and on exit.

    enter        settings (settings.py), the ledger row "running" (run/journal), the name taken in
                 this process (holds.py), the lease (run/lease_client: acquire, or wait), the keeper
                 (run/keeper) renewing it, a watcher thread for the deadline, the delivery armed
                 (delivery.py)
    the block    the watcher, at the keeper's deadline or as soon as the lease is found lost, tells
                 the block (LeaseLost in its thread, on_lost="raise"; lease.lost, on_lost="flag")
                 and stops the keeper
    exit         the delivery disarmed, the outcome (ending.py), the release (the fleet record with
                 it), the final row; what to raise: LeaseLost if the lease was lost

A block whose thread never comes back to Python (a call that does not return) is ended by its
watcher at the lease's end: the row says ``lost``, the lock is released; the exit, whenever it
comes, only raises. ``lock.py`` holds the public objects around it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time

from lockrun.api.delivery import Delivered, Target, Teller
from lockrun.api.ending import block_outcome, not_run_outcome
from lockrun.api.errors import Busy, LeaseLost, Paused, Unavailable
from lockrun.api.holds import HOLDS, Owner
from lockrun.api.settings import block_settings
from lockrun.api.spec import BlockSpec
from lockrun.backends.connect import call_timeout_for, open_backend
from lockrun.backends.pause import Paused as PauseRecord
from lockrun.backends.protocol import Backend
from lockrun.backends.values import FleetRecord, Holder
from lockrun.backends.values import Lease as BackendLease
from lockrun.config import options
from lockrun.config import settings as config_settings
from lockrun.core.clock import utc_now_iso
from lockrun.core.defaults import DEFAULT_KILL_AFTER
from lockrun.core.errors import BackendUnavailable, ExitCode, LockrunError
from lockrun.core.record import Status
from lockrun.core.run_ids import new_run_id
from lockrun.ledger.store import RunRecord
from lockrun.run.journal import RunJournal
from lockrun.run.keeper import Keeper, lease_problem
from lockrun.run.lease_client import LeaseClient
from lockrun.run.outcome import Outcome, busy_message, released_as

logger = logging.getLogger("lockrun")
# A library says nothing unless the application configures logging (no "last resort" to stderr).
logger.addHandler(logging.NullHandler())

#: How often the watcher tries again to tell a thread that is entering or leaving a block.
DELIVERY_RETRY_S = 0.02


def _report(level: str, message: str) -> None:
    """The run machinery's lines (run/journal, run/lease_client), as log records of "lockrun"."""
    logger.log({"info": logging.INFO, "warn": logging.WARNING}.get(level, logging.ERROR), "%s", message)


# -- what the record says the block is -------------------------------------------------------------


def program() -> list[str]:
    """The program that took the lock, as ``status`` and ``history`` show it: ``manage.py``,
    ``celery``, ``python -m app``; never its arguments (they may hold secrets)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    module = getattr(spec, "name", None)
    if isinstance(module, str) and module:
        return ["python", "-m", module.removesuffix(".__main__")]
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 in ("", "-c"):
        return ["python"]
    return [os.path.basename(argv0)]


def site_of(module: object, qualname: object) -> str:
    """``myapp.tasks:sync_invoices``: the function (or module) whose block took the lock."""
    return f"{module or '?'}:{qualname or '?'}"


def _held_in_this_process(name: str, why: str, owner: Owner) -> Busy:
    """Busy: the name is held (or waited for) by this thread or task (``why`` "self"), or another."""
    whose = "this thread" if owner[0] == "thread" else "this task"
    if why == "self":
        return Busy(f"lock {name!r} is already held by {whose} (a block of the same name inside"
                    " another): lockrun locks are not re-entrant", name=name)
    return Busy(f"lock {name!r} is busy: held by another thread of this process ({os.getpid()})", name=name)


def _the_lease(got: object, name: str, resolved: config_settings.Settings) -> BackendLease:
    """The acquire's answer: the lease, or Paused, Busy (the holder's message) or a LockrunError."""
    if isinstance(got, BackendLease):
        return got
    if isinstance(got, PauseRecord):
        raise Paused(f"lock {name!r} is {got.describe()}: not run", name=name)
    if isinstance(got, Holder):
        label = "local backend, this host only" if not resolved.redis_url else f"redis {resolved.backend_where}"
        raise Busy(busy_message(got, label), name=name)
    raise LockrunError(f"unexpected answer to the acquire of {name!r}: {type(got).__name__}")


# -- one block's run -------------------------------------------------------------------------------


class BlockRun:
    """One entry into a block: its ledger row, its lease, its keeper and watcher."""

    def __init__(self, spec: BlockSpec, site: str, owner: Owner, *, main: bool) -> None:
        self.spec, self.owner = spec, owner
        self.name = spec.name
        self.command = [*program(), site]
        self.pid = os.getpid()
        self.thread_id = threading.get_ident()
        self.main = main
        self.run_id = new_run_id()  # as a run from the command line: history and show find either the same way
        self.lock = threading.Lock()  # between the block's exit and the watcher ending it unattended
        self.lost_reason: str | None = None
        self.leaving = False  # the block's exit has begun
        self.ended = False  # the run is recorded and released (by the exit, or by the watcher)
        self.left = False  # the exit is over
        self.raised: list[LeaseLost] = []  # the LeaseLost of this lease that were raised
        self.target: Teller | None = None
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.watcher: threading.Thread | None = None
        self.keeper: Keeper | None = None
        self.lease: BackendLease | None = None
        self.backend: Backend | None = None
        self.client: LeaseClient | None = None
        self.journal: RunJournal | None = None
        self.hold_key: tuple[str, ...] | None = None
        self.shared_backend = False

    # -- entering -----------------------------------------------------------------------------

    def enter(self) -> None:
        """Take the lease, or raise Busy, Paused, Unavailable (or a LockrunError for bad settings)."""
        spec = self.spec
        resolved = block_settings(spec.name, redis_url=spec.redis_url, ttl=spec.ttl)
        from lockrun.run.command import metrics_file_for, replicas_for

        replicas = replicas_for(resolved.plan, resolved)
        if resolved.redis_url:
            self.hold_key = ("redis", resolved.backend_where, resolved.prefix, spec.name)
        else:
            self.hold_key = ("local", str(resolved.state_dir), spec.name)
        record = RunRecord(run_id=self.run_id, name=spec.name, command=self.command, backend=resolved.backend_name,
                           started_at=utc_now_iso(), backend_where=resolved.backend_where,
                           backend_from=resolved.backend_from)
        self.journal = RunJournal(resolved.ledger_path, record, report=_report, keep_days=resolved.ledger_keep_days,
                                  metrics_file=metrics_file_for(resolved.plan))
        self.journal.open()
        try:
            got = self._acquire(resolved, replicas)
        except BaseException as exc:
            self._not_run(exc)
            raise
        self.lease = got
        try:
            self._start(got, resolved.ttl, call_timeout_for(resolved.ttl, resolved.socket_timeout))
        except BaseException as exc:  # the block will not run: the lease goes back at once
            self.leave(exc)
            raise

    def _acquire(self, resolved: config_settings.Settings, replicas: int | str) -> BackendLease:
        spec = self.spec
        assert self.hold_key is not None and self.journal is not None
        give_up_at = time.monotonic() + spec.wait
        self.journal.acquire_began()
        why = HOLDS.take(self.hold_key, self.owner, exclusive=not resolved.redis_url, until=give_up_at,
                         cancelled=self.stop.is_set)  # lock_async's task was cancelled: cancel_wait
        if why is not None:
            self.hold_key = None  # not ours to give back
            raise _held_in_this_process(spec.name, why, self.owner)
        call_timeout = call_timeout_for(resolved.ttl, resolved.socket_timeout)

        def make() -> Backend:
            return open_backend(resolved, call_timeout, call_timeout_for(resolved.ttl, resolved.connect_timeout),
                                replicas=replicas, allow_eviction=resolved.plan[options.ALLOW_EVICTION])

        try:
            if resolved.redis_url:
                self.backend = make()
            else:
                self.backend = HOLDS.local_backend(self.hold_key, make)
                self.shared_backend = True
            self.client = LeaseClient(self.backend, spec.name, resolved.ttl, run_id=self.run_id, argv=self.command,
                                      report=_report)
            got = self.client.acquire(max(0.0, give_up_at - time.monotonic()), interrupted=self.stop.is_set)
        except BackendUnavailable as exc:
            raise Unavailable(str(exc)) from None
        except BaseException:
            if self.client is not None:  # an acquire cut short may have taken the lock all the same
                with contextlib.suppress(Exception):
                    self.backend.release_token(spec.name, self.client.token)  # type: ignore[union-attr]
            raise
        return _the_lease(got, spec.name, resolved)

    def cancel_wait(self) -> None:
        """End a wait for the lock at its next look, whether for another block of this process or
        for another holder (lock_async's task was cancelled)."""
        self.stop.set()
        HOLDS.wake()

    def _not_run(self, exc: BaseException) -> None:
        """The block will not run: the row says why, and what was taken for it is given back."""
        journal = self.journal
        assert journal is not None
        journal.acquire_over()
        outcome = not_run_outcome(exc)
        level = logging.INFO if isinstance(exc, Busy) else logging.WARNING
        logger.log(level, "%s", outcome.note or outcome.error)
        journal.mark_ended()
        journal.say_problem(command_runs=False)
        journal.finish(outcome)
        self._let_go()

    def _start(self, lease: BackendLease, ttl: float, call_timeout: float) -> None:
        """The lease is ours: the row says so, the keeper renews it, the watcher watches its deadline."""
        assert self.journal is not None and self.backend is not None
        self.journal.acquire_over()
        self.journal.say_problem(command_runs=True)
        self.journal.command_started(utc_now_iso(), time.monotonic(), lease.fencing_token)
        logger.info("acquired %r (fencing token %d, ttl %gs)", self.name, lease.fencing_token, ttl)
        # The code's grace to unwind after LeaseLost: what the CLI gives a command between SIGTERM and
        # SIGKILL (min(10 s, TTL/4), keeper.stop_grace), so that it is done before the lease can expire.
        self.keeper = Keeper(self.backend, lease, kill_after=DEFAULT_KILL_AFTER, call_timeout=call_timeout,
                             wake=self.wake.set, child_pid=lambda: None)
        if self.spec.on_lost == "raise":
            self.target = self.teller()
            self.target.arm()
        self.keeper.start()
        self.watcher = threading.Thread(target=self._watch, name=f"lockrun-watch {self.name}", daemon=True)
        try:
            self.watcher.start()
        except RuntimeError as exc:  # no thread to be had: the lease could not be watched, so it is not kept
            self.lose(f"the lease's watcher could not start ({exc})")

    def teller(self) -> Teller:
        """How this block is told its lease is lost: LeaseLost raised in the thread that entered it."""
        return Target(self.thread_id, self.lost_error, main=self.main)

    # -- while the block runs -------------------------------------------------------------------

    def lost_error(self, reason: str | None = None) -> LeaseLost:
        """The LeaseLost of this lease (remembered, so that the exit knows it for its own)."""
        why = reason or self.lost_reason or "the lease was lost"
        error = LeaseLost(f"lease on {self.name!r} lost: {why}", name=self.name, reason=why)
        self.raised.append(error)
        return error

    def current_problem(self) -> str | None:
        """Why the lease cannot be trusted now (the watcher may not have looked yet), or None."""
        if self.lost_reason is not None or self.keeper is None:
            return self.lost_reason
        return lease_problem(self.keeper, time.monotonic())

    def lose(self, reason: str) -> None:
        """The lease is lost: said once, and never renewed again."""
        with self.lock:
            if self.lost_reason is not None:
                return
            self.lost_reason = reason
        told = "LeaseLost raised in the block" if self.target is not None else "lease.lost is set"
        logger.warning("lease on %r lost: %s; %s", self.name, reason, told)

    def _watch(self) -> None:
        """The watcher thread: the deadline, then the delivery, then (raise) the lease's end."""
        keeper = self.keeper
        assert keeper is not None
        try:
            if not self._found_lost(keeper):
                return
            target = self.target
            if target is not None:
                target.deliver()
            keeper.stop()  # after the delivery: an in-flight renewal may take its whole timeout
            if target is not None:
                self._tell_until_the_end(keeper, target)
        except Exception:  # noqa: BLE001 - a watcher that fails says so; the exit still ends the run
            logger.exception("the watcher of %r failed", self.name)

    def _found_lost(self, keeper: Keeper) -> bool:
        """Until the exit stops the watcher: True once the lease is found lost (and said so)."""
        while not self.stop.is_set():
            problem = lease_problem(keeper, time.monotonic())
            if problem is not None:
                self.lose(problem)
                return True
            self.wake.wait(max(0.0, keeper.must_stop_at - time.monotonic()))
            self.wake.clear()
        return False

    def _tell_until_the_end(self, keeper: Keeper, target: Teller) -> None:
        """Tell the block again until its exit begins, or end it unattended at the lease's end."""
        end = keeper.expires_at  # the lease as last renewed ends here, whatever the block does
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= end:
                self.end_unattended()
                return
            pause = end - now if target.deliver() else min(DELIVERY_RETRY_S, end - now)
            self.stop.wait(pause)

    def end_unattended(self) -> None:
        """The lease has ended and the block has not: its thread is in a call that does not come back
        to Python. The run is recorded lost and the lock released now; the exit only raises."""
        with self.lock:
            if self.leaving or self.ended:
                return
            self.ended = True
        assert self.journal is not None
        self.journal.command_ended()
        note = (f"lease lost: {self.lost_reason}; the block was still running at the lease's end (in a call"
                " that did not return to Python)")
        logger.error("%r: %s", self.name, note)
        try:
            self._record(Outcome(exit_code=ExitCode.LOST, status=Status.LOST, note=note, lease_lost=True,
                                 fencing_token=self.lease.fencing_token if self.lease else None))
        finally:
            self._let_go()

    # -- leaving -------------------------------------------------------------------------------

    def leave(self, error: BaseException | None) -> LeaseLost | None:
        """The block ended (with ``error``, or None): record and release; what to raise instead of
        ``error`` (a LeaseLost), or None to let ``error`` (or nothing) go on."""
        if os.getpid() != self.pid:
            return None  # a child forked inside the block: the lease is its parent's
        ended = self._stop_watching()
        lost = self.current_problem()
        ours = error is not None and any(error is raised for raised in self.raised)
        delivered = isinstance(error, Delivered) and error.name == self.name
        if not ended:
            self._end(error, lost, lost_raised=ours or delivered)
        self.left = True
        return self._to_raise(error, lost, lost_raised=ours or delivered, delivered=delivered)

    def _to_raise(
        self, error: BaseException | None, lost: str | None, *, lost_raised: bool, delivered: bool,
    ) -> LeaseLost | None:
        if lost is None or (self.spec.on_lost == "flag" and not lost_raised):
            return None
        if delivered and error is not None:  # the asynchronous exception's class: a plain LeaseLost, same traceback
            return LeaseLost(str(error), name=self.name, reason=lost).with_traceback(error.__traceback__)
        return self.lost_error(lost) if error is None else None

    def _stop_watching(self) -> bool:
        """The watcher stopped (and waited for) and the keeper too; whether the watcher had ended the run."""
        try:
            if self.target is not None:
                self.target.disarm()
            with self.lock:
                self.leaving = True
                ended = self.ended
            self.stop.set()
            self.wake.set()
            if self.watcher is not None and self.watcher is not threading.current_thread():
                self.watcher.join()
        finally:  # whatever cuts the exit short (a second Ctrl-C), nothing renews this lease any more
            self.stop.set()
            if self.keeper is not None:
                self.keeper.stop()
        return ended

    def _end(self, error: BaseException | None, lost: str | None, *, lost_raised: bool) -> None:
        try:
            self._leave_recorded(error, lost, lost_raised=lost_raised)
        except Exception as failure:  # noqa: BLE001 - the block's own outcome matters more than ours
            logger.exception("lockrun failed to record or release %r", self.name)
            assert self.journal is not None
            self.journal.finish_after_failure(failure)
        finally:
            self._let_go()

    def _leave_recorded(self, error: BaseException | None, lost: str | None, *, lost_raised: bool) -> None:
        assert self.journal is not None and self.lease is not None
        self.journal.command_ended()
        if lost is not None and self.lost_reason is None:
            self.lose(lost)  # found at the exit, before the watcher did
        outcome = block_outcome(error, lost=lost, raise_on_lost=self.spec.on_lost == "raise",
                                lost_raised=lost_raised, fencing_token=self.lease.fencing_token)
        if self.keeper is not None and self.keeper.preempted and outcome.status == Status.LOST:
            outcome = outcome._replace(status=Status.PREEMPTED)
        self._record(outcome)

    def _record(self, outcome: Outcome) -> None:
        assert self.journal is not None and self.client is not None and self.lease is not None
        _release_and_finish(self.journal, self.client, self.lease, outcome, self.name)

    def _let_go(self) -> None:
        """Give back this process's hold of the name, and close what only this run used (a local
        backend too, while the name is still this run's, unless a helper of its wait still sleeps)."""
        backend, self.backend = self.backend, None
        if backend is not None:
            with contextlib.suppress(Exception):
                backend.close()
            if self.shared_backend and self.hold_key is not None and not getattr(backend, "waiting", False):
                HOLDS.retire(self.hold_key)
        if self.hold_key is not None:
            HOLDS.give(self.hold_key, self.owner)
            self.hold_key = None


def _release_and_finish(journal: RunJournal, client: LeaseClient, lease: BackendLease, outcome: Outcome,
                        name: str) -> None:
    """Release with the run's end in the fleet record, then the final row (runner._release's way)."""
    journal.mark_ended()
    kept, lost = released_as(outcome, True), released_as(outcome, False)
    record = FleetRecord(journal.row(kept), None, if_lost=journal.row(lost))
    released = client.release(lease, lost=outcome.lease_lost, succeeded=outcome.status == Status.SUCCEEDED,
                              record=record)
    if released is False and not outcome.lease_lost:
        logger.warning("lock %r was no longer this block's when it released it (it expired, was evicted,"
                       " stolen or cleared): another run may have overlapped this one; its ledger row says"
                       " lock_lost_at_release", name)
    journal.finish(released_as(outcome, released))
