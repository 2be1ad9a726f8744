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
    assert run_lockrun(env, "-n", "bad", "--once", "k", "--remember", "30", "--", "true").returncode == 2
