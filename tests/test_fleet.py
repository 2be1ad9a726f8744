"""Many hosts, one schedule: --min-hold against clock skew, --replace (both backends)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.conftest import history, run_lockrun, spawn_lockrun, wait_until

PY = sys.executable


@pytest.fixture
def env(any_env):
    return any_env


def status_of(env, name):
    return json.loads(run_lockrun(env, "status", "--json", name).stdout)["locks"][0]


def test_min_hold_keeps_a_short_job_from_running_again_on_a_lagging_host(env, tmp_path):
    # Host A runs a short job at 00:00:00 with --min-hold; host B's cron, two seconds behind,
    # fires right after A finished. B must see the lock busy, and run only after the hold.
    starts = tmp_path / "starts"
    job = ["sh", "-c", f"date +%s.%N >> {starts}"]
    first = run_lockrun(env, "-n", "skew", "--min-hold", "3s", "--", *job)
    assert first.returncode == 0
    acquired_at = float(starts.read_text().split()[0])
    second = run_lockrun(env, "-n", "skew", "--", *job)
    assert second.returncode == 75 and len(starts.read_text().split()) == 1
    lock = status_of(env, "skew")
    assert lock["state"] == "cooling" and 0 < lock["ttl_remaining_s"] <= 3
    third = run_lockrun(env, "-n", "skew", "--wait", "30", "--", *job)
    assert third.returncode == 0
    runs = [float(x) for x in starts.read_text().split()]
    assert len(runs) == 2 and runs[1] >= acquired_at + 3 - 0.1  # not before the hold ran out
    row = [r for r in history(env, "skew") if r["status"] == "succeeded"][-1]
    assert "--min-hold" in row["note"]


def test_a_cooling_lock_can_be_unlocked_without_force(env):
    assert run_lockrun(env, "-n", "cool", "--min-hold", "60s", "--", "true").returncode == 0
    result = run_lockrun(env, "unlock", "cool", "--yes")
    assert result.returncode == 0 and "cooling" in result.stdout
    assert run_lockrun(env, "-n", "cool", "--", "true").returncode == 0


def test_min_hold_from_the_config_file(env, tmp_path):
    config = tmp_path / "hold.toml"
    config.write_text('min_hold = "60s"\n')  # the Redis URL, if any, comes from the environment
    env["LOCKRUN_CONFIG"] = str(config)
    assert run_lockrun(env, "-n", "cfg", "--", "true").returncode == 0
    assert run_lockrun(env, "-n", "cfg", "--", "true").returncode == 75
    config.write_text('min_hold = "soon"\n')
    assert run_lockrun(env, "-n", "cfg2", "--", "true").returncode == 78


def test_a_longer_run_is_not_held_further(env):
    assert run_lockrun(env, "-n", "long", "--min-hold", "1s", "--", "sleep", "1.2").returncode == 0
    assert run_lockrun(env, "-n", "long", "--", "true").returncode == 0  # the hold was already over


INTERVAL = (
    "import signal, sys, time\n"
    "log = sys.argv[1]\n"
    "def stop(*_):\n"
    "    with open(log, 'a') as f: f.write(f'end {time.time()!r}\\n')\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "with open(log, 'a') as f: f.write(f'start {time.time()!r}\\n')\n"
    "time.sleep(float(sys.argv[2]))\n"
    "stop()\n"
)


def test_replace_stops_the_holder_then_runs_without_overlap(env, tmp_path):
    log = tmp_path / "log"
    old = spawn_lockrun(env, "-n", "rep", "--ttl", "3", "--", PY, "-c", INTERVAL, str(log), "300",
                        stderr=subprocess.PIPE)
    wait_until(lambda: log.exists() and "start" in log.read_text(), what="the old command")
    started = time.monotonic()
    new = run_lockrun(env, "-n", "rep", "--replace", "--", PY, "-c", INTERVAL, str(log), "0")
    assert new.returncode == 0, new.stderr
    assert time.monotonic() - started < 15
    _, err = old.communicate(timeout=30)
    assert old.returncode == 76 and "--replace" in err
    events = log.read_text().split()
    kinds, stamps = events[0::2], [float(x) for x in events[1::2]]
    assert kinds == ["start", "end", "start", "end"]  # the old one ended before the new one started
    assert stamps[1] <= stamps[2]
    statuses = [r["status"] for r in history(env, "rep")]
    assert statuses == ["succeeded", "preempted"]


def test_replace_on_a_free_lock_just_runs(env):
    result = run_lockrun(env, "-n", "free", "--replace", "--", "echo", "ran")
    assert (result.returncode, result.stdout) == (0, "ran\n")


def test_replace_gives_up_after_wait(env, tmp_path):
    # A holder that ignores SIGTERM and has a long --kill-after still goes, but --wait 0.5
    # is too short for its keeper to notice (TTL/3 = 10 s): the new run gives up, busy.
    flag = tmp_path / "held"
    old = spawn_lockrun(env, "-n", "slow", "--ttl", "30", "--", "sh", "-c", f"touch {flag}; sleep 60")
    try:
        wait_until(flag.exists, what="the old command")
        assert run_lockrun(env, "-n", "slow", "--replace", "--wait", "0.5", "--", "true").returncode == 75
    finally:
        old.terminate()
        old.wait(30)
