"""The public objects of a block (docs/python.md): ``lockrun.lock()``, the context manager it returns
(entered any number of times, by any number of threads, each time a run: block.py), and the
``Lease`` the block gets."""

from __future__ import annotations

import os
import sys
import threading
from typing import Literal

from lockrun.api.block import BlockRun, site_of
from lockrun.api.delivery import TRANSITIONS
from lockrun.api.errors import LeaseLost
from lockrun.api.spec import BlockSpec, OnLost, block_spec


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

    def __exit__(self, exc_type: object, exc: BaseException | None, _tb: object) -> Literal[False]:
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
