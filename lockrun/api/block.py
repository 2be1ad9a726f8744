"""A block under a lock: ``with lockrun.lock("name") as lease:`` (docs/python.md).

    lock(name, ...)      checks its arguments at once; returns a LockBlock, which any number of
                         threads may enter, each time a new run
    enter                settings (settings.py), the ledger row "running" (run/journal), the lease
                         (run/lease_client: acquire, or wait), the keeper (run/keeper) renewing it,
                         a watcher thread for the deadline, the delivery armed (delivery.py)
    the block            the watcher, at the keeper's deadline or as soon as the lease is found
                         lost, stops the keeper and raises LeaseLost in the block's thread
                         (on_lost="raise"), or only sets lease.lost (on_lost="flag")
    exit                 the delivery disarmed, the outcome (ending.py), the release (the fleet
                         record with it), the final row; LeaseLost raised if the lease was lost

A block whose thread never comes back to Python (a C call that does not return) is ended by its
watcher at the lease's end: the row says ``lost``, the lock is released; the exit, whenever it
comes, only raises.

Within one process two blocks of one name exclude each other too: on the local backend a POSIX
lock belongs to the process, not to a thread, and closing any descriptor of the lock file drops
it, so a block takes the name in this process first (``_Holds``) and only then touches the file;
with Redis each block has its own token, and only a second block of the same name in one thread
(which could only wait for itself) is refused at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Literal, NamedTuple

from lockrun.api.delivery import TRANSITIONS, Delivered, Target, Teller, after_fork_in_child
from lockrun.api.ending import block_outcome
from lockrun.api.errors import Busy, LeaseLost, Paused, Unavailable
from lockrun.api.settings import block_settings
from lockrun.backends.connect import call_timeout_for, open_backend
from lockrun.backends.pause import Paused as PauseRecord
from lockrun.backends.protocol import Backend
from lockrun.backends.redis.url import validate_redis_url
from lockrun.backends.values import FleetRecord, Holder
from lockrun.backends.values import Lease as BackendLease
from lockrun.config import settings as config_settings
from lockrun.config.values import parse_time_span, validate_name
from lockrun.core.clock import utc_now_iso
from lockrun.core.defaults import DEFAULT_KILL_AFTER
from lockrun.core.errors import BackendUnavailable, ExitCode, LockrunError, UsageError
from lockrun.core.record import Status
from lockrun.ledger.store import RunRecord
from lockrun.run.journal import RunJournal
from lockrun.run.keeper import Keeper, lease_problem
from lockrun.run.lease_client import LeaseClient
from lockrun.run.outcome import Outcome, busy_message, released_as

logger = logging.getLogger("lockrun")
# A library says nothing unless the application configures logging (no "last resort" to stderr).
logger.addHandler(logging.NullHandler())

OnLost = Literal["raise", "flag"]

#: Who holds a name in this process: a thread (its ident) or an asyncio task (its id).
Owner = tuple[str, int]

#: How often the watcher tries again to tell a thread that is entering or leaving a block.
DELIVERY_RETRY_S = 0.02


def _report(level: str, message: str) -> None:
    """The run machinery's lines (run/journal, run/lease_client), as log records of "lockrun"."""
    logger.log({"info": logging.INFO, "warn": logging.WARNING}.get(level, logging.ERROR), "%s", message)


# -- arguments ------------------------------------------------------------------------------------


def _seconds(value: object, what: str, *, minimum: float = 0.0, allow_zero: bool = False) -> float:
    """Seconds (a number) or the CLI's time syntax ("90s", "2m"), in the CLI's range."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{what} must be a number of seconds or a duration string such as '2m',"
                        f" not {type(value).__name__}")
    try:
        return parse_time_span(value, what, minimum=minimum, allow_zero=allow_zero)
    except UsageError as exc:
        raise ValueError(str(exc)) from None


class BlockSpec(NamedTuple):
    """What ``lock()`` was given, checked."""

    name: str
    ttl: float | None
    wait: float
    redis_url: str | None
    on_lost: OnLost


def block_spec(name: object, ttl: object, wait: object, redis_url: object, on_lost: object) -> BlockSpec:
    """The arguments of ``lock()`` checked as the CLI checks its flags: TypeError for a wrong type,
    ValueError (with the CLI's words) for a value out of its range."""
    if not isinstance(name, str):
        raise TypeError(f"the lock name must be a str, not {type(name).__name__}")
    try:
        validate_name(name)
    except UsageError as exc:
        raise ValueError(str(exc)) from None
    if redis_url is not None:
        if not isinstance(redis_url, str):
            raise TypeError(f"redis_url must be a str or None, not {type(redis_url).__name__}")
        try:
            validate_redis_url(redis_url)
        except UsageError as exc:
            raise ValueError(str(exc)) from None
    if on_lost not in ("raise", "flag"):
        raise ValueError(f"on_lost must be 'raise' or 'flag', not {on_lost!r}")
    return BlockSpec(
        name=name,
        ttl=None if ttl is None else _seconds(ttl, "ttl", minimum=1),
        wait=_seconds(wait, "wait", allow_zero=True),
        redis_url=redis_url,
        on_lost="raise" if on_lost == "raise" else "flag",
    )


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


# -- this process's holds --------------------------------------------------------------------------


class _Holds:
    """The names this process's blocks hold or wait for, and the local backends they share."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.owners: dict[tuple[str, ...], set[Owner]] = {}
        # The local backend of a name whose last wait left a helper asleep on its lock file, for the next
        # block of the name: that helper's descriptor may be closed only by it (backends/local/waiting.py).
        self.local_backends: dict[tuple[str, ...], Backend] = {}

    def take(self, key: tuple[str, ...], owner: Owner, *, exclusive: bool, until: float) -> str | None:
        """Hold ``key`` for ``owner``; None when held, else why not: "self" (``owner`` holds it
        already: a block of the name inside another), "process" (``exclusive``: another owner of this
        process holds it, and did not let go before ``until``, monotonic)."""
        with self.changed:
            while True:
                owners = self.owners.setdefault(key, set())
                if owner in owners:
                    return "self"
                if not exclusive or not owners:
                    owners.add(owner)
                    return None
                left = until - time.monotonic()
                if left <= 0:
                    return "process"
                self.changed.wait(left)

    def give(self, key: tuple[str, ...], owner: Owner) -> None:
        with self.changed:
            owners = self.owners.get(key)
            if owners is not None:
                owners.discard(owner)
                if not owners:
                    del self.owners[key]
            self.changed.notify_all()

    def local_backend(self, key: tuple[str, ...], make: Callable[[], Backend]) -> Backend:
        """The local backend of the name ``key`` (called by the owner of that name only)."""
        backend = self.local_backends.get(key)
        if backend is None:
            backend = self.local_backends[key] = make()
        return backend

    def retire(self, key: tuple[str, ...]) -> None:
        """Forget the local backend of ``key``: it was closed, and nothing of it outlives that."""
        self.local_backends.pop(key, None)


_HOLDS = _Holds()


def _forked() -> None:
    # A child of fork holds none of its parent's locks (nor the kernel locks: POSIX locks are not
    # inherited), and no thread of the parent runs in it: it starts afresh.
    global _HOLDS
    _HOLDS = _Holds()
    after_fork_in_child()


os.register_at_fork(after_in_child=_forked)


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
        self.run_id = uuid.uuid4().hex
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
        from lockrun.run.command import refuse_a_lock_held_in_the_old_place, replicas_for

        replicas = replicas_for(resolved, None)
        if resolved.redis_url:
            self.hold_key = ("redis", resolved.backend_where, resolved.prefix, spec.name)
        else:
            try:
                refuse_a_lock_held_in_the_old_place(resolved, spec.name, 1)
            except BackendUnavailable as exc:
                raise Unavailable(str(exc)) from None
            self.hold_key = ("local", str(resolved.state_dir), spec.name)
        record = RunRecord(run_id=self.run_id, name=spec.name, command=self.command, backend=resolved.backend_name,
                           started_at=utc_now_iso(), backend_where=resolved.backend_where,
                           backend_from=resolved.backend_from)
        self.journal = RunJournal(resolved.ledger_path, record, report=_report, keep_days=resolved.ledger_keep_days,
                                  metrics_file=resolved.metrics_file)
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
        why = _HOLDS.take(self.hold_key, self.owner, exclusive=not resolved.redis_url, until=give_up_at)
        if why is not None:
            self.hold_key = None  # not ours to give back
            whose = "this thread" if self.owner[0] == "thread" else "this task"
            if why == "self":
                raise Busy(f"lock {spec.name!r} is already held by {whose} (a block of the same name inside"
                           " another): lockrun locks are not re-entrant", name=spec.name)
            raise Busy(f"lock {spec.name!r} is busy: held by another thread of this process ({os.getpid()})",
                       name=spec.name)
        call_timeout = call_timeout_for(resolved.ttl, resolved.socket_timeout)

        def make() -> Backend:
            return open_backend(resolved, call_timeout, call_timeout_for(resolved.ttl, resolved.connect_timeout),
                                replicas=replicas, allow_eviction=resolved.allow_eviction)

        try:
            if resolved.redis_url:
                self.backend = make()
            else:
                self.backend = _HOLDS.local_backend(self.hold_key, make)
                self.shared_backend = True
            self.client = LeaseClient(self.backend, spec.name, resolved.ttl, run_id=self.run_id, argv=self.command,
                                      report=_report)
            got = self.client.acquire(max(0.0, give_up_at - time.monotonic()), interrupted=self._cancelled)
        except BackendUnavailable as exc:
            raise Unavailable(str(exc)) from None
        except BaseException:
            if self.client is not None:  # an acquire cut short may have taken the lock all the same
                with contextlib.suppress(Exception):
                    self.backend.release_token(spec.name, self.client.token)  # type: ignore[union-attr]
            raise
        if isinstance(got, BackendLease):
            return got
        if isinstance(got, PauseRecord):
            raise Paused(f"lock {spec.name!r} is {got.describe()}: not run", name=spec.name)
        if isinstance(got, Holder):
            label = "local backend, this host only" if not resolved.redis_url else f"redis {resolved.backend_where}"
            raise Busy(busy_message(got, label), name=spec.name)
        raise LockrunError(f"unexpected answer to the acquire of {spec.name!r}: {type(got).__name__}")

    def _cancelled(self) -> bool:
        """Whether the wait should end now (lock_async's task was cancelled)."""
        return self.stop.is_set()

    def _not_run(self, exc: BaseException) -> None:
        """The block will not run: the row says why, and what was taken for it is given back."""
        journal = self.journal
        assert journal is not None
        journal.acquire_over()
        if isinstance(exc, Paused):
            outcome = Outcome(exit_code=ExitCode.OK, status=Status.PAUSED, note=str(exc))
        elif isinstance(exc, Busy):
            outcome = Outcome(exit_code=ExitCode.BUSY, status=Status.BUSY, note=str(exc))
        elif isinstance(exc, Unavailable):
            outcome = Outcome(exit_code=ExitCode.UNAVAILABLE, status=Status.UNAVAILABLE, error=str(exc))
        elif isinstance(exc, LockrunError):
            outcome = Outcome(exit_code=exc.exit_code, status=Status.ERROR, error=str(exc))
        elif isinstance(exc, KeyboardInterrupt):
            outcome = Outcome(exit_code=ExitCode.SIGNAL_BASE + 2, status=Status.ERROR,
                              error="interrupted (KeyboardInterrupt) before the block started")
        else:
            outcome = Outcome(exit_code=ExitCode.INTERNAL, status=Status.ERROR,
                              error=f"interrupted before the block started: {exc!r}")
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
            while not self.stop.is_set():
                problem = lease_problem(keeper, time.monotonic())
                if problem is not None:
                    self.lose(problem)
                    break
                self.wake.wait(max(0.0, keeper.must_stop_at - time.monotonic()))
                self.wake.clear()
            else:
                return
            target = self.target
            if target is not None:
                target.deliver()
            keeper.stop()  # after the delivery: an in-flight renewal may take its whole timeout
            if target is None:
                return
            end = keeper.expires_at  # the lease as last renewed ends here, whatever the block does
            while not self.stop.is_set():
                now = time.monotonic()
                if now >= end:
                    self.end_unattended()
                    return
                pause = end - now if target.deliver() else min(DELIVERY_RETRY_S, end - now)
                self.stop.wait(pause)
        except Exception:  # noqa: BLE001 - a watcher that fails says so; the exit still ends the run
            logger.exception("the watcher of %r failed", self.name)

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
        lost = self.current_problem()
        ours = error is not None and any(error is raised for raised in self.raised)
        delivered = isinstance(error, Delivered) and error.name == self.name
        if not ended:
            try:
                self._leave_recorded(error, lost, lost_raised=ours or delivered)
            except Exception as failure:  # noqa: BLE001 - the block's own outcome matters more than ours
                logger.exception("lockrun failed to record or release %r", self.name)
                assert self.journal is not None
                self.journal.finish_after_failure(failure)
            finally:
                self._let_go()
        self.left = True
        if lost is None or (self.spec.on_lost == "flag" and not (ours or delivered)):
            return None
        if delivered and error is not None:  # the asynchronous exception's class: a plain LeaseLost, same traceback
            return LeaseLost(str(error), name=self.name, reason=lost).with_traceback(error.__traceback__)
        if error is None:
            return self.lost_error(lost)
        return None

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
        """Release with the run's end in the fleet record, then the final row (runner._release's way)."""
        assert self.journal is not None and self.client is not None and self.lease is not None
        journal = self.journal
        journal.mark_ended()
        kept, lost = released_as(outcome, True), released_as(outcome, False)
        record = FleetRecord(journal.row(kept), None, if_lost=journal.row(lost))
        released = self.client.release(self.lease, lost=outcome.lease_lost,
                                       succeeded=outcome.status == Status.SUCCEEDED, record=record)
        if released is False and not outcome.lease_lost:
            logger.warning("lock %r was no longer this block's when it released it (it expired, was evicted,"
                           " stolen or cleared): another run may have overlapped this one; its ledger row says"
                           " lock_lost_at_release", self.name)
        journal.finish(released_as(outcome, released))

    def _let_go(self) -> None:
        """Give back this process's hold of the name, and close what only this run used (a local
        backend too, while the name is still this run's, unless a helper of its wait still sleeps)."""
        backend, self.backend = self.backend, None
        if backend is not None:
            with contextlib.suppress(Exception):
                backend.close()
            if self.shared_backend and self.hold_key is not None and not getattr(backend, "waiting", False):
                _HOLDS.retire(self.hold_key)
        if self.hold_key is not None:
            _HOLDS.give(self.hold_key, self.owner)
            self.hold_key = None


# -- the public objects ----------------------------------------------------------------------------


class Lease:
    """What a block holds: the fencing token, and whether the lease is still ours.

    ``token`` is the fencing token (an int that strictly increases with every acquisition of the
    name): pass it to a resource that can refuse a stale writer. ``lost`` turns True when the
    lease is lost; :meth:`check` raises LeaseLost then, and also after the block (nothing is held
    any more) and in a process forked inside it (the lease is its parent's).
    """

    __slots__ = ("_run",)

    def __init__(self, run: BlockRun) -> None:
        self._run = run

    @property
    def name(self) -> str:
        return self._run.name

    @property
    def token(self) -> int:
        """The fencing token."""
        lease = self._run.lease
        assert lease is not None
        return lease.fencing_token

    @property
    def run_id(self) -> str:
        """This run's id in the ledger (``lockrun history``, ``lockrun show``)."""
        return self._run.run_id

    @property
    def lost(self) -> bool:
        """Whether the lease was lost (it was taken over or cleared, or could not be renewed in time)."""
        return self._run.lost_reason is not None

    @property
    def reason(self) -> str | None:
        """Why the lease was lost, or None."""
        return self._run.lost_reason

    @property
    def held(self) -> bool:
        """Whether this process holds the lease now: inside the block, and not lost."""
        run = self._run
        return os.getpid() == run.pid and not run.left and not run.ended and run.current_problem() is None

    def check(self) -> None:
        """Raise LeaseLost unless this process holds the lease now (see :attr:`held`)."""
        run = self._run
        if os.getpid() != run.pid:
            raise LeaseLost(f"the lease on {run.name!r} is held by process {run.pid}, not by this one (forked"
                            " inside the block)", name=run.name, reason="not this process's lease")
        problem = run.current_problem()
        if problem is not None:
            raise run.lost_error(problem)
        if run.left or run.ended:
            raise LeaseLost(f"the block of {run.name!r} has ended: its lease was released", name=run.name,
                            reason="released")

    def __repr__(self) -> str:
        run = self._run
        state = "lost" if run.lost_reason else ("released" if run.left else "held")
        token = run.lease.fencing_token if run.lease else None
        return f"<lockrun.Lease {run.name!r} token={token} {state}>"


class LockBlock:
    """``lockrun.lock(...)``: a context manager; each ``with`` is a run of its own, in any thread."""

    def __init__(self, spec: BlockSpec, site: str | None = None) -> None:
        self.spec = spec
        self._site = site  # the decorated function; None: the code that enters the block
        self._guard = threading.Lock()
        self._runs: list[BlockRun] = []  # entered and not yet left, oldest first

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return f"lockrun.lock({self.spec.name!r}, ttl={self.spec.ttl!r}, wait={self.spec.wait!r})"

    def __enter__(self) -> Lease:
        frame = sys._getframe(1)
        site = self._site or site_of(frame.f_globals.get("__name__"), getattr(frame.f_code, "co_qualname",
                                                                              frame.f_code.co_name))
        main = threading.current_thread() is threading.main_thread()
        run = BlockRun(self.spec, site, ("thread", threading.get_ident()), main=main)
        run.enter()
        with self._guard:
            self._runs.append(run)
        return Lease(run)

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> Literal[False]:
        me = threading.get_ident()
        with self._guard:
            mine = [run for run in self._runs if run.thread_id == me]
            if not mine and not self._runs:
                raise RuntimeError(f"lockrun.lock({self.spec.name!r}) left without being entered")
            run = (mine or self._runs)[-1]
            self._runs.remove(run)
        instead = run.leave(exc)
        if instead is not None:
            raise instead from None
        return False


TRANSITIONS.update({LockBlock.__enter__.__code__, LockBlock.__exit__.__code__})


def lock(
    name: str, *, ttl: float | str | None = None, wait: float | str = 0, redis_url: str | None = None,
    on_lost: OnLost = "raise",
) -> LockBlock:
    """A block under the lock ``name`` (docs/python.md): ``with lockrun.lock("report", ttl="2m") as lease:``.

    ``ttl``: the lease, renewed every ttl/3 (seconds or "2m"; at least 1 s; None: LOCKRUN_TTL, the
    config file's ``ttl``, else 60 s). ``wait``: how long to wait for a busy lock (0: not at all).
    ``redis_url``: None resolves as the CLI does (LOCKRUN_REDIS_URL, the config file, else the local
    backend). ``on_lost``: "raise" (LeaseLost in the thread that entered the block, by the lease's
    end at the latest) or "flag" (``lease.lost`` turns True, ``lease.check()`` raises).

    Entering raises Busy (or Paused), Unavailable, or a LockrunError for bad settings; wrong arguments
    raise TypeError or ValueError here, at once.
    """
    return LockBlock(block_spec(name, ttl, wait, redis_url, on_lost))
