"""--replicas N|all: WAIT behind the acquire and every renewal, in the same round trip.

A real master with two real replicas per test; a replica is paused (SIGSTOP) to make it stop
acknowledging. Sentinel and Cluster deployments are in test_sentinel.py and test_cluster.py.

WAIT may take 3/4 of the call timeout (TTL/5) less 100 ms: where a live replica must acknowledge
in time on a busy test machine (five test suites at once, two cores), the TTL leaves it a second.
"""

from __future__ import annotations

import re
import signal
import sys
import time

import pytest

from tests.conftest import RedisServer, history, isolated_env, pid_alive, run_lockrun, spawn_lockrun, wait_until
from tests.soak.oracle import MonitorRecorder, parse_line
from tests.soak.proxy import FaultyProxy

PY = sys.executable
# Appends a wall-clock tick every 20 ms to argv[1], for as long as it runs.
TICKER = (
    "import sys, time\n"
    "while True:\n"
    "    open(sys.argv[1], 'a').write(f'{time.time()!r}\\n')\n"
    "    time.sleep(0.02)\n"
)


def in_sync(master: RedisServer) -> int:
    """Replicas the master lists as in sync (ROLE), the number --replicas all waits for."""
    with master.client() as client:
        return len(client.execute_command("ROLE")[2])


@pytest.fixture
def replicated():
    master = RedisServer().start()
    replicas = [RedisServer(args=("--replicaof", "127.0.0.1", str(master.port))) for _ in range(2)]
    try:
        for replica in replicas:
            replica.start()
        wait_until(lambda: in_sync(master) == 2, timeout=60, what="both replicas to sync")
        yield master, replicas
    finally:
        for server in [*replicas, master]:
            server.cleanup()


@pytest.fixture
def renv(tmp_path, replicated):
    return {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": replicated[0].url}


def last_tick(path) -> float:
    lines = path.read_text().split() if path.exists() else []
    return float(lines[-1]) if lines else 0.0


def test_the_lock_and_its_renewals_reach_the_replicas(renv, replicated):
    master, replicas = replicated
    for replicas_arg in ("1", "2", "all"):
        result = run_lockrun(renv, "-n", "rep", "--ttl", "8", "--replicas", replicas_arg, "--", "sh", "-c",
                             "sleep 5.6; echo $LOCKRUN_FENCING_TOKEN")  # two renewals
        assert (result.returncode, result.stderr) == (0, ""), replicas_arg
        token = result.stdout.strip().encode()
        for replica in replicas:
            # the grant was acknowledged before the command ran, so every replica has its token
            wait_until(lambda r=replica, token=token: r.client().get("lockrun:{rep}:fence") == token,
                       what="the replica's copy")
    assert [row["status"] for row in history(renv, "rep")] == ["succeeded"] * 3


def test_an_uncontended_run_is_still_two_round_trips(tmp_path, replicated):
    master, _ = replicated
    proxy = FaultyProxy(master.port).start()
    monitor = MonitorRecorder(master.socket, 0)
    try:
        env = {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": f"redis://127.0.0.1:{proxy.port}/0"}
        result = run_lockrun(env, "-n", "rt", "--replicas", "1", "--", "true")
        assert (result.returncode, result.stderr) == (0, "")
        master.client().execute_command("PING", "end-of-run")
        wait_until(lambda: any("end-of-run" in line for line in monitor.lines), what="MONITOR to catch up")
    finally:
        proxy.close()
        monitor.stop(timeout=0)
    sent = [parse_line(line) for line in monitor.lines]
    commands = [(client, args[0].upper()) for _, client, args in filter(None, sent) if client != "lua"]
    lockrun = [verb for client, verb in commands if client.startswith("127.0.0.1:")]
    # EVAL (acquire) and WAIT pipelined: one round trip; EVAL (release): the second one.
    assert lockrun == ["EVAL", "WAIT", "EVAL"], commands
    assert (proxy.connections, proxy.requests) == (1, 2)


def test_a_paused_replica_keeps_the_command_from_running(renv, replicated, tmp_path):
    master, replicas = replicated
    flag = tmp_path / "ran"
    replicas[1].pause()
    try:
        for replicas_arg, message in (("2", "only 1 of 2 replicas acknowledged the lock"),
                                      ("all", "only 1 of 2 replicas acknowledged the lock")):
            result = run_lockrun(renv, "-n", "paused", "--ttl", "10", "--replicas", replicas_arg, "--",
                                 "touch", str(flag))
            assert result.returncode == 69, result.stderr
            assert result.stderr.count("\n") == 1 and message in result.stderr and "did not run" in result.stderr
            assert not flag.exists()
            assert master.client().exists("lockrun:{paused}:lock") == 0  # given back at once, not left for a TTL
        # one replica is enough for --replicas 1
        result = run_lockrun(renv, "-n", "paused", "--ttl", "10", "--replicas", "1", "--", "touch", str(flag))
        assert result.returncode == 0
    finally:
        replicas[1].resume()
    rows = history(renv, "paused")
    assert [row["status"] for row in rows] == ["succeeded", "unavailable", "unavailable"]
    assert "acknowledged the lock" in rows[1]["error"]


def test_a_replica_that_stops_acknowledging_stops_the_command_before_its_deadline(renv, replicated, tmp_path):
    master, replicas = replicated
    ticks = tmp_path / "ticks"
    ttl = 10.0
    proc = spawn_lockrun(renv, "-n", "drift", "--ttl", str(ttl), "--replicas", "all", "--", PY, "-c", TICKER,
                         str(ticks), stderr=-1)
    try:
        wait_until(lambda: last_tick(ticks) > 0 or proc.poll() is not None, what="the command to start")
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(ttl / 2)  # an acknowledged renewal first
        replicas[0].pause()
        paused_at = time.time()  # no renewal sent after this can be acknowledged by both replicas
        _, err = proc.communicate(timeout=30)
    finally:
        replicas[0].resume()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 76, err
    assert err.count("\n") == 1 and "lost" in err, err
    assert re.search(r"only [01] of 2 replicas acknowledged the renewal within [0-9.]+s, --replicas all", err), err
    # Stopped before the deadline of the last renewal both replicas acknowledged.
    assert last_tick(ticks) < paused_at + ttl
    (row,) = history(renv, "drift")
    assert row["status"] == "lost"


def test_replicas_all_needs_a_replica(env, tmp_path):
    flag = tmp_path / "ran"
    for replicas_arg, message in (("all", "no replica in sync"), ("1", "only 0 of 1 replica acknowledged the lock")):
        result = run_lockrun(env, "-n", "alone", "--ttl", "1", "--replicas", replicas_arg, "--", "touch", str(flag))
        assert result.returncode == 69 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
        assert not flag.exists()
    assert run_lockrun(env, "-n", "alone", "--replicas", "0", "--", "touch", str(flag)).returncode == 0


def test_replicas_from_the_config_file(renv, replicated, tmp_path):
    config = tmp_path / "replicas.toml"
    config.write_text('replicas = "all"\n')
    renv["LOCKRUN_CONFIG"] = str(config)
    replicas = replicated[1]
    replicas[0].pause()
    try:
        result = run_lockrun(renv, "-n", "cfg", "--ttl", "10", "--", "true")
        assert result.returncode == 69 and "only 1 of 2 replicas" in result.stderr
        # the flag wins over the file
        assert run_lockrun(renv, "-n", "cfg", "--ttl", "10", "--replicas", "1", "--", "true").returncode == 0
    finally:
        replicas[0].resume()


@pytest.mark.parametrize("value", ["-1", "101", "abc", "1.5", "", "²", "1e2", "99999999999999999999"])
def test_bad_replicas_values_are_usage_errors(env, value):
    result = run_lockrun(env, "-n", "x", "--replicas", value, "--", "true")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "--replicas" in result.stderr and "0 to 100, or all" in result.stderr


@pytest.mark.parametrize("text", ["replicas = -1", 'replicas = "some"', "replicas = true", "replicas = 1.5",
                                  "replicas = 101", "replicas = [1]"])
def test_bad_replicas_in_the_config_file(env, tmp_path, text):
    config = tmp_path / "bad.toml"
    config.write_text(text + "\n")
    env["LOCKRUN_CONFIG"] = str(config)
    result = run_lockrun(env, "-n", "x", "--", "true")
    assert result.returncode == 78 and result.stderr.count("\n") == 1 and "replicas" in result.stderr, result.stderr


def test_the_local_backend_has_no_replicas(local_env, tmp_path):
    flag = tmp_path / "ran"
    result = run_lockrun(local_env, "-n", "x", "--replicas", "1", "--", "touch", str(flag))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "needs a Redis backend" in result.stderr
    config = tmp_path / "replicas.toml"
    config.write_text("replicas = 2\n")
    result = run_lockrun({**local_env, "LOCKRUN_CONFIG": str(config)}, "-n", "x", "--", "touch", str(flag))
    assert result.returncode == 78 and "needs a Redis backend" in result.stderr
    assert not flag.exists()
    assert run_lockrun(local_env, "-n", "x", "--replicas", "0", "--", "touch", str(flag)).returncode == 0


def test_a_signal_while_waiting_for_replicas(renv, replicated, tmp_path):
    """SIGTERM during the acquire's WAIT: nothing runs, and the lock is given back."""
    master, replicas = replicated
    flag = tmp_path / "ran"
    replicas[0].pause()
    try:
        # --ttl 20: a WAIT of 3 s, long enough to be interrupted in the middle of it
        proc = spawn_lockrun(renv, "-n", "sig", "--ttl", "20", "--replicas", "all", "--", "touch", str(flag),
                             stderr=-1)
        wait_until(lambda: master.client().exists("lockrun:{sig}:lock"), what="the lock to be taken")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        replicas[0].resume()
    assert proc.returncode in (69, 128 + signal.SIGTERM), err
    assert "Traceback" not in err and err.count("\n") == 1
    assert not flag.exists() and not pid_alive(proc.pid)
    assert master.client().exists("lockrun:{sig}:lock") == 0


def test_retry_attempts_under_replicas(renv, replicated):
    """The calls between --retry attempts are not acknowledged by WAIT, so they never push the
    deadline on: the keeper's acknowledged renewals do, through the pause and after."""
    result = run_lockrun(renv, "-n", "again", "--ttl", "3", "--replicas", "2", "--retry", "1", "--retry-delay", "2.5",
                         "--", "sh", "-c", "sleep 0.2; false")
    assert (result.returncode, result.stderr) == (1, "")
    assert [(row["attempt"], row["status"]) for row in history(renv, "again")] == [(2, "failed"), (1, "failed")]
