"""When the shell and this host's runs use different backends, status, history and unlock say so
in one line, without credentials; the -v busy hint names the backend."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from lockrun.ledger.store import Ledger, RunRecord
from tests.conftest import RedisServer, history, isolated_env, run_lockrun, spawn_lockrun, wait_until

PASSWORD = "s3cret-pw"


@pytest.fixture
def secured():
    server = RedisServer(password=PASSWORD).start()
    yield server
    server.cleanup()


def hints(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("lockrun: note:")]


def test_a_shell_without_the_crontabs_redis_url_is_told(tmp_path, secured):
    shell = isolated_env(tmp_path)  # no Redis URL: the local backend
    job = {**shell, "LOCKRUN_REDIS_URL": secured.tcp_url}
    assert run_lockrun(job, "-n", "sync", "--", "true").returncode == 0
    for args in (["status"], ["status", "sync"], ["status", "--json"], ["history"], ["history", "sync", "--json"],
                 ["unlock", "sync"]):
        result = run_lockrun(shell, *args)
        assert result.returncode == 0, (args, result.stderr)
        (line,) = hints(result)
        assert result.stderr.count("\n") == 1
        assert f"redis redis://127.0.0.1:{secured.port}/0 (from LOCKRUN_REDIS_URL)" in line, line
        assert "this shell uses the local backend" in line and "(no Redis URL configured)" in line
        assert PASSWORD not in result.stdout + result.stderr
    row = Ledger(tmp_path / "state" / "ledger.db").open(create=False)
    try:
        stored = row._db.execute("SELECT backend_where, backend_from FROM runs").fetchall()
    finally:
        row.close()
    assert [tuple(r) for r in stored] == [(f"redis://127.0.0.1:{secured.port}/0", "LOCKRUN_REDIS_URL")]


def test_agreeing_shells_hear_nothing(env):
    assert run_lockrun(env, "-n", "same", "--", "true").returncode == 0
    for args in (["status"], ["history"], ["unlock", "same"]):
        assert hints(run_lockrun(env, *args)) == []


def test_the_origin_is_named_flag_file_or_environment(tmp_path, redis_server):
    shell = isolated_env(tmp_path)
    run_lockrun(shell, "-n", "f", "--redis-url", redis_server.tcp_url, "--", "true")
    assert "(from --redis-url)" in hints(run_lockrun(shell, "status"))[0]
    config = tmp_path / "redis.toml"
    config.write_text(f'redis_url = "{redis_server.tcp_url}"\n')
    run_lockrun({**shell, "LOCKRUN_CONFIG": str(config)}, "-n", "f", "--", "true")
    assert f"(from redis_url in {config})" in hints(run_lockrun(shell, "status", "f"))[0]


def test_local_runs_seen_from_a_redis_shell_and_another_server(tmp_path, redis_server):
    local = isolated_env(tmp_path)
    assert run_lockrun(local, "-n", "here", "--", "true").returncode == 0
    line = hints(run_lockrun({**local, "LOCKRUN_REDIS_URL": redis_server.url}, "status"))[0]
    assert f"used the local backend in {tmp_path / 'state'}" in line
    assert f"uses redis unix://{redis_server.socket}" in line
    on_db1 = {**local, "LOCKRUN_REDIS_URL": redis_server.tcp_url.replace("/0", "/1")}
    run_lockrun(on_db1, "-n", "here", "--", "true")
    line = hints(run_lockrun({**local, "LOCKRUN_REDIS_URL": redis_server.tcp_url}, "status", "here"))[0]
    assert line.endswith("give it the same setting to see those locks")
    assert f"/1 (from LOCKRUN_REDIS_URL), but this shell uses redis redis://127.0.0.1:{redis_server.port}/0" in line


def test_only_each_names_newest_recent_run_counts(tmp_path):
    shell = isolated_env(tmp_path)
    ledger = Ledger(tmp_path / "state" / "ledger.db").open()
    old = (datetime.now(timezone.utc) - timedelta(days=8)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    ledger.start(RunRecord(run_id="a" * 32, name="ancient", command=["x"], backend="redis", started_at=old))
    ledger.close()
    assert hints(run_lockrun(shell, "status")) == []  # a week old: how things were, not how they are
    assert run_lockrun(shell, "-n", "ancient", "--", "true").returncode == 0
    assert hints(run_lockrun(shell, "status")) == []


@pytest.mark.parametrize("where,origin", [(None, None), ("", ""), ("\x1b[31mred\nline", "x" * 5000),
                                          ("redis://h:1/0", "--redis-url")])
def test_hostile_or_missing_stored_configuration_is_one_line(tmp_path, where, origin):
    ledger = Ledger(tmp_path / "state" / "ledger.db").open()
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    ledger.start(RunRecord(run_id="b" * 32, name="odd", command=["x"], backend="redis", started_at=now,
                           backend_where=where, backend_from=origin))
    ledger.close()
    result = run_lockrun(isolated_env(tmp_path), "status", "odd")
    assert result.returncode == 0 and len(hints(result)) == 1 and result.stderr.count("\n") == 1
    assert "\x1b" not in result.stderr and len(result.stderr) < 600


def test_the_verbose_busy_line_names_the_backend(any_env, tmp_path):
    flag = tmp_path / "held"
    holder = spawn_lockrun(any_env, "-n", "b", "--", "sh", "-c", f"touch {flag}; sleep 30")
    try:
        wait_until(flag.exists, what="the holder")
        result = run_lockrun(any_env, "-v", "-n", "b", "--", "true")
        assert result.returncode == 75
        where = "(local backend, this host only)" if "LOCKRUN_REDIS_URL" not in any_env else "(redis unix://"
        assert f"lock 'b' is busy {where}" in result.stderr
    finally:
        holder.terminate()
        holder.wait(30)
    assert history(any_env, "b")[0]["status"] == "busy"


def test_each_name_is_said_under_the_backend_it_used(tmp_path, redis_server):
    """Runs of one name on Redis and of another on the local backend, seen from a shell on another
    Redis database: the note names only the names that ran as the newest of them did."""
    local = isolated_env(tmp_path)
    on_redis = {**local, "LOCKRUN_REDIS_URL": redis_server.tcp_url}
    assert run_lockrun(on_redis, "-n", "onredis", "--", "true").returncode == 0
    assert run_lockrun(local, "-n", "onlocal", "--", "true").returncode == 0
    (line,) = hints(run_lockrun({**local, "LOCKRUN_REDIS_URL": redis_server.tcp_url.replace("/0", "/1")}, "status"))
    assert "'onlocal'" in line and "used the local backend" in line
    assert "'onredis'" not in line, line
