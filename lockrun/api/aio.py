"""``async with lockrun.lock_async("name") as lease:``: a block of a coroutine (docs/python.md "asyncio").

The same run as a thread's block (block.py, lock.py), with two differences:

- The blocking steps (settings, the ledger, the acquire and its wait, the release) run in a
  thread of their own, so the event loop never waits for Redis, SQLite or a kernel lock. The
  keeper and the watcher are threads as for any block: renewals go on even while the loop is
  busy, which is what a lease needs.
- A lost lease (on_lost="raise") cancels the task that entered the block, as ``asyncio.timeout``
  does, and the exit turns that cancellation into LeaseLost: it comes out of the ``await`` the
  task is waiting in, never out of the event loop's own code (a signal would). Code that does not
  await (a CPU-bound stretch, a blocking call) learns it at its next ``await``; at the lease's end
  the run is recorded ``lost`` without waiting for it.

Why not redis-py's asyncio client: the Redis backend (backends/redis) is one implementation of
the lease's scripts, replies, retries and fleet record over the blocking client, shared with the
CLI; a second one on the asyncio client would have to be kept identical to it, and a keeper on
the loop would miss its renewals whenever the loop is blocked. A thread per acquire and release
costs microseconds beside a round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Literal, TypeVar

from lockrun.api.block import BlockRun, site_of
from lockrun.api.delivery import TRANSITIONS, Teller
from lockrun.api.ending import NotStarted
from lockrun.api.errors import LeaseLost
from lockrun.api.lock import Lease
from lockrun.api.spec import BlockSpec, OnLost, block_spec

T = TypeVar("T")


class TaskTarget:
    """The task that entered a block, and how a lost lease cancels it (from the watcher's thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[object], name: str) -> None:
        self.loop, self.task, self.name = loop, task, name
        self.lock = threading.Lock()
        self.armed = False
        self.cancelled = False  # our cancel() reached the task

    def arm(self) -> None:
        self.armed = True

    def deliver(self) -> bool:
        with self.lock:
            if not self.armed:
                return True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
            self.loop.call_soon_threadsafe(self._cancel)
        return True

    def _cancel(self) -> None:
        # On the loop, so the task is suspended in an await; the exit disarms before its first await,
        # so that await is in the block.
        with self.lock:
            if not self.armed or self.cancelled:
                return
            self.cancelled = True
        self.task.cancel(f"lockrun: the lease on {self.name!r} was lost")

    def disarm(self) -> None:
        with self.lock:
            self.armed = False


class _TaskRun(BlockRun):
    """A block entered by a task: told by cancelling it."""

    def __init__(self, spec: BlockSpec, site: str, loop: asyncio.AbstractEventLoop, task: asyncio.Task[object]) -> None:
        super().__init__(spec, site, ("task", id(task)), main=False)
        self.task_target = TaskTarget(loop, task, spec.name)

    def teller(self) -> Teller:
        return self.task_target


def _settle(future: asyncio.Future[T], value: T | None, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)  # type: ignore[arg-type]


def _in_thread(loop: asyncio.AbstractEventLoop, fn: Callable[[], T], what: str) -> asyncio.Future[T]:
    """``fn()`` in a thread of its own (not the loop's default executor: a wait for a lock may take
    minutes), as a future of the loop."""
    future: asyncio.Future[T] = loop.create_future()

    def work() -> None:
        try:
            value, error = fn(), None
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            value, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits it any more
            loop.call_soon_threadsafe(_settle, future, value, error)

    threading.Thread(target=work, name=what, daemon=True).start()
    return future


class AsyncLockBlock:
    """``lockrun.lock_async(...)``: an async context manager; each ``async with`` is a run of its own."""

    def __init__(self, spec: BlockSpec, site: str | None = None) -> None:
        self.spec = spec
        self._site = site
        self._runs: list[_TaskRun] = []  # entered and not yet left (touched on the loop only)

    def __repr__(self) -> str:
        return f"lockrun.lock_async({self.spec.name!r}, ttl={self.spec.ttl!r}, wait={self.spec.wait!r})"

    async def __aenter__(self) -> Lease:
        frame = _callers_frame(sys._getframe(1))
        site = self._site or site_of(frame.f_globals.get("__name__"), getattr(frame.f_code, "co_qualname",
                                                                              frame.f_code.co_name))
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("lockrun.lock_async() must be entered in a task")
        run = _TaskRun(self.spec, site, loop, task)
        guard = threading.Lock()
        state = {"abandoned": False, "entered": False}

        def enter() -> None:
            run.enter()
            with guard:
                state["entered"] = True
                abandoned = state["abandoned"]
            if abandoned:  # the task was cancelled meanwhile: the block will not run
                run.leave(NotStarted())

        try:
            await _in_thread(loop, enter, f"lockrun-enter {self.spec.name}")
        except asyncio.CancelledError:
            run.cancel_wait()  # a wait in progress ends at its next look
            with guard:
                state["abandoned"] = True
                entered = state["entered"]
            if entered:  # entered, and the answer had not reached the task yet: given back now
                threading.Thread(target=run.leave, args=(NotStarted(),), daemon=True).start()
            raise
        self._runs.append(run)
        return Lease(run)

    async def __aexit__(self, exc_type: object, exc: BaseException | None, _tb: object) -> Literal[False]:
        run = self._leaving()
        error = _disarmed(run, exc)
        instead = await asyncio.shield(_in_thread(asyncio.get_running_loop(), lambda: run.leave(error),
                                                  f"lockrun-exit {self.spec.name}"))
        if instead is not None:
            raise instead from None
        if error is not exc and isinstance(error, LeaseLost):
            raise error.with_traceback(exc.__traceback__ if exc is not None else None) from None
        return False

    def _leaving(self) -> _TaskRun:
        """The run this task entered last (else the last one entered), no longer entered."""
        mine = [run for run in self._runs if run.owner == ("task", id(asyncio.current_task()))]
        run = (mine or self._runs)[-1]
        self._runs.remove(run)
        return run


def _callers_frame(frame: FrameType) -> FrameType:
    """The user's frame that entered the block: past asyncio's own (``await asyncio.wait_for(
    lock.__aenter__(), 5)`` is entered from the event loop's ``Handle._run``)."""
    found = frame
    while found.f_back is not None and str(found.f_globals.get("__name__", "")).startswith("asyncio"):
        found = found.f_back
    return found


def _disarmed(run: _TaskRun, exc: BaseException | None) -> BaseException | None:
    """The run's delivery disarmed; what the block ended with: ``exc``, or the LeaseLost that our
    cancel of the task (a lost lease) became."""
    target = run.task_target
    target.disarm()  # before any await: no cancel of ours reaches the task after this line
    error = exc
    if target.cancelled:
        uncancel = getattr(run.task_target.task, "uncancel", None)
        if uncancel is not None:  # Python 3.11+: our cancel() is consumed, as asyncio.timeout does
            uncancel()
        if isinstance(exc, asyncio.CancelledError):
            error = run.lost_error()
    return error


TRANSITIONS.update({AsyncLockBlock.__aenter__.__code__, AsyncLockBlock.__aexit__.__code__})


def lock_async(
    name: str, *, ttl: float | str | None = None, wait: float | str = 0, redis_url: str | None = None,
    on_lost: OnLost = "raise",
) -> AsyncLockBlock:
    """``async with lockrun.lock_async("report") as lease:``: :func:`lockrun.lock` for coroutines; a
    lost lease (on_lost="raise") cancels the task and comes out of the block as LeaseLost."""
    return AsyncLockBlock(block_spec(name, ttl, wait, redis_url, on_lost))
