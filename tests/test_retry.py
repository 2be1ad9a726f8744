"""--retry, --retry-delay, --jitter and --success-exit (docs/operating.md "Retries and jitter"),
through real lockrun processes on both backends."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from tests.conftest import assert_one_line, history, run_lockrun, spawn_lockrun, wait_until
from tests.test_notify import Receiver

# Fails on its first two runs, succeeds on the third: the counter file counts them.
FAILS_TWICE = 'n=$(cat "$1" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$1"; [ $n -ge 3 ]'


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


def lock_state(env: dict, name: str) -> dict:
    result = run_lockrun(env, "status", "--json", name)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["locks"][0]


def retrying(env: dict, name: str) -> dict:
    """Wait until ``name``'s holder pauses between attempts; its status entry."""
    found: dict = {}

    def paused() -> bool:
        found.update(lock_state(env, name))
        return found["state"] == "retrying"

    wait_until(paused, timeout=30, what=f"{name} retrying")
    return found


def test_a_command_that_fails_twice_then_succeeds_is_three_attempts_under_one_lock(any_env, receiver, tmp_path):
    counter = tmp_path / "count"
    result = run_lockrun(any_env, "-n", "flaky", "--retry", "3", "--retry-delay", "0.2", "--notify", receiver.url,
                         "--notify-on", "failed,succeeded", "--once", "batch-7", "--ping", f"{receiver.url}/ping",
                         "--",
                         "sh", "-c", FAILS_TWICE, "sh", str(counter))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    rows = history(any_env, "flaky")[::-1]
    assert [row["attempt"] for row in rows] == [1, 2, 3]
    assert [row["status"] for row in rows] == ["failed", "failed", "succeeded"]
    assert {row["first_run_id"] for row in rows} == {rows[0]["run_id"]}
    assert len({row["run_id"] for row in rows}) == 3
    assert len({row["fencing_token"] for row in rows}) == 1  # the same lock, never taken again
    assert rows[1]["started_at"] >= rows[0]["ended_at"] and rows[2]["started_at"] >= rows[1]["ended_at"]
    # one page per job: the notification describes the last attempt only
    (payload,) = [json.loads(r["body"]) for r in receiver.requests if not r["path"].startswith("/ping")]
    assert payload["status"] == "succeeded" and payload["run_id"] == rows[2]["run_id"] and payload["attempt"] == 3
    # one start ping and one success ping, paired by the first attempt's run id
    pings = sorted(path for path in receiver.paths() if path.startswith("/ping"))
    assert pings == sorted([f"/ping/start?rid={rows[0]['run_id']}", f"/ping?rid={rows[0]['run_id']}"])
    assert counter.read_text().strip() == "3"
    # only the success marked --once done: the same key again is a duplicate
    assert run_lockrun(any_env, "-n", "flaky", "--once", "batch-7", "--", "false").returncode == 0
    assert history(any_env, "flaky")[0]["status"] == "duplicate"


def test_the_lock_is_kept_through_the_pause_and_sigterm_ends_it_at_once(any_env):
    proc = spawn_lockrun(any_env, "-n", "kept", "--ttl", "3", "--retry", "2", "--retry-delay", "60", "--", "false")
    try:
        lock = retrying(any_env, "kept")
        assert lock["attempt"] == 2 and lock["retry_at"] > lock["heartbeat_at"]
        # The attempt's final row is written once the pause has begun (while the keeper renews):
        # on the local backend, whose LAST RUN is the ledger's, it may come a moment after.
        lock = wait_until(lambda: (state := lock_state(any_env, "kept"))["last_run"] and state,
                          what="the first attempt's row")
        assert lock["last_run"]["status"] == "failed" and lock["last_run"]["attempt"] == 1
        time.sleep(3.5)  # longer than the TTL: the keeper renews the lease through the pause
        assert lock_state(any_env, "kept")["state"] == "retrying"
        table = run_lockrun(any_env, "status", "kept").stdout
        assert "retrying (attempt 2 in " in table
        busy = run_lockrun(any_env, "-v", "-n", "kept", "--", "true")
        assert busy.returncode == 75 and "between --retry attempts (attempt 2 at " in busy.stderr
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 128 + signal.SIGTERM
        assert time.monotonic() - started < 5  # at once, not after the 60 s pause
    finally:
        proc.kill()
        proc.wait()
    rows = [row for row in history(any_env, "kept") if row["status"] != "busy"]
    assert [(row["attempt"], row["status"]) for row in rows] == [(2, "error"), (1, "failed")]
    assert "interrupted by signal 15 during the --retry pause, before attempt 2" in rows[0]["error"]
    assert rows[0]["first_run_id"] == rows[1]["run_id"] and rows[0]["exit_status"] == 143
    assert lock_state(any_env, "kept")["state"] == "free"


def test_a_replace_during_the_pause_ends_the_whole_run(any_env):
    proc = spawn_lockrun(any_env, "-n", "swap", "--retry", "3", "--retry-delay", "60", "--", "false",
                         stderr=subprocess.PIPE)
    try:
        retrying(any_env, "swap")
        assert run_lockrun(any_env, "-n", "swap", "--replace", "--", "true", timeout=60).returncode == 0
        _, said = proc.communicate(timeout=30)
        assert proc.returncode == 76
    finally:
        proc.kill()
        proc.communicate()
    mine = [row for row in history(any_env, "swap") if row["attempt"] is not None]
    assert [(row["attempt"], row["status"]) for row in mine] == [(2, "preempted"), (1, "failed")]
    # Replaced, said as such: not a lease "lost … taken over or cleared"
    assert said == "lockrun: 'swap': replaced by --replace during the --retry pause before attempt 2\n"
    assert mine[0]["note"] == "replaced by --replace during the --retry pause before attempt 2"


@pytest.mark.parametrize("command", [["no-such-command-lockrun"], ["sh", "-c", "exit 127"], ["sh", "-c", "exit 126"]])
def test_126_and_127_are_never_retried(any_env, command):
    result = run_lockrun(any_env, "-n", "missing", "--retry", "3", "--retry-delay", "0", "--", *command)
    assert result.returncode in (126, 127)
    assert [row["attempt"] for row in history(any_env, "missing")] == [1]


def test_a_forwarded_sigterm_is_an_operators_stop_never_retried(any_env):
    proc = spawn_lockrun(any_env, "-n", "stopped", "--retry", "3", "--retry-delay", "0", "--", "sleep", "30")
    try:
        wait_until(lambda: any(row["status"] == "running" and row["fencing_token"]
                               for row in history(any_env, "stopped")), what="the command running")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    (row,) = history(any_env, "stopped")
    assert row["status"] == "killed" and row["attempt"] == 1 and row["signal"] == signal.SIGTERM


def test_timeout_is_per_attempt_and_retried(any_env):
    started = time.monotonic()
    result = run_lockrun(any_env, "-n", "slow", "--retry", "1", "--retry-delay", "0", "--timeout", "0.5",
                         "--kill-after", "1", "--", "sleep", "30")
    assert result.returncode == 124 and time.monotonic() - started < 20
    rows = history(any_env, "slow")
    assert [(row["attempt"], row["status"]) for row in rows] == [(2, "timeout"), (1, "timeout")]


def test_slots_and_min_hold_after_the_last_attempt(any_env):
    result = run_lockrun(any_env, "-n", "sem", "--slots", "2", "--retry", "1", "--retry-delay", "0", "--", "false")
    assert result.returncode == 1
    assert [row["attempt"] for row in history(any_env, "sem")] == [2, 1]
    result = run_lockrun(any_env, "-n", "held", "--min-hold", "30", "--retry", "1", "--retry-delay", "0", "--",
                         "false")
    assert result.returncode == 1
    rows = history(any_env, "held")
    assert [row["attempt"] for row in rows] == [2, 1]
    assert "--min-hold" in (rows[0]["note"] or "") and "--min-hold" not in (rows[1]["note"] or "")
    assert lock_state(any_env, "held")["state"] == "cooling"


def test_a_sigterm_during_the_jitter_ends_the_run_at_once_and_records_it(any_env):
    proc = spawn_lockrun(any_env, "-n", "spread", "--jitter", "24h", "--", "true")
    try:
        wait_until(lambda: any(row["status"] == "running" for row in history(any_env, "spread")),
                   what="the row running")
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    (row,) = history(any_env, "spread")
    assert row["status"] == "error" and "during --jitter, before the first try for the lock" in row["error"]
    assert row["waited_s"] is None and row["fencing_token"] is None


def test_the_wait_starts_after_the_jitter(any_env):
    for _ in range(10):  # until the jitter slept long enough to tell (P(never) = 0.3 ** 10)
        result = run_lockrun(any_env, "-v", "-n", "after", "--jitter", "1", "--wait", "5", "--", "true")
        assert result.returncode == 0
        slept = float(result.stderr.split("--jitter: slept ")[1].split("s ")[0])
        assert 0 <= slept < 1
        if slept > 0.3:
            break
    row = history(any_env, "after")[0]
    assert row["waited_s"] < slept - 0.2  # the jitter is not part of the wait for the lock
    assert row["attempt"] is None and row["first_run_id"] is None  # no --retry: nothing of it recorded


def test_success_exit_24_counts_as_success_and_marks_once_done(any_env, receiver):
    result = run_lockrun(any_env, "-n", "rsync", "--once", "day-1", "--success-exit", "24", "--retry", "2",
                         "--ping", receiver.url, "--", "sh", "-c", "exit 24")
    assert result.returncode == 0 and result.stderr == ""
    (row,) = history(any_env, "rsync")
    assert row["status"] == "succeeded" and row["exit_code"] == 24 and row["exit_status"] == 0
    assert [path.split("?")[0] for path in receiver.paths()] == ["/start", "/"]  # a success ping
    again = run_lockrun(any_env, "-n", "rsync", "--once", "day-1", "--", "false")
    assert again.returncode == 0 and history(any_env, "rsync")[0]["status"] == "duplicate"
    other = run_lockrun(any_env, "-n", "rsync2", "--success-exit", "24", "--", "sh", "-c", "exit 23")
    assert other.returncode == 23 and history(any_env, "rsync2")[0]["status"] == "failed"


@pytest.mark.parametrize("args", [
    ("--retry", "101"), ("--retry", "-1"), ("--retry", "x"), ("--retry-delay", "25h"), ("--retry-delay", "-1"),
    ("--jitter", "2d"), ("--jitter", "soon"), ("--success-exit", "0"), ("--success-exit", "256"),
    ("--success-exit", "1,,2"), ("--success-exit", ",".join(str(n) for n in range(1, 34))),
])
def test_out_of_range_values_are_one_line_and_exit_2(local_env, args):
    assert_one_line(run_lockrun(local_env, *args, "--", "true"), 2, args[0])


@pytest.mark.parametrize("line", ['retry = 101', 'retry = "3"', 'retry_delay = "25h"', 'jitter = -1',
                                  'success_exit = 0', 'success_exit = [1, 300]', 'success_exit = true'])
def test_out_of_range_config_keys_exit_78(local_env, tmp_path, line):
    (tmp_path / "config.toml").write_text(line + "\n")
    assert_one_line(run_lockrun(local_env, "--", "true"), 78, line.split(" ")[0])


def test_config_keys_set_the_defaults_and_flags_win(local_env, tmp_path, receiver):
    (tmp_path / "config.toml").write_text('retry = 1\nretry_delay = "0"\nsuccess_exit = [3, 24]\njitter = 0\n')
    assert run_lockrun(local_env, "-n", "conf", "--", "sh", "-c", "exit 3").returncode == 0
    assert run_lockrun(local_env, "-n", "conf2", "--", "sh", "-c", "exit 5").returncode == 5
    assert [row["attempt"] for row in history(local_env, "conf2")] == [2, 1]
    assert run_lockrun(local_env, "-n", "conf3", "--retry", "0", "--", "sh", "-c", "exit 5").returncode == 5
    assert [row["attempt"] for row in history(local_env, "conf3")] == [None]


def test_every_attempt_is_a_fleet_event_another_host_sees(hosts, redis_server):
    result = hosts.run("app-a", "-n", "fleet", "--retry", "2", "--retry-delay", "0", "--", "false")
    assert result.returncode == 1
    rows = hosts.json("app-b", "history", "--fleet", "fleet")
    assert [(row["attempt"], row["host"]) for row in rows] == [(3, "app-a"), (2, "app-a"), (1, "app-a")]
    assert {row["first_run_id"] for row in rows} == {rows[-1]["run_id"]}
    assert hosts.run("app-a", "-n", "plain", "--", "true").returncode == 0
    client = redis_server.client()
    (entry,) = client.xrange("lockrun:{plain}:runs")
    assert b"a" not in entry[1] and b"F" not in entry[1]  # a run without --retry pays nothing for it
    first = client.xrange("lockrun:{fleet}:runs")[0][1]
    assert first[b"a"] == b"1" and first[b"F"] == b""


def test_what_an_attempt_left_behind_is_gone_before_the_next_starts(any_env, tmp_path):
    marker, pidfile = tmp_path / "ran", tmp_path / "daemon.pid"
    script = (f'if [ -e {marker} ]; then kill -0 "$(cat {pidfile})" 2>/dev/null && exit 9; exit 0; fi; '
              f"touch {marker}; setsid sleep 300 & echo $! > {pidfile}; exit 1")
    result = run_lockrun(any_env, "-n", "leftover", "--retry", "1", "--retry-delay", "0", "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr  # 9: the first attempt's daemon outlived it
    rows = history(any_env, "leftover")
    assert [(row["attempt"], row["status"]) for row in rows] == [(2, "succeeded"), (1, "failed")]
    assert "outlived it or left its group" in rows[1]["note"] and "reaped" in rows[1]["note"]


def test_the_backstop_stays_armed_through_the_pause(any_env):
    """A lockrun stopped (SIGSTOP) between attempts dies of its backstop timer when the lease it last
    renewed runs out, instead of starting the next attempt, later, without the lock."""
    proc = spawn_lockrun(any_env, "-n", "frozen", "--ttl", "2", "--retry", "1", "--retry-delay", "30", "--", "false")
    try:
        retrying(any_env, "frozen")
        proc.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        assert proc.wait(timeout=20) == -signal.SIGKILL
        assert time.monotonic() - started < 5  # within the 2 s lease, and some scheduling
    finally:
        proc.kill()
        proc.wait()
    assert run_lockrun(any_env, "-n", "frozen", "--wait", "5", "--", "true").returncode == 0


def test_failed_attempts_never_mark_once_done(any_env):
    result = run_lockrun(any_env, "-n", "never", "--retry", "1", "--retry-delay", "0", "--once", "k", "--", "false")
    assert result.returncode == 1
    assert run_lockrun(any_env, "-n", "never", "--once", "k", "--", "true").returncode == 0
    assert [row["status"] for row in history(any_env, "never")] == ["succeeded", "failed", "failed"]
