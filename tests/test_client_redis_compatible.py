"""Redis-compatible servers (contract §16; docs/redis.md): the scripts call only what a server has
(``redis.replicate_commands`` only where it exists), so a server without it answers at once. The
reported case: fakeredis, which many teams use in their own tests, served over TCP by its own
TcpFakeServer (the test extras bring it); Redis 7 (every other test) and Valkey
(tests/test_eviction.py) keep running the same scripts."""

from __future__ import annotations

import json
import threading

import pytest

from tests.conftest import assert_one_line, free_port, history, isolated_env, run_lockrun
from tests.real_clients import missing


@pytest.fixture
def fakeredis_url():
    try:
        import fakeredis
    except ImportError:
        missing("fakeredis (Python)", "python3-fakeredis, or pip install -e '.[test]'")
    server = fakeredis.TcpFakeServer(("127.0.0.1", free_port()))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{server.server_address[1]}/0"
    server.shutdown()
    server.server_close()


def test_a_server_without_replicate_commands_answers_at_once(fakeredis_url, tmp_path):
    env = {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": fakeredis_url}
    # fakeredis runs no INFO inside a script: lockrun cannot tell its eviction policy and says so
    # in one line, at once (it was a 10 s "Timeout reading" on the unguarded replicate_commands).
    refused = run_lockrun(env, "-n", "fr", "--", "touch", str(tmp_path / "ran"), timeout=30)
    assert_one_line(refused, 69, "does not say whether it evicts keys", "--allow-eviction")
    assert not (tmp_path / "ran").exists()
    ran = run_lockrun(env, "-n", "fr", "--allow-eviction", "--", "sh", "-c", "echo $LOCKRUN_FENCING_TOKEN",
                      timeout=30)
    assert ran.returncode == 0 and int(ran.stdout) > 0, ran.stderr
    assert [row["status"] for row in history(env, "fr")] == ["succeeded", "unavailable"]
    status = json.loads(run_lockrun(env, "status", "fr", "--json", timeout=30).stdout)
    assert status["backend"] == "redis" and status["locks"][0]["state"] == "free"
