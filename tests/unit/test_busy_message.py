"""The busy message (outcome.busy_message): who holds the lock, for how long, until when, and
the command that clears it, for every kind of holder."""

from __future__ import annotations

from typing import Any

from lockrun.backends.values import Holder
from lockrun.core.clock import iso_ago
from lockrun.run.lease_client import LeaseClient
from lockrun.run.outcome import busy_message
from tests.unit.fakes import FakeBackend, FakeClock, Reports


def holder(**fields: Any) -> Holder:
    """web2:4242 has held "nightly" for 125 s, 12.34 s of its lease left; ``fields`` changes that."""
    return Holder(name="nightly", host="web2", pid=4242, run_id="0123456789abcdef", started_at=iso_ago(125),
                  ttl_remaining_s=12.34)._replace(**fields)


def test_a_redis_lease() -> None:
    assert busy_message(holder()) == (
        "lock 'nightly' is busy: held by web2:4242 for 2.1m, run 01234567, lease expires in 12.3s;"
        " if that holder crashed: lockrun unlock nightly")


def test_with_the_backend_named_for_verbose_output() -> None:
    assert busy_message(holder(), "redis redis://db:6379/0").startswith(
        "lock 'nightly' is busy (redis redis://db:6379/0): held by web2:4242 for 2.1m, run 01234567,")


def test_a_kernel_lock_is_freed_by_its_holders_exit() -> None:
    assert busy_message(holder(ttl_remaining_s=None, started_at=iso_ago(3 * 3600))) == (
        "lock 'nightly' is busy: held by web2:4242 for 3.0h, run 01234567; it is freed when that process exits")


def test_every_slot_taken() -> None:
    assert busy_message(holder(slotted=True, ttl_remaining_s=5.0)) == (
        "lock 'nightly' is busy: every --slots slot is taken, e.g. by web2:4242 for 2.1m, run 01234567,"
        " lease expires in 5.0s; if that holder crashed: lockrun unlock nightly")


def test_a_cooling_lock_says_how_long_min_hold_keeps_it() -> None:
    message = busy_message(holder(cooling_until="2026-11-29T09:00:00.000000Z", ttl_remaining_s=42.0))
    assert message == ("lock 'nightly' is busy: its last run is over, but --min-hold keeps it taken for another"
                       " 42.0s; lockrun unlock nightly ends that")


def test_a_malformed_holder_points_at_status_and_a_forced_unlock() -> None:
    message = busy_message(holder(problem="pid: 'x' is not a whole number"))
    assert message == ("lock 'nightly' is busy, and what holds it is malformed (pid: 'x' is not a whole number);"
                       " see lockrun status nightly; lockrun unlock --force nightly clears it")


def test_foreign_data_is_cleared_without_force() -> None:
    message = busy_message(holder(problem="a Redis list, not a lockrun lease", foreign=True))
    assert message.endswith("; see lockrun status nightly; lockrun unlock nightly clears it")


def test_what_is_not_known_reads_as_such() -> None:
    assert busy_message(Holder(name="nightly", ttl_remaining_s=3.0)) == (
        "lock 'nightly' is busy: held by ?:? for -, lease expires in 3.0s;"
        " if that holder crashed: lockrun unlock nightly")


def test_the_message_for_a_holder_read_back_from_the_backend(clock: FakeClock, backend: FakeBackend) -> None:
    backend.hold("nightly", ttl=45.0, host="db-7", pid=31337, run_id="cafebabe" * 4, started_ago=30.0)
    got = LeaseClient(backend, "nightly", 30.0, run_id="r", argv=["x"], report=Reports(), clock=clock).acquire(0.0)
    assert isinstance(got, Holder)
    assert busy_message(got) == ("lock 'nightly' is busy: held by db-7:31337 for 30.0s, run cafebabe, lease expires"
                                 " in 45.0s; if that holder crashed: lockrun unlock nightly")
