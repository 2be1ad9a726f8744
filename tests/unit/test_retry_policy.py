"""Which attempts --retry tries again, the pauses between them, and how a --retry run's fleet
entries carry attempt and first_run_id (docs/operating.md "Retries and jitter")."""

from __future__ import annotations

from typing import Any

import pytest

from lockrun.backends.redis.record_format import decode_event, event_pairs
from lockrun.core.record import Status, row_from_fields
from lockrun.run.outcome import Outcome
from lockrun.run.retry import pause_s, retry_due


def outcome(status: Status, command_exit: int | None = 1, **extra: Any) -> Outcome:
    return Outcome(exit_code=command_exit or 0, status=status, command_exit=command_exit, **extra)


@pytest.mark.parametrize("status", [Status.FAILED, Status.TIMEOUT, Status.KILLED])
def test_failed_timeout_and_killed_are_retried_while_attempts_are_left(status: Status) -> None:
    assert retry_due(outcome(status), attempt=1, retries=2, signals_received=False)
    assert retry_due(outcome(status), attempt=2, retries=2, signals_received=False)
    assert not retry_due(outcome(status), attempt=3, retries=2, signals_received=False)
    assert not retry_due(outcome(status), attempt=1, retries=0, signals_received=False)


@pytest.mark.parametrize("status", [Status.SUCCEEDED, Status.BUSY, Status.DUPLICATE, Status.LOST, Status.PREEMPTED,
                                    Status.UNAVAILABLE, Status.ERROR])
def test_other_outcomes_are_never_retried(status: Status) -> None:
    assert not retry_due(outcome(status), attempt=1, retries=5, signals_received=False)


def test_an_operators_signal_a_lost_lease_and_126_127_are_never_retried() -> None:
    assert not retry_due(outcome(Status.KILLED, None, signal=15), 1, 5, signals_received=True)
    assert not retry_due(outcome(Status.FAILED, 1, lease_lost=True), 1, 5, signals_received=False)
    assert not retry_due(outcome(Status.FAILED, 127), 1, 5, signals_received=False)
    assert not retry_due(outcome(Status.FAILED, 126), 1, 5, signals_received=False)
    assert retry_due(outcome(Status.FAILED, 125), 1, 5, signals_received=False)


def test_pauses_double_up_to_ten_minutes_with_a_little_spread() -> None:
    assert [pause_s(n, 10, rand=lambda: 0.0) for n in (1, 2, 3, 6, 7, 100)] == [10, 20, 40, 320, 600, 600]
    assert pause_s(1, 10, rand=lambda: 0.999) == pytest.approx(10.999)
    assert pause_s(3, 3600, rand=lambda: 0.0) == 3600  # a longer --retry-delay is its own cap
    assert pause_s(1, 0) == 0


def test_fleet_entries_of_a_retry_run_carry_attempt_and_first_run_id() -> None:
    first: dict[str, Any] = {"run_id": "a" * 32, "status": "failed", "attempt": 1, "first_run_id": "a" * 32}
    later: dict[str, Any] = {"run_id": "b" * 32, "status": "succeeded", "attempt": 2, "first_run_id": "a" * 32}
    plain: dict[str, Any] = {"run_id": "c" * 32, "status": "succeeded", "attempt": None, "first_run_id": None}
    assert event_pairs(first)[-4:] == ["a", "1", "F", ""]  # the first attempt's own id is ``r``
    assert event_pairs(later)[-4:] == ["a", "2", "F", "a" * 32]
    assert "a" not in event_pairs(plain)[::2] and "F" not in event_pairs(plain)[::2]
    for row in (first, later):
        pairs = event_pairs(row)
        decoded = decode_event("1-0", dict(zip(pairs[::2], pairs[1::2], strict=True)), {})
        read = row_from_fields("job", decoded)
        assert (read["attempt"], read["first_run_id"]) == (row["attempt"], "a" * 32)
    pairs = event_pairs(plain)
    read = row_from_fields("job", decode_event("1-0", dict(zip(pairs[::2], pairs[1::2], strict=True)), {}))
    assert (read["attempt"], read["first_run_id"]) == (None, None)
    hostile = row_from_fields("job", {"status": "failed", "attempt": "lots", "first_run_id": b"\xff" * 5000})
    assert hostile["attempt"] is None and len(hostile["first_run_id"]) <= 4096
