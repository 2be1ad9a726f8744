"""`--wait` on Redis through real processes: waiters sleep in BLPOP until a release wakes one
or the holder's lease could have expired, one connection each, and try again only then."""

from __future__ import annotations

import signal
import sys
import time

from tests.conftest import run_lockrun, spawn_lockrun, wait_until
from tests.test_run import INTERVAL, intervals

PY = sys.executable


def calls(client, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def blocked(client) -> int:
    return int(client.info("clients")["blocked_clients"])


def test_twenty_four_waiters_all_run_in_turn_without_overlap(env, redis_server, tmp_path):
    client = redis_server.client()
    client.set("lockrun:{turns}:lock", "the-test", px=120000)
    log = tmp_path / "log"
    cmd = ["-n", "turns", "-w", "240", "--", PY, "-c", INTERVAL, str(log), "0.02"]
    waiters = [spawn_lockrun(env, *cmd) for _ in range(24)]
    try:
        wait_until(lambda: blocked(client) == 24, timeout=120, what="all 24 waiters blocked in BLPOP")
        # One connection per waiter (and ours): the waiting and the acquires share it.
        assert int(client.info("clients")["connected_clients"]) == 24 + 1
        client.delete("lockrun:{turns}:lock")
        client.lpush("lockrun:{turns}:wake", "1")  # what a release pushes
        assert [w.wait(240) for w in waiters] == [0] * 24
    finally:
        for w in waiters:
            w.kill()
            w.wait(30)
    assert len(intervals(log)) == 24


def test_each_hand_over_costs_a_waiter_at_most_three_commands(env, redis_server):
    client = redis_server.client()
    client.set("lockrun:{count}:lock", "the-test", px=120000)
    client.config_resetstat()
    waiters = [spawn_lockrun(env, "-n", "count", "-w", "240", "--", "true") for _ in range(20)]
    wait_until(lambda: blocked(client) == 20, timeout=120, what="all 20 waiters blocked in BLPOP")
    time.sleep(2.5)  # waiting costs nothing: the version before sent an EVAL and a BLPOP a second each
    assert (calls(client, "eval"), calls(client, "blpop")) == (20, 20)  # one busy try and one BLPOP each
    client.delete("lockrun:{count}:lock")
    client.lpush("lockrun:{count}:wake", "1")
    assert [w.wait(240) for w in waiters] == [0] * 20
    # Each: its busy try, its BLPOP, the acquire it was woken for; and its own release.
    waiting = calls(client, "eval") + calls(client, "blpop") - 20
    assert waiting <= 3 * 20, (calls(client, "eval"), calls(client, "blpop"))


def test_a_sigkilled_holder_wakes_nobody_and_its_lease_hands_over_at_expiry(env, redis_server, tmp_path):
    client = redis_server.client()
    flag = tmp_path / "holding"
    holder = spawn_lockrun(env, "-n", "dead", "--ttl", "3", "--", "sh", "-c", f"touch {flag}; sleep 60")
    wait_until(flag.exists, what="the holder's command")
    ran = tmp_path / "ran"
    waiter = spawn_lockrun(env, "-n", "dead", "-w", "60", "--", "touch", str(ran))
    wait_until(lambda: blocked(client) == 1, what="the waiter blocked in BLPOP")
    client.config_resetstat()
    holder.send_signal(signal.SIGKILL)  # no release, no wake-up: its watchdog kills the command
    holder.wait(30)
    killed_at = time.monotonic()
    assert waiter.wait(60) == 0
    took = time.monotonic() - killed_at
    assert ran.exists()
    assert took <= 3 + 2  # at the lease's end (at most its TTL after the kill), not at --wait's
    # Asleep until then: the acquire that took the lock, its renewals, its release; no polling.
    assert calls(client, "blpop") == 0
    assert calls(client, "eval") <= 3


def test_a_wait_gives_up_at_its_deadline(env, redis_server):
    client = redis_server.client()
    client.set("lockrun:{late}:lock", "the-test", px=60000)
    client.config_resetstat()
    started = time.monotonic()
    result = run_lockrun(env, "-n", "late", "-w", "2", "--", "true")
    took = time.monotonic() - started
    assert result.returncode == 75
    assert 2.0 <= took < 2.0 + 3.0  # the BLPOP ends at the deadline, then one last try decides
    assert (calls(client, "eval"), calls(client, "blpop")) == (2, 1)


def test_a_signal_ends_a_long_wait_at_once(env, redis_server):
    client = redis_server.client()
    client.set("lockrun:{sig}:lock", "the-test", px=120000)  # a lease that outlasts the test
    waiter = spawn_lockrun(env, "-n", "sig", "-w", "100", "--", "true")
    wait_until(lambda: blocked(client) == 1, what="the waiter blocked in BLPOP")
    sent_at = time.monotonic()
    waiter.send_signal(signal.SIGTERM)
    assert waiter.wait(30) == 128 + signal.SIGTERM
    assert time.monotonic() - sent_at < 10  # not at the end of the holder's lease (120 s)
    wait_until(lambda: blocked(client) == 0, what="its BLPOP to end with its connection")
    assert client.get("lockrun:{sig}:lock") == b"the-test"  # nothing taken on the way out
