"""The smoke test of the supported range: what CI's "newest" and "oldest" legs run beside the
unit layer (README "Running the tests"), on the newest releases of lockrun's dependencies and on
the oldest Python with every dependency at its lower bound. One real Redis, one real lockrun per
step: a run, `history` (its JSON and its table), `status` of a live holder, and `unlock` refusing
that holder while it lives and clearing it once it was SIGKILLed.
"""

from __future__ import annotations

import json
import signal
import subprocess

from tests.conftest import history, run_lockrun, spawn_lockrun, wait_until


def status(env: dict, *names: str) -> list[dict]:
    result = run_lockrun(env, "status", "--json", *names)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["locks"]


def test_a_run_its_history_status_and_the_unlock_of_a_dead_holder(env, tmp_path, redis_server):
    ran = run_lockrun(env, "-n", "smoke", "--ttl", "30", "--", "sh", "-c", "echo out; exit 3")
    assert (ran.returncode, ran.stdout, ran.stderr) == (3, "out\n", "")
    stopped = run_lockrun(env, "-n", "smoke", "--timeout", "0.2", "--", "sleep", "30")
    assert stopped.returncode == 124, stopped.stderr

    timed_out, failed = history(env, "smoke")
    assert (failed["status"], failed["exit_code"], failed["exit_status"]) == ("failed", 3, 3)
    assert (timed_out["status"], timed_out["signal"], timed_out["exit_status"]) == ("timeout", 15, 124)
    table = run_lockrun(env, "history", "smoke")
    assert table.returncode == 0, table.stderr
    # The EXIT column says numbers on every Python (3.10 once wrote "ExitCode.TIMEOUT (sig 15)").
    assert "124 (sig 15)" in table.stdout and "ExitCode" not in table.stdout

    started = tmp_path / "started"
    holder = spawn_lockrun(env, "-n", "held", "--ttl", "600", "--", "sh", "-c", f"touch {started}; exec sleep 300")
    try:
        wait_until(started.exists, what="the holder's command to start")
        (lock,) = status(env, "held")
        assert (lock["state"], lock["pid"]) == ("held", holder.pid)
        refused = run_lockrun(env, "unlock", "held", "--yes")
        assert refused.returncode == 1 and "--force" in refused.stderr
        with redis_server.client() as client:  # closed here: redis-py 5.0 leaves it to the collector, which warns
            assert client.exists("lockrun:{held}:lock") == 1
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)

    (lock,) = status(env, "held")
    assert lock["state"] == "zombie"
    cleared = run_lockrun(env, "unlock", "held", "--yes")
    assert cleared.returncode == 0 and "cleared 'held'" in cleared.stdout, cleared.stderr
    assert status(env, "held")[0]["state"] == "free"
    assert history(env, "held", "--status", "unlocked")[0]["status"] == "unlocked"
    # The lease of the SIGKILLed holder's command ended with it (PDEATHSIG, the watchdog).
    assert subprocess.run(["pgrep", "-f", str(started)], capture_output=True).returncode == 1
