"""The local backend's own promises: kernel locks that die with their holder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.conftest import history, run_lockrun, spawn_lockrun, wait_until


def start_holder(env, tmp_path, name, *extra):
    flag = tmp_path / f"{name.replace('/', '_')}.started"
    proc = spawn_lockrun(env, "-n", name, *extra, "--", "sh", "-c", f"touch {flag}; exec sleep 300",
                         stderr=subprocess.PIPE)
    wait_until(flag.exists, what=f"the holder of {name}")
    return proc


def test_a_sigkilled_local_holder_leaves_no_stuck_lock(local_env, tmp_path):
    proc = start_holder(local_env, tmp_path, "crash")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    result = run_lockrun(local_env, "-n", "crash", "--", "echo", "free")
    assert (result.returncode, result.stdout) == (0, "free\n")
    assert [r["status"] for r in history(local_env, "crash")] == ["succeeded", "abandoned"]


def test_status_shows_a_local_holder_without_ttl(local_env, tmp_path):
    proc = start_holder(local_env, tmp_path, "team/db:nightly")  # "/" and ":" are fine in names
    try:
        doc = json.loads(run_lockrun(local_env, "status", "--json").stdout)
        assert doc["backend"] == "local"
        (lock,) = doc["locks"]
        assert (lock["name"], lock["state"], lock["pid"], lock["ttl_remaining_s"]) == (
            "team/db:nightly", "held", proc.pid, None)
        human = run_lockrun(local_env, "status")
        assert human.stdout.startswith("backend: local") and "team/db:nightly" in human.stdout
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert json.loads(run_lockrun(local_env, "status", "--json").stdout)["locks"] == []


def test_local_unlock_refuses_a_live_holder_and_force_stops_it(local_env, tmp_path):
    proc = start_holder(local_env, tmp_path, "live", "--ttl", "2")
    refused = run_lockrun(local_env, "unlock", "live", "--yes")
    assert refused.returncode == 1 and "--force" in refused.stderr
    forced = run_lockrun(local_env, "unlock", "live", "--force", "--yes")
    assert forced.returncode == 0, forced.stderr
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 76 and "taken over or cleared" in err
    assert run_lockrun(local_env, "unlock", "live").stdout == "'live' is not held\n"
    assert history(local_env, "live", "--status", "unlocked")


def test_the_command_does_not_inherit_the_lock(local_env, tmp_path):
    script = (
        "import os\n"
        "for fd in os.listdir('/proc/self/fd'):\n"
        "    try: print(os.readlink(f'/proc/self/fd/{fd}'))\n"
        "    except OSError: pass\n"
    )
    result = run_lockrun(local_env, "-n", "fds", "--", sys.executable, "-c", script)
    assert result.returncode == 0
    assert ".lock" not in result.stdout and "ledger.db" not in result.stdout


def test_state_dir_is_private(local_env, tmp_path):
    run_lockrun(local_env, "-n", "perm", "--", "true")
    assert os.stat(tmp_path / "state" / "locks").st_mode & 0o077 == 0


def test_release_token_lets_the_kernel_lock_go(local_env):
    """For an acquire whose reply was lost: what the token holds is given back."""
    from lockrun.backends.local.backend import LocalBackend
    from lockrun.backends.values import Lease

    backend = LocalBackend(local_env["LOCKRUN_STATE_DIR"])
    try:
        assert isinstance(backend.acquire("given", "tok", 30.0, {"run_id": "r1"}), Lease)
        assert run_lockrun(local_env, "-n", "given", "--", "true").returncode == 75
        assert backend.release_token("given", "another token") is False
        assert backend.release_token("given", "tok") is True
        assert run_lockrun(local_env, "-n", "given", "--", "true").returncode == 0
    finally:
        backend.close()
