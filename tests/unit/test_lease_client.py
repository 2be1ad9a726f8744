"""The lease client's decisions: take the lock, skip, wait, give up, ask a holder to stop,
give back after a lost reply, release (lease_client.py), on a fake backend and a fake clock."""

from __future__ import annotations

import json
import os
import re

import pytest

from lockrun.backends.values import Duplicate, FleetRecord, Holder, Lease, OnceKey
from lockrun.core.errors import BackendUnavailable, ReplicasMissing
from lockrun.run.lease_client import LeaseClient
from tests.unit.fakes import START, Call, FakeBackend, FakeClock, Reports

RUN_ID = "feedc0de" * 4


def client_for(
    backend: FakeBackend, clock: FakeClock, reports: Reports, *, ttl: float = 30.0, once: OnceKey | None = None,
) -> LeaseClient:
    return LeaseClient(backend, "nightly", ttl, run_id=RUN_ID, argv=["backup", "--all"], report=reports,
                       once=once, clock=clock, sleep=clock.sleep)


def acquires(backend: FakeBackend) -> list[object]:
    """The ``last_try`` flag of every acquire, in order."""
    return [call.arg for call in backend.calls_of("acquire")]


def waits(backend: FakeBackend) -> list[object]:
    """The timeout of every wait for a release, in order."""
    return [call.arg for call in backend.calls_of("wait_for_release")]


# -- taking the lock, or not --------------------------------------------------------------------


def test_a_free_lock_is_taken_in_one_try(backend: FakeBackend, clock: FakeClock, reports: Reports) -> None:
    client = client_for(backend, clock, reports)
    got = client.acquire(0.0)
    assert isinstance(got, Lease)
    assert (got.name, got.token, got.fencing_token, got.ttl, got.sent_at) == ("nightly", client.token, 1, 30.0, START)
    assert backend.calls == [Call(START, "acquire", True)]  # the only try is the last one: the fleet counts it
    assert backend.locks["nightly"].token == client.token
    assert reports == []


def test_busy_without_wait_answers_with_the_holder_at_once(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.hold("nightly", ttl=60.0, host="web2", pid=4242)
    got = client_for(backend, clock, reports).acquire(0.0)
    assert isinstance(got, Holder)
    assert (got.host, got.pid, got.token, got.ttl_remaining_s) == ("web2", 4242, "rival-token", 60.0)
    assert backend.methods() == ["acquire"]
    assert acquires(backend) == [True]
    assert clock.now == START  # no waiting, no preempting


def test_wait_takes_the_lock_when_the_holder_releases(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.hold("nightly", ttl=60.0, release_at=START + 4.5)
    readied: list[float] = []
    got = client_for(backend, clock, reports).acquire(30.0, get_ready=lambda: readied.append(clock.now))
    assert isinstance(got, Lease)
    assert got.sent_at == START + 4.5  # woken by the release
    assert got.fencing_token == 2
    # A try, then one wait (the holder's lease outlasts --wait: until the deadline), cut short by
    # the release's wake-up: no try in between.
    assert backend.methods() == ["acquire", "wait_for_release", "acquire"]
    assert acquires(backend) == [False, False]
    assert waits(backend) == [30.0]
    assert readied == [START]  # the launcher is forked while waiting


def test_wait_gives_up_at_its_deadline_and_the_last_try_decides(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.hold("nightly", ttl=60.0)
    got = client_for(backend, clock, reports).acquire(2.5)
    assert isinstance(got, Holder)
    assert clock.now == START + 2.5
    assert [call.at for call in backend.calls_of("acquire")] == [START, START + 2.5]
    assert acquires(backend) == [False, True]  # only the try at the deadline is counted as busy
    assert waits(backend) == [2.5]  # the wait ends at the deadline, not after it


def test_a_deadline_passed_during_a_slow_try_gets_one_last_try_without_waiting(
    clock: FakeClock, reports: Reports,
) -> None:
    backend = FakeBackend(clock, latency=0.6)
    backend.hold("nightly", ttl=60.0)
    got = client_for(backend, clock, reports).acquire(0.5)
    assert isinstance(got, Holder)
    assert backend.methods() == ["acquire", "acquire"]
    assert acquires(backend) == [False, True]
    assert clock.now == pytest.approx(START + 1.2)


def test_a_crashed_holder_is_waited_for_until_its_lease_expires(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.hold("nightly", ttl=0.3)  # nobody will release it: the waiter must not sleep a whole second
    got = client_for(backend, clock, reports).acquire(10.0)
    assert isinstance(got, Lease)
    assert waits(backend) == [0.305]  # the holder's remaining TTL, and 5 ms for the expiry to happen
    assert got.sent_at == pytest.approx(START + 0.305)


def test_a_release_before_the_wait_is_not_missed(clock: FakeClock, reports: Reports) -> None:
    # The holder releases while our busy answer is on its way: the wake-up waits in the list (BLPOP).
    backend = FakeBackend(clock, latency=0.2)
    backend.hold("nightly", ttl=60.0, release_at=START + 0.1)
    got = client_for(backend, clock, reports).acquire(30.0)
    assert isinstance(got, Lease)
    assert got.sent_at == pytest.approx(START + 0.2)  # sent at once: the wait returned without waiting
    assert backend.methods() == ["acquire", "wait_for_release", "acquire"]


def test_a_signal_ends_the_wait_with_the_holder(backend: FakeBackend, clock: FakeClock, reports: Reports) -> None:
    backend.hold("nightly", ttl=60.0)
    backend.signal_at(START + 2.3)
    got = client_for(backend, clock, reports).acquire(30.0, interrupted=lambda: bool(backend.signals))
    assert isinstance(got, Holder)
    assert clock.now == START + 2.3  # the wait ends with the signal, without another try
    assert acquires(backend) == [False]


def test_a_signal_before_the_wait_ends_it_without_waiting(clock: FakeClock, reports: Reports) -> None:
    backend = FakeBackend(clock, latency=0.2)
    backend.hold("nightly", ttl=60.0)
    backend.signal_at(START + 0.1)  # while the busy answer is on its way
    got = client_for(backend, clock, reports).acquire(30.0, interrupted=lambda: bool(backend.signals))
    assert isinstance(got, Holder)
    assert backend.methods() == ["acquire"]  # the busy answer sees the signal: no wait at all
    assert clock.now == pytest.approx(START + 0.2)


def test_a_renewing_holder_costs_one_try_per_lease_not_per_second(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.hold("nightly", ttl=9.0, renewing=True, release_at=START + 20)
    got = client_for(backend, clock, reports).acquire(60.0)
    assert isinstance(got, Lease)
    # Each wait lasts what the holder's lease had left: the renewals (every 3 s) push it on, so a
    # try at its expiry finds it busy again, until the release at 20 s wakes the waiter.
    assert [call.at for call in backend.calls_of("acquire")] == [START, START + 9.005, START + 18.005, START + 20]
    assert waits(backend) == [9.005, 9.0, 9.0]  # 9 s of lease left at each try (renewed at 9 and 18 s)


def test_a_wake_up_that_finds_the_lock_taken_again_waits_for_the_new_holder(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.hold("nightly", ttl=30.0)

    def released_and_taken() -> None:  # another run (one that did not wait) takes the name at once
        assert backend.release(Lease("nightly", "rival-token", 1, 30.0, START))
        backend.hold("nightly", token="quick", ttl=10.0, release_at=START + 5)

    clock.call_at(START + 2, released_and_taken)
    got = client_for(backend, clock, reports).acquire(60.0)
    assert isinstance(got, Lease)
    assert [call.at for call in backend.calls_of("acquire")] == [START, START + 2, START + 5]
    assert waits(backend) == [30.005, 10.005]


def test_get_ready_is_not_called_when_the_lock_is_free(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    readied: list[float] = []
    assert isinstance(client_for(backend, clock, reports).acquire(30.0, get_ready=lambda: readied.append(1)), Lease)
    assert readied == []


# -- --replace ------------------------------------------------------------------------------------


def test_replace_asks_the_holder_once_and_takes_the_lock_when_it_stops(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.hold("nightly", ttl=30.0, host="web2", pid=4242, stops_after=12.0)
    got = client_for(backend, clock, reports).acquire(None, replace=True, kill_after=10.0)
    assert isinstance(got, Lease)
    assert got.sent_at == START + 12
    # Asked once, with the time it may take: the holder's TTL plus --kill-after.
    assert backend.calls_of("preempt") == [Call(START, "preempt", 40.0)]
    assert backend.locks["nightly"].preempted_by is None  # the new lock is ours, not asked to stop
    assert reports == [("info", "asked web2:4242 to stop (--replace)")]
    assert len(backend.calls_of("acquire")) == 2  # no try until the release wakes it


def test_replace_gives_up_after_the_holders_ttl_and_kill_after(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.hold("nightly", ttl=30.0, renewing=True)  # it never stops, and renews
    got = client_for(backend, clock, reports).acquire(None, replace=True, kill_after=10.0)
    assert isinstance(got, Holder)
    assert clock.now == START + 40
    assert len(backend.calls_of("preempt")) == 1
    assert acquires(backend)[-1] is True
    assert acquires(backend).count(True) == 1


def test_replace_with_an_explicit_wait_keeps_that_deadline(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.hold("nightly", ttl=30.0, renewing=True)
    got = client_for(backend, clock, reports).acquire(5.0, replace=True, kill_after=10.0)
    assert isinstance(got, Holder)
    assert clock.now == START + 5
    assert backend.calls_of("preempt") == [Call(START, "preempt", 5.0)]


def test_replace_asks_again_when_another_run_took_the_lock_meanwhile(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.hold("nightly", ttl=30.0, host="web2", pid=1, stops_after=2.0)
    # At 1.5 s another run takes the name (the first one's lease was stolen, say): nobody
    # released it, so nobody is woken; the waiter tries again when the first lease ends.
    clock.call_at(START + 1.5, lambda: backend.hold("nightly", token="third", host="web3", pid=3, stops_after=3.0))
    got = client_for(backend, clock, reports).acquire(None, replace=True, kill_after=10.0)
    assert isinstance(got, Lease)
    assert [(call.at, round(float(str(call.arg)), 3)) for call in backend.calls_of("preempt")] == [(START, 40.0),
                                                                                       (START + 30.005, 9.995)]
    assert reports == [("info", "asked web2:1 to stop (--replace)"), ("info", "asked web3:3 to stop (--replace)")]
    assert got.sent_at == START + 33.005


def test_replace_says_nothing_when_the_holder_is_gone_before_it_is_asked(clock: FakeClock, reports: Reports) -> None:
    backend = FakeBackend(clock, latency=0.1)
    backend.hold("nightly", ttl=30.0, release_at=START + 0.05)  # while the busy answer is on its way
    got = client_for(backend, clock, reports).acquire(None, replace=True)
    assert isinstance(got, Lease)
    assert backend.methods() == ["acquire", "preempt", "wait_for_release", "acquire"]
    assert reports == []


def test_replace_of_a_holder_without_a_recorded_ttl_waits_our_ttl_and_kill_after(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.hold("nightly", ttl=30.0, renewing=True)
    del backend.locks["nightly"].info["ttl_ms"]  # a record without one (someone else's, or an unusable one)
    got = client_for(backend, clock, reports, ttl=8.0).acquire(None, replace=True, kill_after=2.0)
    assert isinstance(got, Holder)
    assert clock.now == START + 10


# -- --once, and a backend that fails ---------------------------------------------------------------


def test_a_once_key_already_done_is_a_duplicate_even_with_wait(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.once_done["nightly-2026-11-29"] = START + 3600
    got = client_for(backend, clock, reports, once=OnceKey("nightly-2026-11-29", 3600)).acquire(30.0)
    assert got == Duplicate("nightly", "nightly-2026-11-29")
    assert backend.methods() == ["acquire"]
    assert "nightly" not in backend.locks


def test_a_successful_release_marks_the_once_key_done_for_the_next_run(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    once = OnceKey("nightly-2026-11-29", 600.0)
    first = client_for(backend, clock, reports, once=once)
    lease = first.acquire(0.0)
    assert isinstance(lease, Lease) and lease.once == once
    first.release(lease, succeeded=True)
    assert backend.once_done == {"nightly-2026-11-29": START + 600}
    assert client_for(backend, clock, reports, once=once).acquire(0.0) == Duplicate("nightly", "nightly-2026-11-29")


def test_a_failed_command_does_not_mark_the_once_key(backend: FakeBackend, clock: FakeClock, reports: Reports) -> None:
    once = OnceKey("k", 600.0)
    client = client_for(backend, clock, reports, once=once)
    lease = client.acquire(0.0)
    assert isinstance(lease, Lease)
    client.release(lease, succeeded=False)
    assert backend.once_done == {}
    assert isinstance(client_for(backend, clock, reports, once=once).acquire(0.0), Lease)


@pytest.mark.parametrize("error", [
    BackendUnavailable("reply lost: connection reset"),
    ReplicasMissing("only 0 of 1 replicas acknowledged the lock", 0, 1),
], ids=["lost-reply", "replicas-missing"])
def test_an_acquire_without_its_reply_gives_back_what_the_token_holds(
    backend: FakeBackend, clock: FakeClock, reports: Reports, error: BackendUnavailable,
) -> None:
    backend.lose_acquire_reply = error
    client = client_for(backend, clock, reports)
    with pytest.raises(BackendUnavailable) as raised:
        client.acquire(30.0)
    assert raised.value is error
    assert raised.value.exit_code == 69  # ExitCode.UNAVAILABLE
    assert backend.calls == [Call(START, "acquire", False), Call(START, "release_token", client.token)]
    assert "nightly" not in backend.locks  # not left stuck for a whole TTL
    assert backend.calls_of("wait_for_release") == []  # an unreachable backend is not waited for


def test_a_give_back_that_fails_too_leaves_the_lease_to_expire(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.lose_acquire_reply = BackendUnavailable("reply lost")
    backend.failures["release_token"] = [BackendUnavailable("still down")]
    with pytest.raises(BackendUnavailable, match="^reply lost$"):  # the acquire's error, not the give-back's
        client_for(backend, clock, reports).acquire(0.0)
    assert backend.methods() == ["acquire", "release_token"]
    assert backend.locks["nightly"].expires_at == START + 30


def test_an_unreachable_backend_fails_the_acquire(backend: FakeBackend, clock: FakeClock, reports: Reports) -> None:
    backend.go_down("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    with pytest.raises(BackendUnavailable, match="Connection refused") as raised:
        client_for(backend, clock, reports).acquire(30.0)
    assert raised.value.exit_code == 69
    assert backend.methods() == ["acquire", "release_token"]  # the give-back is tried, and quietly fails
    assert clock.now == START
    assert reports == []


# -- release -------------------------------------------------------------------------------------


def take(backend: FakeBackend, clock: FakeClock, reports: Reports) -> tuple[LeaseClient, Lease]:
    client = client_for(backend, clock, reports, once=OnceKey("k", 60.0))
    lease = client.acquire(0.0)
    assert isinstance(lease, Lease)
    return client, lease


def test_release_deletes_the_lock_and_says_so(backend: FakeBackend, clock: FakeClock, reports: Reports) -> None:
    client, lease = take(backend, clock, reports)
    record = FleetRecord({"status": "succeeded"})
    client.release(lease, succeeded=True, record=record)
    assert backend.calls[-1] == Call(START, "release", True)
    assert backend.fleet_rows == [record]
    assert "nightly" not in backend.locks
    assert reports == [("info", "released 'nightly'")]


def test_release_of_a_lock_taken_over_says_it_was_no_longer_ours(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    client, lease = take(backend, clock, reports)
    backend.hold("nightly", token="thief")
    client.release(lease)
    assert backend.locks["nightly"].token == "thief"  # compare-and-delete: the other run keeps it
    assert reports == [("info", "'nightly' was no longer ours")]


def test_release_is_retried_with_a_growing_pause(backend: FakeBackend, clock: FakeClock, reports: Reports) -> None:
    client, lease = take(backend, clock, reports)
    backend.failures["release"] = [BackendUnavailable("connection reset"), BackendUnavailable("connection reset")]
    client.release(lease)
    assert [call.at for call in backend.calls_of("release")] == [START, START + 0.05, pytest.approx(START + 0.15)]
    assert clock.sleeps == [0.05, 0.1]
    assert reports == [("info", "released 'nightly'")]


def test_release_that_keeps_failing_warns_when_the_lock_expires(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    client, lease = take(backend, clock, reports)
    backend.failures["release"] = [BackendUnavailable("connection reset")] * 3
    client.release(lease)
    assert len(backend.calls_of("release")) == 3
    assert clock.sleeps[:2] == [0.05, 0.1]
    assert reports == [("warn", "could not release 'nightly' (connection reset); it expires within 30s")]


def test_release_after_a_lost_lease_is_tried_once_quietly(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    client, lease = take(backend, clock, reports)
    backend.go_down("connection reset")
    client.release(lease, lost=True)
    assert len(backend.calls_of("release")) == 1
    assert reports == [("info", "could not release 'nightly' (connection reset); it expires within 30s")]


@pytest.mark.parametrize("lost", [False, True])
def test_a_success_whose_release_fails_warns_that_the_once_key_is_not_marked(
    backend: FakeBackend, clock: FakeClock, reports: Reports, lost: bool,
) -> None:
    client, lease = take(backend, clock, reports)
    backend.go_down("connection reset")
    client.release(lease, lost=lost, succeeded=True)
    assert len(backend.calls_of("release")) == 3  # worth retrying even after a lost lease: the key is at stake
    assert reports == [("warn", "could not release 'nightly' (connection reset); it expires within 30s;"
                                " --once key 'k' was not marked done")]


# -- what the holder record says ---------------------------------------------------------------------


def test_holder_info_describes_this_run(backend: FakeBackend, clock: FakeClock, reports: Reports) -> None:
    client = client_for(backend, clock, reports, ttl=2.5)
    info = client.holder_info()
    assert info["token"] == client.token
    assert info["run_id"] == RUN_ID
    assert info["pid"] == str(os.getpid())
    assert json.loads(info["command"]) == ["backup", "--all"]
    assert info["ttl_ms"] == "2500"
    assert info["child_pid"] == ""
    assert info["started_at"] == info["heartbeat_at"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", info["started_at"])
    held = backend.acquire("nightly", client.token, 2.5, info)
    assert isinstance(held, Lease)
    seen = backend.acquire("nightly", "other", 2.5, {})  # what another run reads back from it
    assert isinstance(seen, Holder)
    assert (seen.run_id, seen.pid, list(seen.command), seen.ttl_ms, seen.problem) == (
        RUN_ID, os.getpid(), ["backup", "--all"], 2500, None)


def test_every_run_has_its_own_random_token(backend: FakeBackend, clock: FakeClock, reports: Reports) -> None:
    tokens = {client_for(backend, clock, reports).token for _ in range(50)}
    assert len(tokens) == 50
    assert all(re.fullmatch(r"[0-9a-f]{32}", token) for token in tokens)


def test_a_long_lease_is_waited_for_in_blocks_no_longer_than_an_idle_connection_lives(
    backend: FakeBackend, clock: FakeClock, reports: Reports,
) -> None:
    backend.hold("nightly", ttl=300.0, release_at=START + 250)
    got = client_for(backend, clock, reports).acquire(3600.0)
    assert isinstance(got, Lease)
    # MAX_BLOCK_S at a time (a proxy may cut a connection idle for longer): a try at each end.
    assert waits(backend) == [120.0, 120.0, pytest.approx(60.005)]
    assert got.sent_at == START + 250


def test_the_time_spent_asking_the_holder_to_stop_is_not_waited_again(clock: FakeClock, reports: Reports) -> None:
    backend = FakeBackend(clock, latency=0.5)
    backend.hold("nightly", ttl=30.0)  # crashed: it will neither stop nor release; its lease ends at 30 s
    got = client_for(backend, clock, reports).acquire(None, replace=True, kill_after=10.0)
    assert isinstance(got, Lease)
    # Its 30 s counted from the busy answer (at 0.5 s), not from the end of the preempt (at 1 s).
    assert waits(backend) == [29.505]
    assert got.sent_at == START + 30.505
