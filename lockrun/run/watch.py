"""The main loop while the command runs: every reason lockrun has to stop it, and when.

    until the command exits, on every wake-up (a signal, the child's exit, the keeper, a deadline):
      a signal forwarded to the command   -> SIGKILL after --kill-after if it is still there
      the lease lost or not renewed in time -> SIGTERM now, SIGKILL before the lease can expire
                                             (--on-lost continue: a note, and it goes on)
      a --replace by another run          -> as a lost lease, whatever --on-lost says
      past --timeout                      -> SIGTERM now, SIGKILL after --kill-after
      past --warn-after                   -> once: the command is slow (on_slow); it goes on
      a SIGKILL due                       -> sent; the backstop is retired
    then, until nothing the command started is left (the drain):
      what it left behind, in its group or not -> SIGTERM now, SIGKILL after --kill-after, or
                                             sooner when the lease says so (the same rules)

Whatever lockrun sends the group also goes to the command's descendants that left it
(strays.py), and orphans re-parented to lockrun are reaped on every wake-up. The keeper thread
only renews; it is this loop, on the main thread, that decides the lease can no longer be
trusted (docs/guarantees.md "What lockrun guarantees, and how": the deadline), so a keeper that hangs or
dies still ends in a stopped command. The loop sleeps on the signal relay's self-pipe
(signals.py) until the next deadline: no CPU while idle. Only the drain, which lasts at most
--kill-after, also wakes up now and then, to look for descendants that exited (a grandchild's
exit wakes its own parent, not lockrun).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lockrun.core.clock import utc_now_iso
from lockrun.core.errors import Report
from lockrun.core.record import Status
from lockrun.run.backstop import Backstop
from lockrun.run.keeper import Keeper
from lockrun.run.outcome import Stop
from lockrun.run.supervisor import Supervisor

#: How often the drain looks again for descendants that exited: from the first, doubling to the last.
DRAIN_POLL_S = (0.005, 0.1)
REPLACED = "another run asked to replace this one (--replace)"


def lease_problem(keeper: Keeper, now: float) -> str | None:
    """Why the lease can no longer be trusted at monotonic time ``now``, or None while it can."""
    if keeper.lost_reason is not None:
        return keeper.lost_reason
    if now >= keeper.must_stop_at:
        silent_for = now - (keeper.expires_at - keeper.lease.ttl)
        why = keeper.last_error or "no renewal succeeded in time"
        return f"no renewal succeeded for {silent_for:.1f}s ({why})"
    return None


def _plural(count: int) -> str:
    return f"{count} process" + ("es" if count != 1 else "")


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
    warn_after: float | None = None,
    on_slow: Callable[[], None] | None = None,
) -> Stop:
    """Wait for the command to exit, stopping it on a lost lease or ``timeout``, then for what it
    left behind to be gone; say why the command was stopped. ``clock`` is the monotonic clock the
    supervisor and the keeper use (a parameter for the unit tests)."""
    signals = supervisor.signals
    timeout_at = clock() + timeout if timeout else None
    # --warn-after: one more deadline of this loop (no thread), met once per command.
    slow_at = clock() + warn_after if warn_after and on_slow is not None else None
    stop_reason: Status | None = None
    lost_note: str | None = None
    escalated_after: int | None = None
    lease_lost = False  # the lease was found lost (or not renewed in time)
    stopped_for_lease = False  # ... and lockrun stopped the command for it (or for a --replace)
    draining = False  # the command has exited; what it left behind is being stopped
    poll = DRAIN_POLL_S[0]
    while True:
        supervisor.reap_orphans()
        if not draining:
            if supervisor.child_exit_pending():
                if not supervisor.tracks_descendants:
                    break
                left = supervisor.command_exited()
                if not left:
                    break
                draining = True
                if supervisor.killed:
                    report("info", f"the command left {_plural(left)} behind; SIGKILL sent")
                else:
                    supervisor.kill_later(clock() + kill_after)
                    report("info", f"the command left {_plural(left)} behind; SIGTERM sent, SIGKILL in "
                                   f"{kill_after:g}s if still running")
        elif supervisor.strays_gone():
            break
        supervisor.adopt_if_due()  # the command's cgroup, once it has run for a moment (cgroup.py)
        now = clock()
        if signals.received and escalated_after is None:
            # A forwarded SIGTERM, SIGINT or SIGHUP asks the command to stop: one that ignores
            # it is killed after --kill-after, so that nothing waits on it forever. What left its
            # group did not get the signal: it gets SIGTERM.
            escalated_after = signals.received[0]
            supervisor.kill_later(now + kill_after)
            supervisor.terminate_strays()
            report("info", f"forwarded signal {escalated_after} to the command; SIGKILL in "
                           f"{kill_after:g}s if it is still running")
        problem = None
        if not lease_lost:
            problem = lease_problem(keeper, now)
            lease_lost = problem is not None
        if problem is not None and on_lost == "continue" and not keeper.preempted:
            lost_note = f"lease lost at {utc_now_iso()}: {problem}"
            report("warn", f"lease on {name!r} lost: {problem}; --on-lost continue: the command goes on")
        elif (problem is not None or keeper.preempted) and not stopped_for_lease:
            # A preemption always stops the command: --on-lost is about a lost lease, and another
            # run is waiting for this one to let go (it asked for exactly that).
            stopped_for_lease = True
            why = problem or keeper.lost_reason or REPLACED
            if draining:
                lost_note = f"lease lost at {utc_now_iso()}: {why}, while stopping what the command left behind"
                report("warn" if keeper.preempted else "error",
                       f"lease on {name!r} lost: {why}; stopping what the command left behind")
            elif stop_reason is None:
                stop_reason = Status.LOST
                if keeper.preempted:
                    report("warn", f"{name!r}: {why}; stopping the command")
                else:
                    report("error", f"lease on {name!r} lost: {why}; stopping the command")
            # Dead before the lease we last renewed can expire, however long --kill-after is.
            supervisor.terminate(kill_at=min(now + kill_after, keeper.kill_deadline()))
        if timeout_at is not None and now >= timeout_at and stop_reason is None and not draining:
            stop_reason = Status.TIMEOUT
            report("error", f"{name!r} ran past --timeout {timeout:g}s; stopping the command")
            supervisor.terminate(kill_at=now + kill_after)
        if slow_at is not None and now >= slow_at and stop_reason is None and not draining and on_slow is not None:
            slow_at = None
            on_slow()
        was_killed = supervisor.killed
        supervisor.kill_if_due()
        if supervisor.killed and not was_killed:
            poll = DRAIN_POLL_S[0]  # what was just SIGKILLed is about to be gone: look again soon
        if supervisor.killed and backstop is not None:
            backstop.suspend()  # SIGKILL is sent: the command cannot outlive the lease any more
        wake_at = [supervisor.kill_at, supervisor.adopt_at]
        if stop_reason is None and not draining:
            wake_at += [timeout_at, slow_at]
        if not lease_lost:  # (a --replace after a loss under --on-lost continue: the keeper wakes the loop)
            wake_at.append(keeper.must_stop_at)
        if draining:
            wake_at.append(now + poll)
            poll = min(poll * 2, DRAIN_POLL_S[1])
        signals.wait(min((t for t in wake_at if t is not None), default=None))
    return Stop(stop_reason, lost_note, escalated_after)
