"""The main loop while the command runs: every reason lockrun has to stop it, and when.

    until the command exits, on every wake-up (a signal, the child's exit, the keeper, a deadline):
      a signal forwarded to the command   -> SIGKILL after --kill-after if it is still there
      the lease lost or not renewed in time -> SIGTERM now, SIGKILL before the lease can expire
                                             (--on-lost continue: a note, and it goes on)
      past --timeout                      -> SIGTERM now, SIGKILL after --kill-after
      a SIGKILL due                       -> sent; the backstop is retired

The keeper thread only renews; it is this loop, on the main thread, that decides the lease
can no longer be trusted (README "What lockrun guarantees, and how": the deadline), so a
keeper that hangs or dies still ends in a stopped command. The loop sleeps on the signal
relay's self-pipe (signals.py) until the next deadline: no CPU while idle.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lockrun.backstop import Backstop
from lockrun.clock import utc_now_iso
from lockrun.errors import Report
from lockrun.keeper import Keeper
from lockrun.outcome import Stop
from lockrun.record import Status
from lockrun.supervisor import Supervisor


def lease_problem(keeper: Keeper, now: float) -> str | None:
    """Why the lease can no longer be trusted at monotonic time ``now``, or None while it can."""
    if keeper.lost_reason is not None:
        return keeper.lost_reason
    if now >= keeper.must_stop_at:
        silent_for = now - (keeper.expires_at - keeper.lease.ttl)
        why = keeper.last_error or "no renewal succeeded in time"
        return f"no renewal succeeded for {silent_for:.1f}s ({why})"
    return None


def watch(
    supervisor: Supervisor,
    keeper: Keeper,
    backstop: Backstop | None,
    *,
    name: str,
    timeout: float | None,
    kill_after: float,
    on_lost: str,
    report: Report,
    clock: Callable[[], float] = time.monotonic,
) -> Stop:
    """Wait for the command to exit, stopping it on a lost lease or ``timeout``; say why it was stopped.
    ``clock`` is the monotonic clock the supervisor and the keeper use (a parameter for the unit tests)."""
    signals = supervisor.signals
    timeout_at = clock() + timeout if timeout else None
    stop_reason: Status | None = None
    lost_note: str | None = None
    escalated_after: int | None = None
    lease_lost = False
    while not supervisor.child_exit_pending():
        now = clock()
        if signals.received and escalated_after is None:
            # A forwarded SIGTERM, SIGINT or SIGHUP asks the command to stop: one that ignores
            # it is killed after --kill-after, so that nothing waits on it forever.
            escalated_after = signals.received[0]
            supervisor.kill_later(now + kill_after)
            report("info", f"forwarded signal {escalated_after} to the command; SIGKILL in "
                           f"{kill_after:g}s if it is still running")
        problem = None if lease_lost else lease_problem(keeper, now)
        if problem is not None:
            lease_lost = True
            if on_lost == "terminate":
                if stop_reason is None:
                    stop_reason = Status.LOST
                    if keeper.preempted:
                        report("warn", f"{name!r}: {problem}; stopping the command")
                    else:
                        report("error", f"lease on {name!r} lost: {problem}; stopping the command")
                # Dead before the lease we last renewed can expire, however long --kill-after is.
                supervisor.terminate(kill_at=min(now + kill_after, keeper.kill_deadline()))
            else:
                lost_note = f"lease lost at {utc_now_iso()}: {problem}"
                report("warn", f"lease on {name!r} lost: {problem}; --on-lost continue: the command goes on")
        if timeout_at is not None and now >= timeout_at and stop_reason is None:
            stop_reason = Status.TIMEOUT
            report("error", f"{name!r} ran past --timeout {timeout:g}s; stopping the command")
            supervisor.terminate(kill_at=now + kill_after)
        supervisor.kill_if_due()
        if supervisor.killed and backstop is not None:
            backstop.disarm()  # SIGKILL is sent: the command cannot outlive the lease any more
        wake_at = [supervisor.kill_at]
        if stop_reason is None:
            wake_at.append(timeout_at)
        if not lease_lost:
            wake_at.append(keeper.must_stop_at)
        signals.wait(min((t for t in wake_at if t is not None), default=None))
    return Stop(stop_reason, lost_note, escalated_after)
