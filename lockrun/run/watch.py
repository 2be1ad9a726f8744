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
from lockrun.run.keeper import Keeper, lease_problem
from lockrun.run.outcome import Stop
from lockrun.run.supervisor import Supervisor

#: How often the drain looks again for descendants that exited: from the first, doubling to the last.
DRAIN_POLL_S = (0.005, 0.1)
REPLACED = "another run asked to replace this one (--replace)"


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
    return _Watch(supervisor, keeper, backstop, name=name, timeout=timeout, kill_after=kill_after, on_lost=on_lost,
                  report=report, clock=clock, warn_after=warn_after, on_slow=on_slow).run()


class _Watch:
    """The state of one :func:`watch`: each wake-up runs the steps of the module's table in order."""

    def __init__(self, supervisor: Supervisor, keeper: Keeper, backstop: Backstop | None, *, name: str,
                 timeout: float | None, kill_after: float, on_lost: str, report: Report, clock: Callable[[], float],
                 warn_after: float | None, on_slow: Callable[[], None] | None) -> None:
        self.supervisor, self.keeper, self.backstop = supervisor, keeper, backstop
        self.name, self.kill_after, self.on_lost, self.report, self.clock = name, kill_after, on_lost, report, clock
        self.timeout, self.timeout_at = timeout, (clock() + timeout if timeout else None)
        # --warn-after: one more deadline of this loop (no thread), met once per command.
        self.slow_at = clock() + warn_after if warn_after and on_slow is not None else None
        self.on_slow = on_slow
        self.stop_reason: Status | None = None
        self.lost_note: str | None = None
        self.escalated_after: int | None = None
        self.lease_lost = False  # the lease was found lost (or not renewed in time)
        self.stopped_for_lease = False  # ... and lockrun stopped the command for it (or for a --replace)
        self.draining = False  # the command has exited; what it left behind is being stopped
        self.poll = DRAIN_POLL_S[0]

    def run(self) -> Stop:
        supervisor = self.supervisor
        while True:
            supervisor.reap_orphans()
            if self._all_gone():
                break
            supervisor.adopt_if_due()  # the command's cgroup, once it has run for a moment (cgroup.py)
            now = self.clock()
            self._escalate_a_forwarded_signal(now)
            self._keep_the_lease(now)
            self._keep_the_timeout(now)
            self._notice_slowness(now)
            self._kill_if_due()
            supervisor.signals.wait(self._next_wake(now))
        return Stop(self.stop_reason, self.lost_note, self.escalated_after)

    def _all_gone(self) -> bool:
        """The command and everything it left behind are gone; on the command's exit, the drain begins."""
        supervisor = self.supervisor
        if self.draining:
            return supervisor.strays_gone()
        if not supervisor.child_exit_pending():
            return False
        if not supervisor.tracks_descendants:
            return True
        left = supervisor.command_exited()
        if not left:
            return True
        self.draining = True
        if supervisor.killed:
            self.report("info", f"the command left {_plural(left)} behind; SIGKILL sent")
        else:
            supervisor.kill_later(self.clock() + self.kill_after)
            self.report("info", f"the command left {_plural(left)} behind; SIGTERM sent, SIGKILL in "
                                f"{self.kill_after:g}s if still running")
        return False

    def _escalate_a_forwarded_signal(self, now: float) -> None:
        # A forwarded SIGTERM, SIGINT or SIGHUP asks the command to stop: one that ignores it is
        # killed after --kill-after, so that nothing waits on it forever. What left its group did
        # not get the signal: it gets SIGTERM.
        received = self.supervisor.signals.received
        if not received or self.escalated_after is not None:
            return
        self.escalated_after = received[0]
        self.supervisor.kill_later(now + self.kill_after)
        self.supervisor.terminate_strays()
        self.report("info", f"forwarded signal {self.escalated_after} to the command; SIGKILL in "
                            f"{self.kill_after:g}s if it is still running")

    def _keep_the_lease(self, now: float) -> None:
        keeper = self.keeper
        problem = self._newly_lost(now)
        if problem is not None and self.on_lost == "continue" and not keeper.preempted:
            self.lost_note = f"lease lost at {utc_now_iso()}: {problem}"
            self.report("warn", f"lease on {self.name!r} lost: {problem}; --on-lost continue: the command goes on")
        elif (problem is not None or keeper.preempted) and not self.stopped_for_lease:
            # A preemption always stops the command: --on-lost is about a lost lease, and another
            # run is waiting for this one to let go (it asked for exactly that).
            self._stop_the_command(problem, now)

    def _stop_the_command(self, problem: str | None, now: float) -> None:
        keeper = self.keeper
        self.stopped_for_lease = True
        self._stop_for_the_lease(problem or keeper.lost_reason or REPLACED)
        # Dead before the lease we last renewed can expire, however long --kill-after is.
        self.supervisor.terminate(kill_at=min(now + self.kill_after, keeper.kill_deadline()))

    def _newly_lost(self, now: float) -> str | None:
        """Why the lease is lost, the first time it is found so; None before, and after."""
        if self.lease_lost:
            return None
        problem = lease_problem(self.keeper, now)
        self.lease_lost = problem is not None
        return problem

    def _stop_for_the_lease(self, why: str) -> None:
        """Say why the command (or what it left behind) is stopped for the lease, and note it."""
        preempted = self.keeper.preempted
        if self.draining:
            self.lost_note = f"lease lost at {utc_now_iso()}: {why}, while stopping what the command left behind"
            self.report("warn" if preempted else "error",
                        f"lease on {self.name!r} lost: {why}; stopping what the command left behind")
        elif self.stop_reason is None:
            self.stop_reason = Status.LOST
            if preempted:
                self.report("warn", f"{self.name!r}: {why}; stopping the command")
            else:
                self.report("error", f"lease on {self.name!r} lost: {why}; stopping the command")

    def _running_unstopped(self) -> bool:
        return self.stop_reason is None and not self.draining

    def _keep_the_timeout(self, now: float) -> None:
        if self.timeout_at is not None and now >= self.timeout_at and self._running_unstopped():
            self.stop_reason = Status.TIMEOUT
            self.report("error", f"{self.name!r} ran past --timeout {self.timeout:g}s; stopping the command")
            self.supervisor.terminate(kill_at=now + self.kill_after)

    def _notice_slowness(self, now: float) -> None:
        if self.slow_at is not None and now >= self.slow_at and self._running_unstopped() and self.on_slow:
            self.slow_at = None
            self.on_slow()

    def _kill_if_due(self) -> None:
        supervisor = self.supervisor
        was_killed = supervisor.killed
        supervisor.kill_if_due()
        if supervisor.killed and not was_killed:
            self.poll = DRAIN_POLL_S[0]  # what was just SIGKILLed is about to be gone: look again soon
        if supervisor.killed and self.backstop is not None:
            self.backstop.suspend()  # SIGKILL is sent: the command cannot outlive the lease any more

    def _next_wake(self, now: float) -> float | None:
        wake_at = [self.supervisor.kill_at, self.supervisor.adopt_at]
        if self._running_unstopped():
            wake_at += [self.timeout_at, self.slow_at]
        if not self.lease_lost:  # (a --replace after a loss under --on-lost continue: the keeper wakes the loop)
            wake_at.append(self.keeper.must_stop_at)
        if self.draining:
            wake_at.append(now + self.poll)
            self.poll = min(self.poll * 2, DRAIN_POLL_S[1])
        return min((t for t in wake_at if t is not None), default=None)
