"""`lockrun pause` / `resume` (docs/operating.md "Pausing a job"), through real processes on both
backends and on two simulated hosts: a paused name's runs are skipped (exit 0, ledger status
paused), a pause ends by itself, never stops a running command, and one lockrun did not write is
shown and not honoured."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.conftest import assert_one_line, history, run_lockrun, spawn_lockrun, wait_until


def status_json(env, *names):
    result = run_lockrun(env, "status", "--json", *names)
    assert result.returncode == 0, result.stderr
    return {lock["name"]: lock for lock in json.loads(result.stdout)["locks"]}


@pytest.mark.parametrize("slots", ["1", "2"])
def test_a_paused_name_skips_its_runs_until_resumed(any_env, tmp_path, slots):
    marker = tmp_path / "ran"
    paused = run_lockrun(any_env, "pause", "job", "--for", "1h", "--reason", "db migration")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("job: paused until ") and "(db migration)" in paused.stdout

    quiet = run_lockrun(any_env, "-n", "job", "--slots", slots, "--", "touch", str(marker))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")  # cron mails nothing
    told = run_lockrun(any_env, "-v", "-n", "job", "--slots", slots, "--", "touch", str(marker))
    assert told.returncode == 0
    assert told.stderr.count("\n") == 1 and "'job': paused until" in told.stderr and "skipped" in told.stderr
    assert not marker.exists()
    rows = history(any_env, "job")
    assert [row["status"] for row in rows] == ["paused", "paused"]
    assert rows[0]["exit_status"] == 0 and "db migration" in rows[0]["note"]

    # status lists a paused name, held or not, with who paused it, where and why
    lock = status_json(any_env)["job"]
    assert lock["state"] == "free"
    assert lock["paused"]["reason"] == "db migration" and lock["paused"]["problem"] is None
    assert lock["paused"]["where"] == os.uname().nodename and lock["paused"]["until"].endswith("Z")
    table = run_lockrun(any_env, "status")
    assert "free, paused" in table.stdout and "job: paused until" in table.stdout

    resumed = run_lockrun(any_env, "resume", "job", "other")
    assert resumed.stdout == "job: resumed\nother: was not paused\n"
    assert run_lockrun(any_env, "-n", "job", "--slots", slots, "--", "touch", str(marker)).returncode == 0
    assert marker.exists()
    assert status_json(any_env, "job")["job"]["paused"] is None


def test_a_pause_ends_by_itself(any_env, tmp_path):
    assert run_lockrun(any_env, "pause", "job", "--for", "1").returncode == 0
    assert run_lockrun(any_env, "-n", "job", "--", "true").returncode == 0
    assert history(any_env, "job")[0]["status"] == "paused"
    wait_until(lambda: run_lockrun(any_env, "-n", "job", "--", "true").returncode == 0
               and history(any_env, "job")[0]["status"] == "succeeded", timeout=20, what="the pause to end")
    assert "job" not in status_json(any_env)


def test_a_pause_never_stops_a_running_command_and_unlock_never_ends_a_pause(any_env, tmp_path):
    go, done = tmp_path / "go", tmp_path / "done"
    script = f"while [ ! -e {go} ]; do sleep 0.05; done; touch {done}"
    proc = spawn_lockrun(any_env, "-n", "job", "--ttl", "3", "--", "sh", "-c", script)
    wait_until(lambda: status_json(any_env, "job")["job"]["state"] == "held", what="the run to hold the lock")
    assert run_lockrun(any_env, "pause", "job", "--for", "1h").returncode == 0
    held = status_json(any_env, "job")["job"]
    assert held["state"] == "held" and held["paused"] is not None  # the pause did not touch the lock
    # a run of the paused name neither waits for the holder nor asks it to stop: a paused skip
    for argv in (("--wait", "60"), ("--replace",), ()):
        started = time.monotonic()
        skipped = run_lockrun(any_env, "-n", "job", *argv, "--", "true")
        assert (skipped.returncode, skipped.stderr) == (0, "") and time.monotonic() - started < 20, argv
    assert [row["status"] for row in history(any_env, "job")[:3]] == ["paused"] * 3
    assert proc.poll() is None and status_json(any_env, "job")["job"]["state"] == "held"
    go.touch()
    assert proc.wait(timeout=30) == 0 and done.exists()
    assert [row["status"] for row in history(any_env, "job")] == ["paused"] * 3 + ["succeeded"]

    # unlock --force of a holder leaves the pause alone
    proc = spawn_lockrun(any_env, "-n", "job2", "--ttl", "3", "--", "sleep", "30")
    wait_until(lambda: status_json(any_env, "job2")["job2"]["state"] == "held", what="job2 to be held")
    assert run_lockrun(any_env, "pause", "job2", "--for", "1h").returncode == 0
    assert run_lockrun(any_env, "unlock", "job2", "--force", "--yes").returncode == 0
    proc.wait(timeout=30)
    assert status_json(any_env, "job2")["job2"]["paused"] is not None
    assert run_lockrun(any_env, "-n", "job2", "--", "true").returncode == 0
    assert history(any_env, "job2")[0]["status"] == "paused"


def test_a_pause_on_one_host_skips_the_runs_of_another(hosts, redis_server):
    paused = hosts.run("app-a", "pause", "nightly", "--for", "1h", "--reason", "deploy")
    assert paused.returncode == 0, paused.stderr
    skipped = hosts.run("app-b", "-n", "nightly", "--", "true")
    assert (skipped.returncode, skipped.stderr) == (0, "")
    assert [row["status"] for row in hosts.json("app-b", "history", "nightly")] == ["paused"]
    # counted in the fleet record as busy skips are
    assert redis_server.client().hget("lockrun:{nightly}:counts", "paused") == b"1"
    pause = {lock["name"]: lock for lock in hosts.json("app-b", "status")["locks"]}["nightly"]["paused"]
    assert (pause["where"], pause["reason"]) == ("app-a", "deploy")
    assert hosts.run("app-b", "resume", "nightly").returncode == 0
    assert hosts.run("app-a", "-n", "nightly", "--", "true").returncode == 0
    assert hosts.json("app-a", "history", "nightly")[0]["status"] == "succeeded"


@pytest.mark.parametrize("argv, needle", [
    ((), "exactly one of --for DURATION and --until TIME"),
    (("--for", "1h", "--until", "23:59"), "exactly one of"),
    (("--for", "31d"), "at most 30d"),
    (("--for", "0"), "more than 0"),
    (("--until", "2h"), "for a duration use --for"),
    (("--until", "2020-01-01"), "after now and at most 30d ahead"),
    (("--until", "soon"), "expected a time"),
    (("--for", "1h", "--reason", "two\nlines"), "one line of at most 200"),
    (("--for", "1h", "--reason", "x" * 201), "one line of at most 200"),
])
def test_a_pause_always_ends_and_bad_values_are_one_line(local_env, argv, needle):
    assert_one_line(run_lockrun(local_env, "pause", "job", *argv), 2, needle)
    assert run_lockrun(local_env, "status", "--json").returncode == 0
    assert "job" not in status_json(local_env)


def plant_foreign_pause(env, redis_server, tmp_path, how):
    if "LOCKRUN_REDIS_URL" in env:
        client = redis_server.client()
        if how == "string":
            client.set("lockrun:{job}:paused", "yes")
        else:
            client.hset("lockrun:{job}:paused", "who", "someone")  # no until_ms, no expiry
        return
    locks = tmp_path / "state" / "locks"
    locks.mkdir(parents=True, exist_ok=True, mode=0o700)
    (tmp_path / "state").chmod(0o700)
    path = locks / "job~paused"
    if how == "string":
        path.write_text("[not json")
    else:
        path.symlink_to(tmp_path / "elsewhere")  # never followed


@pytest.mark.parametrize("how", ["string", "other"])
def test_a_malformed_pause_is_shown_and_not_honoured(any_env, tmp_path, request, how):
    server = request.getfixturevalue("redis_server") if "LOCKRUN_REDIS_URL" in any_env else None
    plant_foreign_pause(any_env, server, tmp_path, how)
    marker = tmp_path / "ran"
    result = run_lockrun(any_env, "-n", "job", "--", "touch", str(marker))
    assert_one_line(result, 0, "ignoring a malformed pause", "lockrun resume job removes it")
    assert marker.exists() and history(any_env, "job")[0]["status"] == "succeeded"
    lock = status_json(any_env)["job"]
    assert lock["paused"]["problem"] and "Traceback" not in run_lockrun(any_env, "status").stderr
    assert "a malformed pause, not honoured" in run_lockrun(any_env, "status").stdout
    assert run_lockrun(any_env, "resume", "job").stdout == "job: resumed\n"
    assert status_json(any_env, "job")["job"]["paused"] is None


@pytest.mark.parametrize("fields", [
    {"until_ms": "-5"},  # a number, but no end lockrun would write (and no `until`)
    {"until_ms": "1e3"},
    {"until_ms": "99999999999999999999999"},
    {"until_ms": "{future_ms}", "until": "\xff not a time"},
    {"until_ms": "{future_ms}", "until": "{future_iso}", "who": "x" * 100_000},
])
def test_a_pause_status_calls_malformed_is_not_honoured_by_a_run_either(env, redis_server, tmp_path, fields):
    # A hash with a numeric until_ms and an expiry, but fields lockrun never writes: status and
    # check say "not honoured", so the run must go on too (and say so), not skip in silence.
    future_ms = int((time.time() + 600) * 1000)
    future_iso = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(future_ms / 1000))
    filled = {key: value.replace("{future_ms}", str(future_ms)).replace("{future_iso}", future_iso)
              for key, value in fields.items()}
    client = redis_server.client()
    client.hset("lockrun:{job}:paused", mapping=filled)
    client.pexpire("lockrun:{job}:paused", 600_000)
    marker = tmp_path / "ran"
    result = run_lockrun(env, "-n", "job", "--", "touch", str(marker))
    assert_one_line(result, 0, "ignoring a malformed pause", "lockrun resume job removes it")
    assert marker.exists() and history(env, "job")[0]["status"] == "succeeded"
    assert status_json(env, "job")["job"]["paused"]["problem"]
