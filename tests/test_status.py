"""`lockrun status --json` (README, "Operating it") and secrets kept out of every output."""

from __future__ import annotations

import json
import re
import time

from tests.conftest import RedisServer, history, run_lockrun, spawn_lockrun, wait_until

LOCK_FIELDS = {
    "name", "state", "token", "run_id", "host", "pid", "child_pid", "command", "started_at", "heartbeat_at",
    "heartbeat_age_s", "ttl_remaining_s", "problem", "last_run", "paused", "cadence", "next_due", "overdue_s",
    "attempt", "retry_at",
}


def status(env, *names):
    result = run_lockrun(env, "status", "--json", *names)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_status_lists_held_locks_with_every_field(any_env, tmp_path):
    env = any_env
    backend = "redis" if "LOCKRUN_REDIS_URL" in env else "local"
    run_lockrun(env, "-n", "job", "--", "true")  # a finished run for last_run
    flag = tmp_path / "started"
    proc = spawn_lockrun(env, "-n", "job", "--ttl", "30", "--", "sh", "-c", f"touch {flag}; sleep 30")
    try:
        wait_until(flag.exists, what="the command")
        doc = status(env)
        assert doc["backend"] == backend
        (lock,) = doc["locks"]
        assert set(lock) == LOCK_FIELDS
        assert lock["name"] == "job" and lock["state"] == "held" and lock["pid"] == proc.pid
        assert lock["command"] == ["sh", "-c", f"touch {flag}; sleep 30"]
        if backend == "redis":
            assert 0 < lock["ttl_remaining_s"] <= 30
        else:
            assert lock["ttl_remaining_s"] is None  # kernel locks do not expire
        assert 0 <= lock["heartbeat_age_s"] < 30
        assert lock["last_run"]["status"] == "succeeded" and lock["last_run"]["name"] == "job"
        running = [r for r in history(env, "job") if r["status"] == "running"]
        assert running[0]["run_id"] == lock["run_id"]
    finally:
        proc.terminate()
        proc.wait(30)
    assert status(env)["locks"] == []


def test_status_of_named_locks_includes_free_ones(any_env):
    env = any_env
    run_lockrun(env, "-n", "done", "--", "sh", "-c", "exit 2")
    doc = status(env, "done", "never")
    assert [lock["name"] for lock in doc["locks"]] == ["done", "never"]
    done, never = doc["locks"]
    assert done["state"] == "free" and done["token"] is None and done["ttl_remaining_s"] is None
    assert done["last_run"]["exit_code"] == 2 and never["last_run"] is None
    assert set(done) == LOCK_FIELDS


def test_status_uses_the_prefix(env, tmp_path, redis_server):
    flag = tmp_path / "started"
    proc = spawn_lockrun(env, "--prefix", "team-a:", "-n", "p", "--", "sh", "-c", f"touch {flag}; sleep 30")
    try:
        wait_until(flag.exists, what="the command")
        assert redis_server.client().exists("team-a:{p}:lock") == 1
        assert status(env)["locks"] == []
        env["LOCKRUN_PREFIX"] = "team-a:"
        assert [lock["name"] for lock in status(env)["locks"]] == ["p"]
    finally:
        proc.terminate()
        proc.wait(30)


def test_status_human_output(env, tmp_path):
    result = run_lockrun(env, "status")
    assert result.returncode == 0 and "redis" in result.stdout and "no locks" in result.stdout
    assert "\x1b[" not in result.stdout  # no colour codes when piped


def test_status_with_redis_down_is_69(env, redis_server):
    redis_server.kill()
    result = run_lockrun(env, "status", "--json")
    assert result.returncode == 69 and result.stderr.count("\n") == 1


def test_passwords_never_appear(tmp_path, env):
    secret = "s3cret-Pa55word"
    server = RedisServer(password=secret).start()
    try:
        flag = tmp_path / "started"
        outputs = []
        for url in (server.url, server.tcp_url):
            env["LOCKRUN_REDIS_URL"] = url
            result = run_lockrun(env, "-v", "-n", "pw", "--", "echo", "ok")
            assert result.returncode == 0, result.stderr
            outputs.append(result.stdout + result.stderr)
        proc = spawn_lockrun(env, "-v", "-n", "pw", "--", "sh", "-c", f"touch {flag}; sleep 30")
        wait_until(flag.exists, what="the command")
        for args in (["status"], ["status", "--json"], ["status", "pw"], ["history"], ["history", "--json"]):
            result = run_lockrun(env, *args)
            assert result.returncode == 0
            outputs.append(result.stdout + result.stderr)
        proc.terminate()
        proc.wait(30)
        env["LOCKRUN_REDIS_URL"] = server.tcp_url.replace(secret, secret + "-wrong")
        wrong = run_lockrun(env, "-n", "pw", "--", "true")
        assert wrong.returncode == 69
        outputs.append(wrong.stderr)
        server.kill()
        env["LOCKRUN_REDIS_URL"] = server.tcp_url
        for args in (["-n", "pw", "--", "true"], ["status"], ["status", "--json"]):
            result = run_lockrun(env, *args)
            assert result.returncode == 69
            assert "***" in result.stderr
            outputs.append(result.stdout + result.stderr)
        env["LOCKRUN_REDIS_URL"] = f"http://:{secret}@host"
        outputs.append(run_lockrun(env, "-n", "pw", "--", "true").stderr)
        assert all(secret not in text for text in outputs), [t for t in outputs if secret in t]
        ledger_bytes = (tmp_path / "state" / "ledger.db").read_bytes()
        wal = tmp_path / "state" / "ledger.db-wal"
        ledger_bytes += wal.read_bytes() if wal.exists() else b""
        assert secret.encode() not in ledger_bytes
    finally:
        server.cleanup()


def test_ages_are_never_negative_when_the_readers_clock_is_behind(any_env, tmp_path):
    """A holder whose clock (or whose Redis server's TIME) is ahead of the reader's: ages by the
    server's TIME where there is one, else clamped at 0; never ``-2.0m``."""
    from tests.test_once_zone import at_moment

    assert run_lockrun(any_env, "-n", "ahead-done", "--", "true").returncode == 0
    holder = spawn_lockrun(any_env, "-n", "ahead", "--", "sleep", "30")
    try:
        wait_until(lambda: status(any_env, "ahead")["locks"][0]["state"] == "held")
        if "LOCKRUN_REDIS_URL" in any_env:  # a heartbeat old enough to tell its true age from 0
            wait_until(lambda: (status(any_env, "ahead")["locks"][0]["heartbeat_age_s"] or 0) >= 1.5,
                       what="a heartbeat 1.5 s old")
        behind = at_moment(any_env, time.time() - 600)  # the reader's clock 10 minutes back
        table = run_lockrun(behind, "status", "ahead", "ahead-done")
        assert table.returncode == 0, table.stderr
        assert not re.search(r"(?<![\w/.-])-\d+(\.\d+)?[smhd]\b", table.stdout), table.stdout  # an age below 0
        (lock,) = json.loads(run_lockrun(behind, "status", "--json", "ahead").stdout)["locks"]
        assert set(lock) == LOCK_FIELDS and lock["heartbeat_age_s"] >= 0
        if "LOCKRUN_REDIS_URL" in any_env:  # by the server's TIME: the true age, not 0 and not -600
            assert 1.0 < lock["heartbeat_age_s"] < 30
            age = re.search(r"^ahead\s+held\s+\S+\s+(\d+\.\d)s\s", table.stdout, re.MULTILINE)
            assert age and 1.0 <= float(age[1]) < 30, table.stdout
    finally:
        holder.terminate()
        holder.wait(timeout=30)
