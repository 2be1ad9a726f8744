"""The fakes themselves: a scenario is only as true as the clock and the model under it."""

from __future__ import annotations

from lockrun.backends.values import LOST, RENEWED, Holder, Lease
from tests.unit.fakes import START, FakeBackend, FakeClock


def test_the_clock_runs_actions_in_time_order_and_never_goes_back(clock: FakeClock) -> None:
    seen: list[tuple[str, float]] = []
    clock.call_at(START + 2, lambda: seen.append(("b", clock.now)))
    clock.call_at(START + 1, lambda: seen.append(("a", clock.now)))
    clock.call_at(START + 2, lambda: seen.append(("c", clock.now)))  # same moment: scheduled later, runs later
    clock.call_at(START + 9, lambda: seen.append(("late", clock.now)))
    clock.advance_to(START + 5)
    assert seen == [("a", START + 1), ("b", START + 2), ("c", START + 2)]
    assert clock.now == START + 5
    clock.advance_to(START + 3)
    assert clock.now == START + 5


def test_the_clock_stops_right_after_the_action_that_was_waited_for(clock: FakeClock) -> None:
    flag: list[bool] = []
    clock.call_at(START + 1, lambda: flag.append(True))
    clock.call_at(START + 1.5, lambda: flag.append(False))
    clock.advance_to(START + 10, until=lambda: bool(flag))
    assert (clock.now, flag) == (START + 1, [True])


def test_the_backend_model_expires_renews_and_fences(clock: FakeClock, backend: FakeBackend) -> None:
    lease = backend.acquire("job", "a", 10.0, {})
    assert isinstance(lease, Lease) and lease.fencing_token == 1
    clock.advance_to(START + 9)
    assert backend.renew(lease, "", None) == RENEWED  # now until START + 19
    clock.advance_to(START + 18.9)
    assert isinstance(backend.acquire("job", "b", 10.0, {}), Holder)
    clock.advance_to(START + 19)
    taken = backend.acquire("job", "b", 10.0, {})
    assert isinstance(taken, Lease) and taken.fencing_token == 2
    assert backend.renew(lease, "", None) == LOST
    assert backend.release(lease) is False
    assert backend.release(taken) is True
    assert backend.locks == {}
