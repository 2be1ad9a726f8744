"""`--once KEY`: a key that succeeded is never run again while remembered (both backends)."""

from __future__ import annotations

import time

import pytest

from tests.conftest import history, run_lockrun, wait_until


@pytest.fixture
def env(any_env):
    return any_env


def test_a_succeeded_key_is_skipped_as_a_duplicate(env, tmp_path):
    count = tmp_path / "count"
    cmd = ["-n", "pay", "--once", "payroll-%Y-%m", "--", "sh", "-c", f"echo x >> {count}"]
    assert run_lockrun(env, *cmd).returncode == 0
    second = run_lockrun(env, *cmd)
    assert (second.returncode, second.stdout, second.stderr) == (0, "", "")
    assert count.read_text() == "x\n"
    rows = history(env, "pay")
    key = time.strftime("payroll-%Y-%m")
    assert [(r["status"], r["once_key"]) for r in rows] == [("duplicate", key), ("succeeded", key)]
    assert rows[0]["fencing_token"] is None


def test_a_failed_run_does_not_mark_the_key(env, tmp_path):
    assert run_lockrun(env, "-n", "f", "--once", "k", "--", "sh", "-c", "exit 3").returncode == 3
    assert run_lockrun(env, "-n", "f", "--once", "k", "--", "true").returncode == 0
    assert [r["status"] for r in history(env, "f")] == ["succeeded", "failed"]


def test_a_stopped_run_does_not_mark_the_key(env):
    assert run_lockrun(env, "-n", "t", "--once", "k", "--timeout", "0.2", "--", "sleep", "30").returncode == 124
    assert run_lockrun(env, "-n", "t", "--once", "k", "--", "true").returncode == 0


def test_keys_are_per_lock_name_and_per_key(env):
    assert run_lockrun(env, "-n", "a", "--once", "k1", "--", "true").returncode == 0
    run_lockrun(env, "-n", "b", "--once", "k1", "--", "true")
    run_lockrun(env, "-n", "a", "--once", "k2", "--", "true")
    assert [r["status"] for r in history(env, "--status", "duplicate")] == []


def test_remember_bounds_how_long_a_key_is_kept(env):
    assert run_lockrun(env, "-n", "r", "--once", "k", "--remember", "1s", "--", "true").returncode == 0
    assert history(env, "r") and run_lockrun(env, "-n", "r", "--once", "k", "--", "true").returncode == 0
    assert history(env, "r")[0]["status"] == "duplicate"

    def runs_again():
        run_lockrun(env, "-n", "r", "--once", "k", "--", "true")
        return history(env, "r")[0]["status"] == "succeeded"

    wait_until(runs_again, timeout=15, interval=0.2, what="the remembered key to expire")


@pytest.mark.parametrize("key", ["", "has space", "%n", "x" * 201])
def test_bad_keys_are_usage_errors(env, key):
    result = run_lockrun(env, "-n", "bad", "--once", key, "--", "true")
    assert result.returncode == 2 and "--once" in result.stderr and result.stderr.count("\n") == 1


def test_bad_remember_is_a_usage_error(env):
    for bad in ("30x", "0", "36501d"):
        result = run_lockrun(env, "-n", "bad", "--once", "k", "--remember", bad, "--", "true")
        assert result.returncode == 2 and "--remember" in result.stderr and result.stderr.count("\n") == 1
    # A bare number is seconds, as every time value takes (README "Ranges").
    assert run_lockrun(env, "-n", "bad", "--once", "k", "--remember", "30", "--", "true").returncode == 0


# --- --once-per: the crontab-friendly form -------------------------------------------------------


@pytest.mark.parametrize("period,template", [("hour", "%Y-%m-%dT%H"), ("day", "%Y-%m-%d"), ("week", "%G-W%V"),
                                             ("month", "%Y-%m")])
def test_once_per_keys_by_the_periods_start(env, tmp_path, period, template):
    count = tmp_path / "count"
    cmd = ["-n", "p", "--once-per", period, "--", "sh", "-c", f"echo x >> {count}"]
    before = time.strftime(template)
    assert run_lockrun(env, *cmd).returncode == 0
    second = run_lockrun(env, *cmd)
    after = time.strftime(template)
    assert (second.returncode, second.stdout, second.stderr) == (0, "", "")
    latest, first = history(env, "p")
    assert first["status"] == "succeeded" and {first["once_key"], latest["once_key"]} <= {before, after}
    # A period that ended between the two runs makes the second one the new period's first run.
    same_period = latest["once_key"] == first["once_key"]
    assert latest["status"] == ("duplicate" if same_period else "succeeded")
    assert count.read_text() == ("x\n" if same_period else "x\nx\n")


@pytest.mark.parametrize("local,period,key", [
    ((2026, 12, 1, 14, 5, 9), "hour", "2026-12-01T14"),
    ((2026, 12, 1, 14, 5, 9), "day", "2026-12-01"),
    ((2026, 12, 1, 14, 5, 9), "week", "2026-W49"),
    ((2026, 12, 1, 14, 5, 9), "month", "2026-12"),
    ((2027, 1, 1, 0, 0, 0), "week", "2026-W53"),  # the ISO week's year, not the calendar's
    ((2026, 12, 28, 23, 59, 59), "week", "2026-W53"),
    ((2027, 1, 4, 0, 0, 0), "week", "2027-W01"),
])
def test_once_per_keys_are_the_period_in_local_time(local, period, key):
    from lockrun.config.once import once_key_for_period

    when = time.mktime((*local, 0, 0, -1))
    assert once_key_for_period(period, when) == key


@pytest.mark.parametrize("args", [["--once", "k", "--once-per", "day"], ["--once-per", "year"], ["--once-per", ""],
                                  ["--once-per", "DAY"], ["--once-per"]])
def test_once_per_misuse_is_a_usage_error(env, args):
    result = run_lockrun(env, "-n", "bad", *args, "--", "true")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--once" in result.stderr
    assert history(env) == []
