"""``--retry`` and ``--jitter``: which outcomes are tried again, how long the pauses are, and the
waits themselves (docs/operating.md "Retries and jitter").

    retry_due    an attempt that failed, timed out or was killed by a signal lockrun did not
                 forward is tried again, while attempts are left; never after busy, duplicate,
                 lost, preempted, unavailable, an operator's signal or 126/127
    pause_s      --retry-delay before the first retry, doubling after, capped at 10 minutes (or
                 --retry-delay itself when longer), plus up to 10% random spread
    pause        the wait between attempts, with the lease kept: the keeper renews it, the main
                 loop watches for a lost lease, a --replace and a signal, any of which ends the run
    jitter       the random sleep before the first try for the lock; a signal ends it at once

Pure but for the waits, which sleep on the signal relay's self-pipe (signals.py): no CPU while
they last, and a signal wakes them at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from lockrun.core.defaults import RETRY_DELAY_CAP_S
from lockrun.core.record import Status
from lockrun.run.keeper import Keeper, lease_problem
from lockrun.run.outcome import Outcome
from lockrun.run.signals import SignalRelay

#: Outcomes an attempt may be retried after (the contract's failed, timeout, killed).
RETRIED = frozenset({Status.FAILED, Status.TIMEOUT, Status.KILLED})
#: The command could not be executed (126) or found (127): another attempt would not do better.
NOT_RUNNABLE_EXITS = frozenset({126, 127})
#: The random spread of a pause: up to this fraction longer than the schedule says, never shorter.
SPREAD = 0.1


def retry_due(outcome: Outcome, attempt: int, retries: int, signals_received: bool) -> bool:
    """Whether attempt number ``attempt`` (1, 2, ...) is followed by another under ``--retry retries``.

    ``signals_received``: a signal reached lockrun (and was forwarded): an operator's stop,
    never retried, even when the command then ended as if it had failed on its own.
    """
    if attempt > retries or signals_received or outcome.status not in RETRIED:
        return False
    if outcome.lease_lost or outcome.lock_lost_at_release:
        return False  # the lock is not this run's any more: another attempt would run without it
    return outcome.command_exit not in NOT_RUNNABLE_EXITS


def _random() -> float:
    import random  # only a run that pauses or jitters pays for the import (no new start-up import)

    return random.random()


def pause_s(attempt: int, delay: float, rand: Callable[[], float] = _random) -> float:
    """The pause after attempt number ``attempt`` (1: before the first retry): ``delay`` doubled
    for each further one, capped at RETRY_DELAY_CAP_S (or at ``delay`` when it is longer), and
    up to SPREAD more at random, so that runs that failed together do not retry together."""
    cap = max(delay, RETRY_DELAY_CAP_S)
    scheduled = min(cap, delay * 2.0 ** min(attempt - 1, 64))
    return scheduled * (1.0 + SPREAD * rand())


class PauseEnd(NamedTuple):
    """Why a pause ended before its time (None from :func:`pause`: it ran its course)."""

    status: Status  # ERROR for a signal, LOST, or PREEMPTED
    signum: int | None = None
    why: str = ""


def pause(
    seconds: float, keeper: Keeper, signals: SignalRelay, clock: Callable[[], float] = time.monotonic,
) -> PauseEnd | None:
    """Wait ``seconds`` with the lease kept; end early on a signal, a lost lease or a ``--replace``."""
    until = clock() + seconds
    while True:
        if signals.received:
            return PauseEnd(Status.ERROR, signals.received[0])
        now = clock()
        if keeper.preempted:
            return PauseEnd(Status.PREEMPTED, why=keeper.lost_reason or "another run asked to replace this one")
        problem = lease_problem(keeper, now)
        if problem is not None:
            return PauseEnd(Status.LOST, why=problem)
        if now >= until:
            return None
        signals.wait(min(until, keeper.must_stop_at))


def jitter(bound: float, signals: SignalRelay, rand: Callable[[], float] = _random) -> float:
    """Sleep a random time in [0, ``bound``), or until a signal comes; the time slept."""
    started = time.monotonic()
    until = started + bound * rand()
    while not signals.received and time.monotonic() < until:
        signals.wait(until)
    return time.monotonic() - started
