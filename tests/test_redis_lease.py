"""Redis specifics of a run: the keys, the lease TTL, expiry take-over."""

from __future__ import annotations

import json
import sys
import time

from tests.conftest import run_lockrun, spawn_lockrun, wait_until

PY = sys.executable


def test_waiter_takes_over_a_crashed_holders_lock_after_expiry(env, redis_server, tmp_path):
    client = redis_server.client()
    # A "holder" that died without releasing: the key simply expires.
    client.set("lockrun:{crashed}:lock", "someone-else", px=1500)
    started = time.monotonic()
    result = run_lockrun(env, "-n", "crashed", "-w", "30", "--", "true")
    took = time.monotonic() - started
    assert result.returncode == 0
    assert 1.0 < took < 1.5 + 1.5  # within about a second of expiry


def test_lease_is_renewed_while_the_command_runs_and_released_after(env, redis_server, tmp_path):
    client = redis_server.client()
    flag = tmp_path / "started"
    proc = spawn_lockrun(env, "-n", "long", "--ttl", "1", "--", "sh", "-c", f"touch {flag}; sleep 3.5")
    wait_until(flag.exists, what="the command")
    ttls = []
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:  # sample the lease over three TTLs
        ttls.append(client.pttl("lockrun:{long}:lock"))
        time.sleep(0.1)
    assert min(ttls) > 0, ttls  # never expired, never missing
    assert max(ttls) <= 1000  # reset, never added to
    info = client.hgetall("lockrun:{long}:info")
    assert int(info[b"child_pid"]) > 0  # filled in by a renewal
    assert proc.wait(30) == 0
    assert client.exists("lockrun:{long}:lock", "lockrun:{long}:info") == 0
    assert int(client.get("lockrun:{long}:fence")) > 0


def test_info_hash_describes_the_holder(env, redis_server, tmp_path):
    client = redis_server.client()
    flag = tmp_path / "started"
    proc = spawn_lockrun(env, "-n", "info", "--ttl", "30", "--", "sh", "-c", f"touch {flag}; sleep 30")
    try:
        wait_until(flag.exists, what="the command")
        info = {k.decode(): v.decode() for k, v in client.hgetall("lockrun:{info}:info").items()}
        token = client.get("lockrun:{info}:lock").decode()
        assert info["token"] == token and len(token) >= 32
        assert int(info["pid"]) == proc.pid
        assert json.loads(info["command"]) == ["sh", "-c", f"touch {flag}; sleep 30"]
        assert info["ttl_ms"] == "30000" and info["started_at"].endswith("Z")
        for key in ("run_id", "host", "boot_id", "pid_start", "heartbeat_at"):
            assert info[key]
        assert 0 < client.pttl("lockrun:{info}:info") <= 30000
    finally:
        proc.terminate()
        proc.wait(30)


def test_tokens_are_new_for_every_run(env, redis_server, tmp_path):
    client = redis_server.client()
    script = "import time; time.sleep(0.3)"
    seen = set()
    for _ in range(3):
        proc = spawn_lockrun(env, "-n", "tok", "--", PY, "-c", script)
        token = wait_until(lambda: client.get("lockrun:{tok}:lock"), what="the lock")
        seen.add(token)
        proc.wait(30)
    assert len(seen) == 3


def test_missing_command_does_not_take_the_lock(env, redis_server):
    run_lockrun(env, "-n", "m", "--", "no-such-command-xyz")
    assert redis_server.client().get("lockrun:{m}:fence") is None


def test_ttl_precedence_flag_env_file_default(env, redis_server, tmp_path):
    """flag > environment > config file > default, seen in the lease the holder really takes."""
    client = redis_server.client()
    config = tmp_path / "ttl.toml"
    config.write_text(f'redis_url = "{redis_server.url}"\nttl = 30\n')
    env["LOCKRUN_CONFIG"] = str(config)
    script = "import os, sys, time; open(sys.argv[1], 'w').close(); time.sleep(30)"

    def ttl_ms_of(*args, extra_env=None):
        flag = tmp_path / "started"
        flag.unlink(missing_ok=True)
        proc = spawn_lockrun({**env, **(extra_env or {})}, "-n", "prec", *args, "--", PY, "-c", script, str(flag))
        try:
            wait_until(flag.exists, what="the command")
            return int(client.hget("lockrun:{prec}:info", "ttl_ms"))
        finally:
            proc.terminate()
            proc.wait(30)

    assert ttl_ms_of() == 30000  # the config file
    assert ttl_ms_of(extra_env={"LOCKRUN_TTL": "20"}) == 20000  # the environment beats the file
    assert ttl_ms_of("--ttl", "10", extra_env={"LOCKRUN_TTL": "20"}) == 10000  # the flag beats both
    config.write_text(f'redis_url = "{redis_server.url}"\n')
    assert ttl_ms_of() == 60000  # the default


def test_a_sigkilled_slot_holder_is_swept_after_its_ttl(env, redis_server, tmp_path):
    import signal

    holder2_flag = tmp_path / "held2"
    holder2 = spawn_lockrun(env, "-n", "sw2", "--slots", "2", "--ttl", "2", "--", "sh", "-c",
                            f"touch {holder2_flag}; sleep 60")
    other_flag = tmp_path / "held3"
    other = spawn_lockrun(env, "-n", "sw2", "--slots", "2", "--ttl", "2", "--", "sh", "-c",
                          f"touch {other_flag}; sleep 60")
    try:
        wait_until(lambda: holder2_flag.exists() and other_flag.exists(), what="both slot holders")
        assert run_lockrun(env, "-n", "sw2", "--slots", "2", "--", "true").returncode == 75
        holder2.send_signal(signal.SIGKILL)
        holder2.wait(30)
        started = time.monotonic()
        assert run_lockrun(env, "-n", "sw2", "--slots", "2", "-w", "30", "--", "true").returncode == 0
        assert time.monotonic() - started < 2 + 2  # swept once its TTL ran out
        assert redis_server.client().zcard("lockrun:{sw2}:slots") == 1  # only the live holder is left
    finally:
        other.terminate()
        other.wait(30)


def _token(env, *args) -> int:
    result = run_lockrun(env, *args, "--", "sh", "-c", "echo $LOCKRUN_FENCING_TOKEN")
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return int(result.stdout)


def _server_micros(client) -> int:
    seconds, micros = client.time()
    return seconds * 1_000_000 + micros


def test_fencing_tokens_never_go_back(env, redis_server):
    """max(counter + 1, server TIME in µs): across a restart without persistence, a FLUSHALL and a
    counter moved back by hand, for plain locks and --slots alike."""
    for args in (["-n", "fence"], ["-n", "fence-slots", "--slots", "2"]):
        before = _server_micros(redis_server.client())
        tokens = [_token(env, *args)]
        assert tokens[0] >= before  # the server's clock, not 1
        tokens.append(_token(env, *args))
        redis_server.restart()  # --save '' --appendonly no: every key is gone, the counter too
        assert redis_server.client().dbsize() == 0
        tokens.append(_token(env, *args))
        redis_server.client().flushall()
        tokens.append(_token(env, *args))
        fence_key = f"lockrun:{{{args[1]}}}:fence"
        redis_server.client().set(fence_key, 5)  # a counter behind (a lossy failover, a restore)
        tokens.append(_token(env, *args))
        assert tokens == sorted(set(tokens)), tokens  # strictly increasing, all of them
        assert int(redis_server.client().get(fence_key)) == tokens[-1]


def test_a_counter_ahead_of_the_clock_still_increases_by_one(env, redis_server):
    far = 2**52  # ahead of the server's µs clock for the next century; still exact in a Lua double
    redis_server.client().set("lockrun:{ahead}:fence", far)
    assert [_token(env, "-n", "ahead"), _token(env, "-n", "ahead")] == [far + 1, far + 2]


def test_release_token_gives_back_what_a_token_holds(redis_server):
    """For an acquire whose reply was lost: the lock (or the slot) that the token holds goes."""
    from lockrun.backends.redis.backend import RedisBackend
    from lockrun.backends.values import Lease

    client = redis_server.client()
    backend = RedisBackend(redis_server.url, "lockrun:", 2.0)
    try:
        assert isinstance(backend.acquire("gone", "tok", 30.0, {"run_id": "r1"}), Lease)
        assert backend.release_token("gone", "another token") is False
        assert client.exists("lockrun:{gone}:lock") == 1
        assert backend.release_token("gone", "tok") is True
        assert client.exists("lockrun:{gone}:lock", "lockrun:{gone}:info") == 0
        assert isinstance(backend.acquire("sem", "tok", 30.0, {"run_id": "r2"}, slots=2), Lease)
        assert backend.release_token("sem", "tok", slots=2) is True
        assert client.zcard("lockrun:{sem}:slots") == 0
    finally:
        backend.close()
