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


# --- --slots N --------------------------------------------------------------------------------------

SLOT_JOB = (
    "import os, sys, time\n"
    "with open(sys.argv[1], 'a') as f: f.write(f'start {time.time()!r} {os.environ[\"LOCKRUN_FENCING_TOKEN\"]}\\n')\n"
    "time.sleep(0.3)\n"
    "with open(sys.argv[1], 'a') as f: f.write(f'end {time.time()!r} {os.environ[\"LOCKRUN_FENCING_TOKEN\"]}\\n')\n"
)


def test_slots_never_let_more_than_n_run_at_once(env, tmp_path):
    log = tmp_path / "log"
    procs = [spawn_lockrun(env, "-n", "sem", "--slots", "3", "-w", "120", "--", PY, "-c", SLOT_JOB, str(log))
             for _ in range(20)]
    assert [p.wait(180) for p in procs] == [0] * 20
    lines = log.read_text().splitlines()
    events = sorted((float(t), kind, int(token)) for kind, t, token in (line.split() for line in lines))
    running, peak = 0, 0
    for _, kind, _ in events:
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak <= 3
    tokens = [token for _, kind, token in events if kind == "start"]
    assert len(set(tokens)) == 20  # every holder its own fencing token
    if "LOCKRUN_REDIS_URL" not in env:  # the local counter counts; Redis' tokens follow its clock (µs)
        assert sorted(tokens) == list(range(min(tokens), min(tokens) + 20))


def test_status_lists_every_slot_holder_and_unlock_refuses_to_guess(env, tmp_path):
    flags = [tmp_path / f"s{i}" for i in range(2)]
    holders = [spawn_lockrun(env, "-n", "two", "--slots", "2", "--", "sh", "-c", f"touch {flag}; sleep 30")
               for flag in flags]
    try:
        wait_until(lambda: all(f.exists() for f in flags), what="both holders")
        locks = json.loads(run_lockrun(env, "status", "--json").stdout)["locks"]
        assert sorted(lock["pid"] for lock in locks) == sorted(p.pid for p in holders)
        assert {lock["name"] for lock in locks} == {"two"} and len({lock["token"] for lock in locks}) == 2
        assert run_lockrun(env, "-n", "two", "--slots", "2", "--", "true").returncode == 75
        refused = run_lockrun(env, "unlock", "two", "--yes")
        assert refused.returncode == 1 and "--token" in refused.stderr
        token = locks[0]["token"]
        forced = run_lockrun(env, "unlock", "two", "--token", token[:8], "--force", "--yes")
        assert forced.returncode == 0, forced.stderr
    finally:
        for p in holders:
            p.terminate()
            p.wait(30)


@pytest.mark.parametrize("args,needle", [
    (["--slots", "0"], "--slots"),
    (["--slots", "x"], "--slots"),
    (["--slots", "2", "--replace"], "--slots"),
    (["--slots", "2", "--min-hold", "5s"], "--slots"),
])
def test_bad_slot_options(env, args, needle):
    result = run_lockrun(env, "-n", "bad", *args, "--", "true")
    assert result.returncode == 2 and needle in result.stderr and result.stderr.count("\n") == 1


def test_one_name_with_two_different_n_is_an_error_for_each_caller(env, tmp_path):
    flag = tmp_path / "held"
    holder = spawn_lockrun(env, "-n", "mix", "--slots", "2", "--", "sh", "-c", f"touch {flag}; sleep 30")
    try:
        wait_until(flag.exists, what="the holder")
        for args in (["--slots", "3"], []):
            result = run_lockrun(env, "-n", "mix", *args, "--", "true")
            assert result.returncode == 2 and "--slots 2 elsewhere" in result.stderr
    finally:
        holder.terminate()
        holder.wait(30)
    plain_flag = tmp_path / "plain"
    plain = spawn_lockrun(env, "-n", "mix", "--", "sh", "-c", f"touch {plain_flag}; sleep 30")
    try:
        wait_until(plain_flag.exists, what="the plain holder")
        result = run_lockrun(env, "-n", "mix", "--slots", "2", "--", "true")
        assert result.returncode == 2 and "--slots 1 elsewhere" in result.stderr
    finally:
        plain.terminate()
        plain.wait(30)
