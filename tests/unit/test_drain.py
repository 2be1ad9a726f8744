"""What the command leaves behind, and a preemption: the main loop (watch.py) with the real keeper
and the real supervisor's schedule, on a fake clock, with a simulated command and simulated
descendants outside its process group. Each test states when lockrun signals the group and the
strays, and what the run's outcome is."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable

import pytest

from lockrun.backends.values import Lease
from lockrun.core.errors import ExitCode
from lockrun.core.record import Status
from lockrun.run.descendants import Proc
from lockrun.run.keeper import Keeper, backstop_for
from lockrun.run.outcome import Outcome, Stop, command_outcome
from lockrun.run.strays import Strays
from lockrun.run.watch import watch
from tests.unit.fakes import START, FakeBackend, FakeBackstop, FakeClock, FakeSupervisor, Reports, keep_renewing

TERM, KILL = signal.SIGTERM, signal.SIGKILL


class FakeStrays(Strays):
    """Descendants that left the command's group: each dies ``delay`` after SIGTERM, or only of
    SIGKILL when its delay is None. Records what lockrun sent them, and when."""

    def __init__(self, clock: FakeClock, delays: Iterable[float | None]) -> None:  # no /proc, no cgroup
        self.clock = clock
        self.delays = list(delays)
        self.alive_ones = set(range(len(self.delays)))
        self.sent: list[tuple[float, int]] = []

    def terminate(self, outside_pgid: int | None = None) -> int:
        if not self.alive_ones or any(signum == TERM for _, signum in self.sent):
            return 0
        self.sent.append((round(self.clock.now - START, 6), TERM))
        for index in list(self.alive_ones):
            delay = self.delays[index]
            if delay is not None:
                self.clock.call_at(self.clock.now + delay, self._dies(index))
        return len(self.alive_ones)

    def _dies(self, index: int) -> Callable[[], None]:
        return lambda: self.alive_ones.discard(index)

    def kill(self) -> int:
        if not self.alive_ones:
            return 0
        self.sent.append((round(self.clock.now - START, 6), KILL))
        killed = len(self.alive_ones)
        self.alive_ones.clear()
        return killed

    def alive(self, outside_pgid: int | None = None) -> list[Proc]:
        return [Proc(pid=5000 + index, ppid=1, pgid=5000 + index, state="S", start=index) for index in self.alive_ones]

    def record(self, procs: Iterable[object]) -> None:
        pass

    def gone(self) -> bool:
        return not self.alive_ones


class StraySupervisor(FakeSupervisor):
    """The fake supervisor, with strays: the real drain methods run against :class:`FakeStrays`."""

    def __init__(self, clock: FakeClock, strays: FakeStrays, **kwargs: object) -> None:
        super().__init__(clock, **kwargs)  # type: ignore[arg-type]
        self.leftovers.tracks = True
        self.leftovers._strays = strays
        self.pid = self.pgid = 4242

    def _reap_command(self):  # type: ignore[no-untyped-def]
        assert self.exit is not None
        return self.exit

    def _signal_group(self, signum: int) -> None:
        if self._command_exit is None:  # as the real one: once the leader is reaped, the group id is not used
            super()._signal_group(signum)


class Run:
    """A command started at START under a 30 s lease of "job", with strays; the keeper renews on the fake clock."""

    def __init__(self, clock: FakeClock, strays: Iterable[float | None], *, kill_after: float = 10.0,
                 on_lost: str = "terminate", timeout: float | None = None, exits_at: float | None = None,
                 dies_of: tuple[int, ...] = (TERM, signal.SIGINT, signal.SIGHUP), returncode: int = 0) -> None:
        self.clock, self.kill_after, self.on_lost, self.timeout = clock, kill_after, on_lost, timeout
        self.backend = FakeBackend(clock)
        lease = self.backend.acquire("job", "our-token", 30.0, {})
        assert isinstance(lease, Lease)
        self.strays = FakeStrays(clock, strays)
        self.supervisor = StraySupervisor(clock, self.strays, dies_of=dies_of, exits_at=exits_at,
                                          returncode=returncode)
        self.backstop = FakeBackstop(clock) if on_lost == "terminate" else None
        backstop = self.backstop
        if backstop is not None:
            backstop.arm(backstop_for(lease.sent_at + 30.0, 30.0))
        self.keeper = Keeper(
            self.backend, lease, kill_after=kill_after, call_timeout=5.0, wake=self.supervisor.signals.wake,
            child_pid=lambda: 4242, clock=clock,
            on_renewed=(lambda expires_at: backstop.arm(backstop_for(expires_at, 30.0))) if backstop else None,
        )
        keep_renewing(clock, self.keeper)
        self.reports = Reports()

    def watch(self) -> Stop:
        self.stop = watch(self.supervisor, self.keeper, self.backstop, name="job", timeout=self.timeout,
                          kill_after=self.kill_after, on_lost=self.on_lost, report=self.reports, clock=self.clock)
        self.ended_at = round(self.clock.now - START, 6)
        return self.stop

    def outcome(self) -> Outcome:
        assert self.supervisor.exit is not None
        return command_outcome(self.supervisor.exit, self.stop, preempted=self.keeper.preempted, fencing_token=1,
                               kill_after=self.kill_after)

    @property
    def group(self) -> list[tuple[float, int]]:
        return [(round(at - START, 6), signum) for at, signum in self.supervisor.sent]


def test_a_stray_left_behind_gets_sigterm_when_the_command_exits(clock: FakeClock) -> None:
    run = Run(clock, [0.5], exits_at=START + 5)
    assert run.watch() == Stop(None, None, None)
    assert run.strays.sent == [(5, TERM)]
    assert run.ended_at == pytest.approx(5.5, abs=0.11)  # found gone at the next look (the drain polls)
    assert run.group == []  # the group's leader is reaped: lockrun no longer signals the group id
    assert run.reports == [("info", "the command left 1 process behind; SIGTERM sent, SIGKILL in 10s if still running")]
    assert run.outcome()[:2] == (0, Status.SUCCEEDED)  # the command's own code


def test_a_deaf_stray_is_killed_kill_after_later_and_the_backstop_retired(clock: FakeClock) -> None:
    run = Run(clock, [None, 0.1], exits_at=START + 5, returncode=3)
    run.watch()
    assert run.strays.sent == [(5, TERM), (15, KILL)]
    assert run.ended_at == pytest.approx(15, abs=0.006)  # looked again at once after the SIGKILL
    assert run.backstop is not None and run.backstop.disarmed_at == START + 15
    assert run.outcome()[:2] == (3, Status.FAILED)


def test_the_drain_sleeps_between_looks(clock: FakeClock) -> None:
    run = Run(clock, [None], exits_at=START + 5)
    run.watch()
    # 10 s of drain: a look every 5 ms at first, then every 100 ms at most; no busy loop.
    assert 100 <= len(run.supervisor.relay.waits) <= 130


def test_a_lease_lost_during_the_drain_brings_the_kill_before_its_expiry(clock: FakeClock) -> None:
    run = Run(clock, [None], exits_at=START + 20)
    clock.call_at(START + 1, lambda: run.backend.go_down("Connection refused"))
    stop = run.watch()
    # No renewal after the acquire: stop by 21.9 s, kill by 29.4 s (expiry 30 s - margin), not 20 + 10.
    assert run.strays.sent == [(20, TERM), (29.4, KILL)]
    assert stop.reason is None and stop.lost_note is not None
    assert stop.lost_note.endswith("Connection refused), while stopping what the command left behind")
    assert run.reports.at("error") == ["lease on 'job' lost: no renewal succeeded for 21.9s (Connection refused); "
                                       "stopping what the command left behind"]
    outcome = run.outcome()
    assert (outcome.exit_code, outcome.status, outcome.lease_lost) == (0, Status.SUCCEEDED, True)


def test_timeout_sends_the_strays_sigterm_with_the_group(clock: FakeClock) -> None:
    run = Run(clock, [None], timeout=5.0, kill_after=3.0)
    stop = run.watch()
    assert run.group == [(5, TERM)]  # the command dies of it; its stray does not
    assert run.strays.sent == [(5, TERM), (8, KILL)]  # one SIGTERM each, the kill the timeout scheduled
    assert stop == Stop(Status.TIMEOUT, None, None)
    assert run.outcome()[:2] == (124, Status.TIMEOUT)


def test_a_forwarded_signal_sends_the_strays_sigterm(clock: FakeClock) -> None:
    run = Run(clock, [None], dies_of=())
    run.supervisor.signal_lockrun_at(START + 5, signal.SIGINT)
    stop = run.watch()
    assert run.supervisor.forwarded == [(START + 5, signal.SIGINT)]  # the group gets the signal itself
    assert run.strays.sent == [(5, TERM), (15, KILL)]
    assert run.group == [(15, KILL)]
    assert stop == Stop(None, None, signal.SIGINT)


def test_a_replace_stops_the_command_under_on_lost_continue(clock: FakeClock) -> None:
    run = Run(clock, [], on_lost="continue")
    clock.call_at(START + 15, lambda: run.backend.preempt("job", "newer-run", 40.0))
    stop = run.watch()
    assert run.group == [(20, TERM)]  # at the renewal that found the request
    assert stop.reason == Status.LOST and stop.lost_note is None
    assert run.reports == [("warn", "'job': another run asked to replace this one (--replace); stopping the command")]
    outcome = run.outcome()
    assert (outcome.exit_code, outcome.status) == (ExitCode.LOST, Status.PREEMPTED)


def test_a_replace_after_a_lost_lease_under_on_lost_continue_still_stops_it(clock: FakeClock) -> None:
    run = Run(clock, [], on_lost="continue", dies_of=())
    clock.call_at(START + 1, lambda: run.backend.go_down("Connection refused"))

    def back_and_preempted() -> None:
        run.backend.down = None
        run.backend.preempt("job", "newer-run", 40.0)

    clock.call_at(START + 24, back_and_preempted)
    stop = run.watch()
    # Lost at 21.9 s: --on-lost continue goes on. The keeper still retries; at 24 s a retry finds the
    # request: the command is stopped then, and killed --kill-after later (the lease is long gone).
    assert run.reports.at("warn")[0].endswith("--on-lost continue: the command goes on")
    assert run.group[0][1] == TERM and run.group[0][0] == pytest.approx(24, abs=1.0)
    assert run.group[-1][1] == KILL
    assert run.supervisor.exit is not None
    outcome = command_outcome(run.supervisor.exit, stop, preempted=run.keeper.preempted)
    assert (outcome.exit_code, outcome.status) == (ExitCode.LOST, Status.PREEMPTED)


def test_the_strays_note_joins_the_outcome() -> None:
    from lockrun.run.supervisor import ChildExit

    outcome = command_outcome(ChildExit(0, None), Stop(), strays_note="1 process started by the command outlived it")
    assert (outcome.exit_code, outcome.status, outcome.note) == (
        0, Status.SUCCEEDED, "1 process started by the command outlived it")
