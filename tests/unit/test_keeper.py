"""The lease deadline (keeper.py): measured from the last successful renewal's send, the moment
the command must be stopped, the latest SIGKILL and the backstop; and what each renewal changes."""

from __future__ import annotations

import threading

import pytest

from lockrun.backends.values import Lease
from lockrun.core.errors import BackendUnavailable
from lockrun.run.keeper import Keeper, backstop_for, lease_problem, safety_margin, stop_grace
from tests.unit.fakes import START, FakeBackend, FakeClock


class Harness:
    """A keeper over a lease of "job" taken at START, never started as a thread: the tests call
    :meth:`Keeper.renew_once` where the thread would."""

    def __init__(self, clock: FakeClock, backend: FakeBackend, *, ttl: float = 30.0, kill_after: float = 10.0) -> None:
        lease = backend.acquire("job", "our-token", ttl, {})
        assert isinstance(lease, Lease)
        self.lease = lease
        self.wakes: list[float] = []
        self.woken = threading.Event()  # for the tests that do start the thread
        self.renewed: list[float] = []
        self.keeper = Keeper(backend, lease, kill_after=kill_after, call_timeout=1.0,
                             wake=lambda: self._wake(clock), child_pid=lambda: 777,
                             on_renewed=self.renewed.append, clock=clock)

    def _wake(self, clock: FakeClock) -> None:
        self.wakes.append(clock.now)
        self.woken.set()


def test_safety_margin_is_two_percent_of_the_ttl_and_at_least_50ms() -> None:
    assert safety_margin(30.0) == pytest.approx(0.6)
    assert safety_margin(100.0) == pytest.approx(2.0)
    assert safety_margin(2.5) == 0.05
    assert safety_margin(1.0) == 0.05


def test_the_deadlines_of_a_fresh_lease(clock: FakeClock, backend: FakeBackend) -> None:
    keeper = Harness(clock, backend, ttl=30.0, kill_after=10.0).keeper
    assert keeper.interval == 10.0
    assert keeper.retry_delay == 1.0
    assert stop_grace(10.0, 30.0) == 7.5  # --kill-after 10 s does not fit: capped at TTL/4
    assert keeper.expires_at == START + 30
    assert keeper.kill_deadline() == pytest.approx(START + 29.4)  # expiry - margin (0.6 s)
    assert keeper.must_stop_at == pytest.approx(START + 21.9)  # expiry - margin - grace
    assert backstop_for(keeper.expires_at, 30.0) == pytest.approx(START + 29.7)  # half the margin before expiry
    # In this order: TERM, the latest KILL, the backstop, the expiry.
    assert keeper.must_stop_at < keeper.kill_deadline() < backstop_for(keeper.expires_at, 30.0) < keeper.expires_at


def test_the_worked_example_of_docs_internals(clock: FakeClock, backend: FakeBackend) -> None:
    # docs/internals.md, "The lease deadline arithmetic": --ttl 120 --kill-after 10.
    keeper = Harness(clock, backend, ttl=120.0, kill_after=10.0).keeper
    assert keeper.interval == 40.0
    assert keeper.must_stop_at == pytest.approx(START + 107.6)
    assert keeper.kill_deadline() == pytest.approx(START + 117.6)
    assert backstop_for(keeper.expires_at, 120.0) == pytest.approx(START + 118.8)
    assert keeper.expires_at == START + 120


def test_a_short_kill_after_is_the_grace(clock: FakeClock, backend: FakeBackend) -> None:
    keeper = Harness(clock, backend, ttl=30.0, kill_after=2.0).keeper
    assert keeper.must_stop_at == pytest.approx(START + 27.4)
    assert keeper.kill_deadline() - keeper.must_stop_at == pytest.approx(2.0)


def test_a_one_second_lease(clock: FakeClock, backend: FakeBackend) -> None:
    keeper = Harness(clock, backend, ttl=1.0, kill_after=10.0).keeper
    assert keeper.interval == pytest.approx(1 / 3)
    assert keeper.retry_delay == pytest.approx(0.1)
    assert keeper.must_stop_at == pytest.approx(START + 0.7)  # 1 - 0.05 margin - 0.25 grace
    assert keeper.kill_deadline() == pytest.approx(START + 0.95)
    assert backstop_for(keeper.expires_at, 1.0) == pytest.approx(START + 0.975)


def test_a_renewal_moves_the_deadline_from_the_moment_it_was_sent(clock: FakeClock) -> None:
    backend = FakeBackend(clock, latency=0.4)  # the reply comes 0.4 s after the send
    harness = Harness(clock, backend)
    clock.advance_to(START + 10)
    assert harness.keeper.renew_once() == START + 20  # the next one: TTL/3 after this one's send
    assert clock.now == pytest.approx(START + 10.4)
    keeper = harness.keeper
    assert keeper.expires_at == START + 40  # from the send, not the reply: the server reset it no earlier
    assert keeper.must_stop_at == pytest.approx(START + 31.9)
    assert harness.renewed == [START + 40]  # the backstop is pushed to follow it
    assert backend.calls_of("renew")[0].arg == 777  # the command's pid goes to the holder record
    assert keeper.lost_reason is None and keeper.last_error is None
    assert harness.wakes == []  # a renewal is no news for the main loop


def test_a_failed_renewal_keeps_the_deadline_and_is_retried_soon(clock: FakeClock, backend: FakeBackend) -> None:
    harness = Harness(clock, backend)
    keeper = harness.keeper
    backend.failures["renew"] = [BackendUnavailable("Timeout reading from socket")]
    clock.advance_to(START + 10)
    assert keeper.renew_once() == START + 11  # retry_delay later, not TTL/3
    assert keeper.expires_at == START + 30
    assert keeper.last_error == "Timeout reading from socket"
    assert harness.renewed == []
    assert keeper.lost_reason is None  # only the main loop decides that the lease is gone
    clock.advance_to(START + 11)
    assert keeper.renew_once() == START + 21
    assert keeper.expires_at == START + 41
    assert keeper.last_error is None


def test_a_lock_taken_over_is_a_lost_lease_and_wakes_the_main_loop(clock: FakeClock, backend: FakeBackend) -> None:
    harness = Harness(clock, backend)
    backend.hold("job", token="thief")
    clock.advance_to(START + 10)
    assert harness.keeper.renew_once() is None  # no more renewals
    assert harness.keeper.lost_reason == "the lock was taken over or cleared (its token no longer matches)"
    assert harness.keeper.preempted is False
    assert harness.wakes == [START + 10]
    assert harness.keeper.expires_at == START + 30


def test_a_replace_request_is_a_preempted_lease(clock: FakeClock, backend: FakeBackend) -> None:
    harness = Harness(clock, backend)
    assert backend.preempt("job", "another-run", 40.0)
    clock.advance_to(START + 10)
    assert harness.keeper.renew_once() is None
    assert harness.keeper.preempted is True
    assert harness.keeper.lost_reason == "another run asked to replace this one (--replace)"
    assert harness.wakes == [START + 10]


def test_a_keeper_thread_that_crashes_is_a_lost_lease(clock: FakeClock) -> None:
    class Broken(FakeBackend):
        def renew(self, lease: Lease, heartbeat_at: str, child_pid: int | None) -> str:
            raise RuntimeError("boom")

    backend = Broken(clock)
    harness = Harness(clock, backend)
    clock.advance_to(START + 10)  # the first renewal is due: the thread does not wait
    harness.keeper.start()
    assert harness.woken.wait(10)
    harness.keeper.stop()
    assert harness.keeper.lost_reason == "the lease keeper failed: RuntimeError('boom')"
    assert harness.wakes == [START + 10]


def test_a_keeper_thread_ends_when_the_lease_is_lost(clock: FakeClock, backend: FakeBackend) -> None:
    harness = Harness(clock, backend)
    backend.hold("job", token="thief")
    clock.advance_to(START + 10)
    harness.keeper.start()
    assert harness.woken.wait(10)
    harness.keeper.stop()
    assert [call.method for call in backend.calls_of("renew")] == ["renew"]
    assert harness.keeper.lost_reason is not None


# -- when the main loop calls the lease gone (keeper.lease_problem) -----------------------------------


def test_the_lease_is_trusted_until_must_stop_at(clock: FakeClock, backend: FakeBackend) -> None:
    keeper = Harness(clock, backend).keeper
    assert lease_problem(keeper, START) is None
    assert lease_problem(keeper, keeper.must_stop_at - 0.001) is None
    assert lease_problem(keeper, keeper.must_stop_at) == "no renewal succeeded for 21.9s (no renewal succeeded in time)"


def test_the_silence_is_counted_from_the_last_successful_renewal(clock: FakeClock, backend: FakeBackend) -> None:
    keeper = Harness(clock, backend).keeper
    clock.advance_to(START + 10)
    keeper.renew_once()
    backend.go_down("Connection refused")
    clock.advance_to(START + 20)
    keeper.renew_once()
    assert lease_problem(keeper, START + 31.8) is None
    assert lease_problem(keeper, START + 31.9) == "no renewal succeeded for 21.9s (Connection refused)"


def test_a_lost_reason_wins_before_the_deadline(clock: FakeClock, backend: FakeBackend) -> None:
    keeper = Harness(clock, backend).keeper
    backend.hold("job", token="thief")
    clock.advance_to(START + 10)
    keeper.renew_once()
    assert lease_problem(keeper, START + 10) == "the lock was taken over or cleared (its token no longer matches)"
