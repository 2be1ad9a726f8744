"""The kill schedule: the main loop (watch.py) with the real keeper and the real supervisor's
schedule, on a fake clock, with a simulated command. Each test states when lockrun must
send SIGTERM and SIGKILL, and what the run's outcome is (outcome.py)."""

from __future__ import annotations

import signal

import pytest

from lockrun.backends.values import Lease
from lockrun.core.errors import BackendUnavailable, ExitCode
from lockrun.core.record import Status
from lockrun.run.keeper import Keeper, backstop_for
from lockrun.run.outcome import Outcome, Stop, command_outcome
from lockrun.run.supervisor import ChildExit
from lockrun.run.watch import watch
from tests.unit.fakes import START, FakeBackend, FakeBackstop, FakeClock, FakeSupervisor, Reports, keep_renewing

TERM, KILL, INT = signal.SIGTERM, signal.SIGKILL, signal.SIGINT
IGNORES_TERM: tuple[int, ...] = ()


class Run:
    """A command started at START under a 30 s lease of "job", its keeper renewing on the fake clock."""

    def __init__(
        self, clock: FakeClock, *, ttl: float = 30.0, kill_after: float = 10.0, on_lost: str = "terminate",
        timeout: float | None = None, dies_of: tuple[int, ...] = (TERM, INT, signal.SIGHUP),
        exit_delay: float = 0.0, exits_at: float | None = None, returncode: int = 0,
    ) -> None:
        self.clock, self.kill_after, self.on_lost, self.timeout = clock, kill_after, on_lost, timeout
        self.backend = FakeBackend(clock)
        lease = self.backend.acquire("job", "our-token", ttl, {})
        assert isinstance(lease, Lease)
        self.lease = lease
        self.supervisor = FakeSupervisor(clock, dies_of=dies_of, exit_delay=exit_delay, exits_at=exits_at,
                                         returncode=returncode)
        self.backstop = FakeBackstop(clock) if on_lost == "terminate" else None
        backstop = self.backstop
        if backstop is not None:
            backstop.arm(backstop_for(lease.sent_at + ttl, ttl))
        self.keeper = Keeper(
            self.backend, lease, kill_after=kill_after, call_timeout=5.0, wake=self.supervisor.signals.wake,
            child_pid=lambda: 4242, clock=clock,
            on_renewed=(lambda expires_at: backstop.arm(backstop_for(expires_at, ttl))) if backstop else None,
        )
        keep_renewing(clock, self.keeper)
        self.reports = Reports()

    def watch(self) -> Stop:
        return watch(self.supervisor, self.keeper, self.backstop, name="job", timeout=self.timeout,
                     kill_after=self.kill_after, on_lost=self.on_lost, report=self.reports, clock=self.clock)

    def outcome(self, stop: Stop) -> Outcome:
        assert self.supervisor.exit is not None
        return command_outcome(self.supervisor.exit, stop, preempted=self.keeper.preempted, fencing_token=1,
                               kill_after=self.kill_after)

    @property
    def sent(self) -> list[tuple[float, int]]:
        """What lockrun sent to the command's group, relative to the start."""
        return [(round(at - START, 6), signum) for at, signum in self.supervisor.sent]

    def renewals(self) -> list[float]:
        return [round(call.at - START, 6) for call in self.backend.calls_of("renew")]


def test_a_healthy_run_is_left_alone_and_the_loop_sleeps(clock: FakeClock) -> None:
    run = Run(clock, exits_at=START + 95, returncode=0)
    stop = run.watch()
    assert stop == Stop(None, None, None)
    assert run.sent == []
    assert run.renewals() == [10, 20, 30, 40, 50, 60, 70, 80, 90]
    assert run.supervisor.exited_at == START + 95
    assert run.backstop is not None
    assert run.backstop.armed_for[-1] == pytest.approx(START + 90 + 29.7)  # pushed by every renewal
    assert run.backstop.disarmed_at is None  # the runner retires it once the group is reaped
    assert len(run.supervisor.relay.waits) <= 10  # it wakes at deadlines, not in a busy loop
    assert run.reports == []
    assert run.outcome(stop)[:2] == (0, Status.SUCCEEDED)


def test_no_renewal_at_all_stops_the_command_before_the_lease_can_expire(clock: FakeClock) -> None:
    run = Run(clock, dies_of=IGNORES_TERM)
    clock.call_at(START + 1, lambda: run.backend.go_down("Connection refused"))
    stop = run.watch()
    # TERM when only the margin and the grace (TTL/4 here) are left; KILL at expiry - margin.
    assert run.sent == [(21.9, TERM), (29.4, KILL)]
    assert run.renewals()[:3] == [10, 11, 12]  # retried every TTL/10, at most a second
    assert run.backstop is not None
    assert run.backstop.armed_for == [pytest.approx(START + 29.7)]  # never pushed: no renewal succeeded
    assert run.backstop.disarmed_at == pytest.approx(START + 29.4)  # retired once SIGKILL is sent
    assert stop == Stop(Status.LOST, None, None)
    assert run.reports.at("error") == [
        "lease on 'job' lost: no renewal succeeded for 21.9s (Connection refused); stopping the command"]
    outcome = run.outcome(stop)
    assert (outcome.exit_code, outcome.status, outcome.signal, outcome.lease_lost) == (76, Status.LOST, 9, True)


def test_the_deadline_follows_the_last_successful_renewal(clock: FakeClock) -> None:
    run = Run(clock, exit_delay=1.0)  # dies a second after SIGTERM
    clock.call_at(START + 15, lambda: run.backend.go_down("Connection refused"))
    stop = run.watch()
    assert run.renewals()[:3] == [10, 20, 21]
    assert run.sent == [(31.9, TERM)]  # the renewal sent at 10 s was the last to succeed
    assert run.supervisor.exited_at == pytest.approx(START + 32.9)
    assert stop == Stop(Status.LOST, None, None)
    assert run.reports.at("error") == [
        "lease on 'job' lost: no renewal succeeded for 21.9s (Connection refused); stopping the command"]
    outcome = run.outcome(stop)
    assert (outcome.exit_code, outcome.status, outcome.signal) == (76, Status.LOST, 15)


def test_a_short_kill_after_spaces_term_and_kill_by_it(clock: FakeClock) -> None:
    run = Run(clock, kill_after=1.0, dies_of=IGNORES_TERM)
    clock.call_at(START + 1, lambda: run.backend.go_down("Connection refused"))
    run.watch()
    assert run.sent == [(28.4, TERM), (29.4, KILL)]


def test_a_stolen_lock_stops_the_command_at_once(clock: FakeClock) -> None:
    run = Run(clock, dies_of=IGNORES_TERM)
    clock.call_at(START + 12, lambda: run.backend.hold("job", token="thief"))
    stop = run.watch()
    # Noticed at the renewal at 20 s: TERM then, KILL --kill-after later (well before 39.4 s).
    assert run.sent == [(20, TERM), (30, KILL)]
    assert stop == Stop(Status.LOST, None, None)
    assert run.reports.at("error") == ["lease on 'job' lost: the lock was taken over or cleared (its token no longer"
                                       " matches); stopping the command"]


def test_a_lock_lost_late_in_the_lease_is_killed_before_the_lease_can_expire(clock: FakeClock) -> None:
    run = Run(clock, dies_of=IGNORES_TERM)
    clock.call_at(START + 5, lambda: run.backend.go_down("Connection refused"))

    def back_but_stolen() -> None:
        run.backend.down = None
        run.backend.hold("job", token="thief")

    clock.call_at(START + 20.5, back_but_stolen)
    run.watch()
    # Lost at the retry at 21 s: KILL at expiry - margin (29.4 s), not 21 + --kill-after.
    assert run.renewals()[-2:] == [20, 21]
    assert run.sent == [(21, TERM), (29.4, KILL)]


def test_a_replace_request_stops_the_command_and_reads_preempted(clock: FakeClock) -> None:
    run = Run(clock)
    clock.call_at(START + 15, lambda: run.backend.preempt("job", "newer-run", 40.0))
    stop = run.watch()
    assert run.sent == [(20, TERM)]
    assert run.reports == [("warn", "'job': another run asked to replace this one (--replace); stopping the command")]
    outcome = run.outcome(stop)
    assert (outcome.exit_code, outcome.status) == (ExitCode.LOST, Status.PREEMPTED)


def test_timeout_sends_term_then_kill_after_kill_after(clock: FakeClock) -> None:
    run = Run(clock, timeout=5.0, kill_after=3.0, dies_of=IGNORES_TERM)
    stop = run.watch()
    assert run.sent == [(5, TERM), (8, KILL)]
    assert run.backstop is not None and run.backstop.disarmed_at == START + 8
    assert stop == Stop(Status.TIMEOUT, None, None)
    assert run.reports.at("error") == ["'job' ran past --timeout 5s; stopping the command"]
    outcome = run.outcome(stop)
    assert (outcome.exit_code, outcome.status, outcome.command_exit, outcome.signal, outcome.note) == (
        124, Status.TIMEOUT, None, 9, None)


def test_timeout_of_a_command_that_obeys_term(clock: FakeClock) -> None:
    run = Run(clock, timeout=5.0, kill_after=3.0, exit_delay=0.5)
    stop = run.watch()
    assert run.sent == [(5, TERM)]
    assert run.supervisor.exited_at == START + 5.5
    assert run.outcome(stop)[:2] == (124, Status.TIMEOUT)


def test_a_lost_lease_after_a_timeout_brings_the_kill_closer_without_a_second_term(clock: FakeClock) -> None:
    run = Run(clock, timeout=20.0, kill_after=10.0, dies_of=IGNORES_TERM)
    clock.call_at(START + 1, lambda: run.backend.go_down("Connection refused"))
    stop = run.watch()
    # The timeout schedules KILL at 30 s; the lease problem at 21.9 s brings it to 29.4 s.
    assert run.sent == [(20, TERM), (29.4, KILL)]
    assert stop == Stop(Status.TIMEOUT, None, None)  # the first reason is the run's
    assert run.reports.at("error") == ["'job' ran past --timeout 20s; stopping the command"]


def test_a_timeout_never_pushes_a_scheduled_kill_back(clock: FakeClock) -> None:
    run = Run(clock, timeout=25.0, kill_after=10.0, dies_of=IGNORES_TERM)
    clock.call_at(START + 1, lambda: run.backend.go_down("Connection refused"))
    stop = run.watch()
    assert run.sent == [(21.9, TERM), (29.4, KILL)]  # the timeout at 25 s changes nothing
    assert stop == Stop(Status.LOST, None, None)


def test_a_forwarded_signal_is_followed_by_kill_after_kill_after(clock: FakeClock) -> None:
    run = Run(clock, dies_of=IGNORES_TERM)
    run.supervisor.signal_lockrun_at(START + 5, TERM)
    stop = run.watch()
    assert run.supervisor.forwarded == [(START + 5, TERM)]
    assert run.sent == [(15, KILL)]  # lockrun sends no TERM of its own
    assert stop == Stop(None, None, TERM)
    assert run.reports == [("info", "forwarded signal 15 to the command; SIGKILL in 10s if it is still running")]
    outcome = run.outcome(stop)
    assert (outcome.exit_code, outcome.status, outcome.note) == (
        137, Status.KILLED, "killed --kill-after 10s after signal 15 was forwarded")


def test_a_forwarded_signal_that_ends_the_command(clock: FakeClock) -> None:
    run = Run(clock)
    run.supervisor.signal_lockrun_at(START + 5, INT)
    stop = run.watch()
    assert run.sent == []
    assert stop == Stop(None, None, INT)
    outcome = run.outcome(stop)
    assert (outcome.exit_code, outcome.status, outcome.signal, outcome.note) == (130, Status.KILLED, 2, None)


def test_a_second_forwarded_signal_does_not_push_the_kill_back(clock: FakeClock) -> None:
    run = Run(clock, dies_of=IGNORES_TERM)
    run.supervisor.signal_lockrun_at(START + 5, TERM)
    run.supervisor.signal_lockrun_at(START + 12, signal.SIGHUP)
    stop = run.watch()
    assert run.sent == [(15, KILL)]
    assert stop.escalated_after == TERM


def test_a_timeout_after_a_forwarded_signal_keeps_the_earlier_kill(clock: FakeClock) -> None:
    run = Run(clock, timeout=8.0, dies_of=IGNORES_TERM)
    run.supervisor.signal_lockrun_at(START + 5, TERM)
    stop = run.watch()
    assert run.sent == [(8, TERM), (15, KILL)]  # not 18: a KILL is never pushed back
    assert stop == Stop(Status.TIMEOUT, None, TERM)
    outcome = run.outcome(stop)
    assert (outcome.exit_code, outcome.status, outcome.note) == (
        124, Status.TIMEOUT, "killed --kill-after 10s after signal 15 was forwarded")


def test_a_lost_lease_after_a_forwarded_signal_keeps_the_earlier_kill(clock: FakeClock) -> None:
    run = Run(clock, dies_of=IGNORES_TERM)
    run.supervisor.signal_lockrun_at(START + 5, TERM)
    clock.call_at(START + 8, lambda: run.backend.hold("job", token="thief"))
    stop = run.watch()
    assert run.sent == [(10, TERM), (15, KILL)]
    assert stop == Stop(Status.LOST, None, TERM)


def test_a_forwarded_signal_after_a_lost_lease_does_not_push_the_kill_back(clock: FakeClock) -> None:
    run = Run(clock, dies_of=IGNORES_TERM)
    clock.call_at(START + 1, lambda: run.backend.go_down("Connection refused"))
    run.supervisor.signal_lockrun_at(START + 25, TERM)
    stop = run.watch()
    assert run.sent == [(21.9, TERM), (29.4, KILL)]  # not 35: the lease's deadline stands
    assert stop == Stop(Status.LOST, None, TERM)


def test_on_lost_continue_lets_the_command_run_and_notes_it(clock: FakeClock) -> None:
    run = Run(clock, on_lost="continue", exits_at=START + 50, returncode=0)
    clock.call_at(START + 1, lambda: run.backend.go_down("Connection refused"))
    stop = run.watch()
    assert run.sent == []
    assert run.supervisor.exited_at == START + 50
    assert stop.reason is None and stop.escalated_after is None
    assert stop.lost_note is not None
    assert stop.lost_note.startswith("lease lost at ")
    assert stop.lost_note.endswith(": no renewal succeeded for 21.9s (Connection refused)")
    assert run.reports == [("warn", "lease on 'job' lost: no renewal succeeded for 21.9s (Connection refused);"
                                    " --on-lost continue: the command goes on")]
    assert len(run.supervisor.relay.waits) <= 35  # once lost, the lease's deadline no longer wakes it
    outcome = run.outcome(stop)
    assert (outcome.exit_code, outcome.status, outcome.note, outcome.lease_lost) == (
        0, Status.SUCCEEDED, stop.lost_note, True)


def test_a_failed_renewal_that_is_retried_in_time_changes_nothing(clock: FakeClock) -> None:
    run = Run(clock, exits_at=START + 50)
    run.backend.failures["renew"] = [_unavailable()]
    stop = run.watch()
    assert run.renewals() == [10, 11, 21, 31, 41]
    assert run.sent == []
    assert stop == Stop(None, None, None)


def test_a_command_that_exits_before_the_first_renewal(clock: FakeClock) -> None:
    run = Run(clock, exits_at=START + 0.5, returncode=3)
    stop = run.watch()
    assert run.renewals() == []
    assert run.outcome(stop)[:3] == (3, Status.FAILED, 3)


def test_the_child_exit_reported_by_the_supervisor() -> None:
    assert ChildExit(returncode=0, signal=None).shell_code == 0
    assert ChildExit(returncode=3, signal=None).shell_code == 3
    assert ChildExit(returncode=None, signal=9).shell_code == 137
    assert ChildExit(returncode=None, signal=15).shell_code == 143


def _unavailable() -> BackendUnavailable:
    return BackendUnavailable("Timeout reading from socket")


def test_warn_after_is_one_more_deadline_met_once_and_never_a_stop(clock: FakeClock) -> None:
    run = Run(clock, exits_at=START + 95, returncode=0)
    slow_at: list[float] = []
    stop = watch(run.supervisor, run.keeper, run.backstop, name="job", timeout=None, kill_after=10.0,
                 on_lost="terminate", report=run.reports, clock=clock, warn_after=25.0,
                 on_slow=lambda: slow_at.append(round(clock() - START, 6)))
    assert stop == Stop(None, None, None) and run.sent == []
    assert slow_at == [25]  # woken for it (not at the next renewal, 30), and once
    assert len(run.supervisor.relay.waits) <= 11


def test_warn_after_past_the_timeout_says_nothing(clock: FakeClock) -> None:
    run = Run(clock, timeout=20.0, dies_of=(TERM,), exit_delay=1.0)
    slow: list[float] = []
    stop = watch(run.supervisor, run.keeper, run.backstop, name="job", timeout=20.0, kill_after=10.0,
                 on_lost="terminate", report=run.reports, clock=clock, warn_after=20.5,
                 on_slow=lambda: slow.append(clock()))
    assert stop.reason == Status.TIMEOUT and slow == []  # being stopped is not being slow
