"""history --status: repeatable and comma-separated, with the group ``failures`` (failed, timeout,
lost, killed, abandoned, error, unavailable), for this host's ledger and the fleet record alike."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from tests.conftest import history, lockrun_argv, run_lockrun, spawn_lockrun, wait_until
from tests.test_input import assert_one_line
from tests.test_local import start_holder


def statuses(env, *args: str) -> list[str]:
    result = run_lockrun(env, "history", "--json", *args)
    assert result.returncode == 0, result.stderr
    return [row["status"] for row in json.loads(result.stdout)]


def record_outcomes(env, tmp_path, prefix: str) -> None:
    """succeeded, failed, timeout and busy runs, oldest first."""
    assert run_lockrun(env, "-n", f"{prefix}ok", "--", "true").returncode == 0
    assert run_lockrun(env, "-n", f"{prefix}bad", "--", "false").returncode == 1
    assert run_lockrun(env, "-n", f"{prefix}slow", "--timeout", "0.1", "--", "sleep", "30").returncode == 124
    holder = start_holder(env, tmp_path, f"{prefix}held")
    try:
        assert run_lockrun(env, "-n", f"{prefix}held", "--", "true").returncode == 75
    finally:
        holder.terminate()
        holder.communicate(timeout=30)  # killed


def test_statuses_combine_in_the_ledger(local_env, tmp_path):
    record_outcomes(local_env, tmp_path, "")
    crashed = start_holder(local_env, tmp_path, "crash")
    crashed.send_signal(signal.SIGKILL)  # abandoned: a running row whose lockrun is gone
    crashed.communicate(timeout=30)
    live = start_holder(local_env, tmp_path, "live")  # running
    try:
        every = statuses(local_env)
        assert sorted(every) == sorted(["running", "abandoned", "killed", "busy", "timeout", "failed", "succeeded"])
        assert statuses(local_env, "--status", "failed", "--status", "timeout") == ["timeout", "failed"]
        assert statuses(local_env, "--status", "failed,timeout") == ["timeout", "failed"]
        assert statuses(local_env, "--status", " timeout , failed ") == ["timeout", "failed"]
        assert statuses(local_env, "--status", "failures") == ["abandoned", "killed", "timeout", "failed"]
        assert statuses(local_env, "--status", "failures", "--limit", "1") == ["abandoned"]
        assert statuses(local_env, "--status", "failures,succeeded", "--status", "busy") == [
            "abandoned", "busy", "killed", "timeout", "failed", "succeeded"]
        assert statuses(local_env, "--status", "running,succeeded") == ["running", "succeeded"]
        assert statuses(local_env, "--status", "abandoned") == ["abandoned"]
        assert statuses(local_env, "--status", "running") == ["running"]
        assert statuses(local_env, "--status", "lost,error") == []
        # The human table filters the same way.
        table = run_lockrun(local_env, "history", "--status", "failed,timeout").stdout
        assert " timeout " in table and " failed " in table and " succeeded " not in table
    finally:
        live.terminate()
        live.communicate(timeout=30)


def test_statuses_combine_in_the_fleet_record(env, tmp_path):
    record_outcomes(env, tmp_path, "f-")
    fleet = ("--fleet",)
    # Busy skips are counted there, not kept as runs.
    assert statuses(env, *fleet) == ["killed", "timeout", "failed", "succeeded"]
    assert statuses(env, *fleet, "--status", "failed", "--status", "timeout") == ["timeout", "failed"]
    assert statuses(env, *fleet, "--status", "failed,timeout") == ["timeout", "failed"]
    assert statuses(env, *fleet, "--status", "failures") == ["killed", "timeout", "failed"]
    assert statuses(env, *fleet, "--status", "failures,succeeded", "--limit", "2") == ["killed", "timeout"]
    assert statuses(env, *fleet, "--status", "succeeded", "--status", "failed") == ["failed", "succeeded"]
    assert statuses(env, *fleet, "--status", "succeeded") == ["succeeded"]
    # ...and the ledger of this host agrees (where the busy skip is a row).
    assert statuses(env, "--status", "failures,busy") == ["busy", "killed", "timeout", "failed"]


def test_the_fleet_record_filters_abandoned_runs(env):
    """A run whose lockrun was SIGKILLed reads as abandoned once its lease is gone, and is a failure."""
    proc = spawn_lockrun(env, "-n", "gone", "--ttl", "1", "--", "sleep", "300", stderr=subprocess.PIPE)
    wait_until(lambda: statuses(env, "--fleet", "--status", "running") == ["running"], what="the run started")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    wait_until(lambda: statuses(env, "--fleet", "--status", "failures") == ["abandoned"], what="abandoned")
    assert statuses(env, "--fleet", "--status", "running") == []


@pytest.mark.parametrize("given", ["great", "failed,", ",failed", "failed,great", "Failed", "failure"])
def test_an_unknown_status_is_one_line_and_exit_2(local_env, given):
    assert_one_line(run_lockrun(local_env, "history", "--status", given), 2, "--status", repr(given),
                    "failures (failed, timeout, lost, killed, abandoned, error, unavailable)")
    assert_one_line(run_lockrun(local_env, "history", "--status", "failed", "--status", given), 2, repr(given))


def test_completion_offers_the_statuses_after_a_comma_too(local_env):
    def complete(words: str) -> list[str]:
        complete_env = dict(local_env, _LOCKRUN_COMPLETE="bash_complete", COMP_WORDS=words,
                            COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1)))
        result = subprocess.run(lockrun_argv(), env=complete_env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and result.stderr == "", result
        return [line.split(",", 1)[1] for line in result.stdout.splitlines()]

    offered = complete("lockrun history --status ")
    assert {"failed", "timeout", "abandoned", "failures", "succeeded"} <= set(offered)
    assert complete("lockrun history --status fail") == ["failed", "failures"]
    assert complete("lockrun history --status failed,ti") == ["failed,timeout"]
    assert history(local_env) == []  # completion ran nothing
