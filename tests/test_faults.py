"""Faults: Redis unreachable, silent, killed, paused, restarted; the lock stolen.

The promise under test: the command never outlives the lease it last renewed.
Each command here appends a wall-clock timestamp to a file every 20 ms; after
the fault, the last timestamp must come before fault time + TTL.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import free_port, history, run_lockrun, spawn_lockrun, wait_until

PY = sys.executable

TICKER = (
    "import signal, sys, time\n"
    "if len(sys.argv) > 2: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "with open(sys.argv[1], 'a', buffering=1) as f:\n"
    "    while True:\n"
    "        f.write(f'{time.time()!r}\\n')\n"
    "        time.sleep(0.02)\n"
)


def last_tick(path) -> float:
    return float(path.read_text().split()[-1])


def start_ticker(env, tmp_path, *extra, ttl="2", ignore_term=False):
    ticks = tmp_path / "ticks"
    argv = ["-n", "tick", "--ttl", ttl, *extra, "--", PY, "-c", TICKER, str(ticks)]
    if ignore_term:
        argv.append("ignore-term")
    proc = spawn_lockrun(env, *argv, stderr=subprocess.PIPE)
    wait_until(lambda: ticks.exists() and len(ticks.read_text().split()) > 3, what="the command to tick")
    return proc, ticks


def finish(proc, timeout=30) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


# --- unreachable before the run --------------------------------------------------------------


def test_unreachable_redis_is_69_and_the_command_does_not_run(env, tmp_path):
    env["LOCKRUN_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    ran = tmp_path / "ran"
    started = time.monotonic()
    result = run_lockrun(env, "-n", "u", "--", "touch", str(ran))
    assert result.returncode == 69
    assert time.monotonic() - started < 10
    assert not ran.exists()
    assert result.stderr.count("\n") == 1 and "unavailable" in result.stderr
    assert history(env, "u")[0]["status"] == "unavailable"


def test_missing_unix_socket_is_69(env, tmp_path):
    env["LOCKRUN_REDIS_URL"] = f"unix://{tmp_path}/nothing.sock"
    assert run_lockrun(env, "-n", "u", "--", "true").returncode == 69


def test_server_that_accepts_but_never_answers_is_69_in_bounded_time(env, tmp_path):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes the handshake; nobody ever reads
        env["LOCKRUN_REDIS_URL"] = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        ran = tmp_path / "ran"
        started = time.monotonic()
        result = run_lockrun(env, "-n", "u", "--ttl", "5", "--", "touch", str(ran), timeout=60)
        took = time.monotonic() - started
    assert result.returncode == 69
    assert took < 10
    assert not ran.exists()


def test_paused_redis_is_69_in_bounded_time(env, redis_server, tmp_path):
    redis_server.pause()
    try:
        started = time.monotonic()
        result = run_lockrun(env, "-n", "u", "--", "true", timeout=60)
        assert result.returncode == 69
        assert time.monotonic() - started < 15  # default TTL 60 s: each call bounded to 5 s
    finally:
        redis_server.resume()


# --- lost while running ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "pause", "restart"])
def test_lease_lost_stops_the_command_before_the_lease_can_expire(env, redis_server, tmp_path, fault):
    proc, ticks = start_ticker(env, tmp_path, ttl="2")
    fault_at = time.time()
    if fault == "kill":
        redis_server.kill()
    elif fault == "pause":
        redis_server.pause()
    else:
        redis_server.restart()
    try:
        code, err = finish(proc)
        assert code == 76, err
        assert last_tick(ticks) < fault_at + 2.0
        assert err.count("\n") == 1 and "lease on 'tick' lost" in err
    finally:
        if fault == "pause":
            redis_server.resume()
    if fault != "kill":
        assert history(env, "tick")[0]["status"] == "lost"


@pytest.mark.slow
def test_command_ignoring_sigterm_is_killed_before_the_lease_expires(env, redis_server, tmp_path):
    # --kill-after is longer than the lease: the SIGKILL must come from the lease deadline.
    proc, ticks = start_ticker(env, tmp_path, "--kill-after", "30", ttl="2", ignore_term=True)
    fault_at = time.time()
    redis_server.pause()
    try:
        code, _ = finish(proc)
        assert code == 76
        assert last_tick(ticks) < fault_at + 2.0
    finally:
        redis_server.resume()
    row = history(env, "tick")[0]
    assert (row["status"], row["signal"]) == ("lost", signal.SIGKILL)


@pytest.mark.slow
def test_stolen_lock_stops_the_command_and_is_not_released_by_us(env, redis_server, tmp_path):
    proc, ticks = start_ticker(env, tmp_path, ttl="3")
    client = redis_server.client()
    client.set("lockrun:{tick}:lock", "thief", px=60000)
    stolen_at = time.time()
    code, err = finish(proc)
    assert code == 76 and "taken over or cleared" in err
    assert last_tick(ticks) < stolen_at + 3.0
    assert client.get("lockrun:{tick}:lock") == b"thief"  # compare-and-delete left it alone


@pytest.mark.slow
def test_deleted_lock_is_a_lost_lease(env, redis_server, tmp_path):
    proc, ticks = start_ticker(env, tmp_path, ttl="3")
    redis_server.client().delete("lockrun:{tick}:lock")
    code, _ = finish(proc)
    assert code == 76


@pytest.mark.slow
def test_on_lost_continue_lets_the_command_finish(env, redis_server, tmp_path):
    flag = tmp_path / "started"
    proc = spawn_lockrun(
        env, "-n", "cont", "--ttl", "1", "--on-lost", "continue", "--", "sh", "-c", f"touch {flag}; sleep 2; exit 7",
        stderr=subprocess.PIPE,
    )
    wait_until(flag.exists, what="the command")
    redis_server.client().set("lockrun:{cont}:lock", "thief")
    code, err = finish(proc)
    assert code == 7
    assert err.count("\n") == 1 and "--on-lost continue" in err  # warned once
    row = history(env, "cont")[0]
    assert row["status"] == "failed" and "lease lost" in row["note"]


@pytest.mark.slow
def test_a_stopped_lockrun_cannot_let_its_command_outlive_the_lease(any_env, tmp_path):
    """lockrun SIGSTOPped while its command runs: nothing renews, nothing in lockrun can act,
    yet its backstop timer kills it at the lease's end, and the command dies with it."""
    proc, ticks = start_ticker(any_env, tmp_path, ttl="2")
    proc.send_signal(signal.SIGSTOP)
    stopped = time.time()
    try:
        wait_until(lambda: time.time() - last_tick(ticks) > 1.0, timeout=20, what="the command to be stopped")
        assert last_tick(ticks) < stopped + 2.0  # the lease was last renewed before the stop
    finally:
        proc.send_signal(signal.SIGCONT)
    code, _ = finish(proc)
    assert code == -signal.SIGKILL  # killed by its own timer while stopped
    row = history(any_env, "tick")[0]
    assert row["status"] == "abandoned" and row["fencing_token"] >= 1


@pytest.mark.slow
def test_a_stopped_lockrun_under_on_lost_continue_leaves_its_command_alone(env, tmp_path):
    proc, ticks = start_ticker(env, tmp_path, "--on-lost", "continue", ttl="1")
    proc.send_signal(signal.SIGSTOP)
    stopped = time.time()
    try:
        wait_until(lambda: last_tick(ticks) > stopped + 2.0, what="the command to run on past the lease")
    finally:
        proc.send_signal(signal.SIGCONT)
    proc.send_signal(signal.SIGTERM)  # forwarded: the ticker dies of it
    code, _ = finish(proc)
    assert code == 128 + signal.SIGTERM


@pytest.mark.slow
def test_short_redis_blip_does_not_lose_the_lease(env, redis_server, tmp_path):
    """A pause shorter than the retry budget is ridden out by the keeper's retries."""
    flag = tmp_path / "started"
    proc = spawn_lockrun(env, "-n", "blip", "--ttl", "3", "--", "sh", "-c", f"touch {flag}; sleep 4",
                         stderr=subprocess.PIPE)
    client = redis_server.client()
    wait_until(lambda: client.hget("lockrun:{blip}:info", "child_pid"), what="the first renewal (at TTL/3)")
    redis_server.pause()
    time.sleep(1.0)  # the fault itself lasts a second: the second renewal falls inside it
    redis_server.resume()
    code, err = finish(proc)
    assert (code, err) == (0, "")


def test_configured_timeouts_bound_calls_and_are_capped_by_the_lease(env, tmp_path):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        env["LOCKRUN_REDIS_URL"] = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        config = tmp_path / "t.toml"
        env["LOCKRUN_CONFIG"] = str(config)
        config.write_text("socket_timeout = 0.3\nconnect_timeout = 0.3\n")
        started = time.monotonic()
        assert run_lockrun(env, "-n", "t", "--ttl", "60", "--", "true").returncode == 69
        quick = time.monotonic() - started
        config.write_text("socket_timeout = 30\n")  # above TTL/3: capped to 1 s for --ttl 3
        started = time.monotonic()
        assert run_lockrun(env, "-n", "t", "--ttl", "3", "--", "true").returncode == 69
        capped = time.monotonic() - started
    assert quick < 4  # the default for --ttl 60 would be 5 s per call
    assert capped < 6
    config.write_text("socket_timeout = -1\n")
    assert run_lockrun(env, "-n", "t", "--", "true").returncode == 78
