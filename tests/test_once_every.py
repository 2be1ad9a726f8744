"""--once-every DURATION: run only when the name's last success started at least DURATION ago,
judged with the lock taken (docs/reference.md "Usage"; docs/reference.md "`--once-every`: catching up").
With Redis the acquire script judges it from the fleet record, by the server's clock: two hosts
cannot both find the name stale, and a client whose clock is wrong changes nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import assert_one_line, history, lockrun_argv, run_lockrun, wait_until


def counter(path: Path) -> list[str]:
    """A command that appends one line to ``path`` (how many times the job's work ran)."""
    return ["sh", "-c", f'echo ran >> "{path}"']


def test_a_recent_success_skips_and_a_failure_does_not_count(any_env, tmp_path):
    work = tmp_path / "work"
    assert run_lockrun(any_env, "-n", "daily", "--once-every", "1h", "--", *counter(work)).returncode == 0
    skipped = run_lockrun(any_env, "-v", "-n", "daily", "--once-every", "1h", "--", *counter(work))
    assert skipped.returncode == 0 and "--once-every 1h: the last success started" in skipped.stderr
    assert "next due" in skipped.stderr, skipped.stderr
    assert work.read_text().count("ran") == 1
    newest = history(any_env, "daily")[0]
    assert newest["status"] == "duplicate" and "next due" in newest["note"], newest
    # Without -v a skip is quiet, as a --once duplicate is.
    assert run_lockrun(any_env, "-n", "daily", "--once-every", "1h", "--", "true").stderr == ""
    # A failure is no success: a 1-second --once-every after a failed run runs at once.
    assert run_lockrun(any_env, "-n", "flaky", "--", "sh", "-c", "exit 3").returncode == 3
    assert run_lockrun(any_env, "-n", "flaky", "--once-every", "1s", "--", *counter(tmp_path / "f")).returncode == 0
    assert (tmp_path / "f").read_text().count("ran") == 1
    # Once the success is old enough, the next run runs (any run's success counts, with or without the flag).
    started = json.loads(run_lockrun(any_env, "history", "flaky", "--json").stdout)[0]["started_at"]
    wait_until(lambda: run_lockrun(any_env, "-n", "flaky", "--once-every", "1s", "--", *counter(tmp_path / "f"))
               .returncode == 0 and (tmp_path / "f").read_text().count("ran") == 2, timeout=15,
               what=f"a run 1 s after the success that started at {started}")


def test_it_composes_with_once(any_env, tmp_path):
    work = tmp_path / "work"
    args = ("-n", "both", "--once", "k1", "--once-every", "1h", "--")
    assert run_lockrun(any_env, *args, *counter(work)).returncode == 0
    again = run_lockrun(any_env, "-n", "both", "--once", "k2", "--once-every", "1h", "--", *counter(work))
    assert again.returncode == 0, again.stderr
    assert work.read_text().count("ran") == 1  # k2 is new, but the name's last success is recent


def test_two_hosts_stale_at_once_run_the_work_once(hosts, tmp_path):
    work = tmp_path / "work"
    slow = ["sh", "-c", f'sleep 1; echo ran >> "{work}"']
    procs = [hosts.spawn(host, "-n", "nightly", "--once-every", "20h", "--wait", "60", "--", *slow)
             for host in ("app-a", "app-b", "app-c")]
    assert [p.wait(90) for p in procs] == [0, 0, 0]
    assert work.read_text().count("ran") == 1
    rows = hosts.json("app-a", "history", "--fleet", "nightly")
    assert sorted(row["status"] for row in rows) == ["succeeded"], rows  # skips are counted, not rows
    metrics = hosts.run("app-a", "metrics", "--fleet").stdout
    assert 'lockrun_runs_total{name="nightly",status="duplicate"} 2' in metrics, metrics


def test_the_server_clock_judges_not_the_client(hosts, tmp_path, redis_server):
    if not shutil.which("faketime"):
        pytest.fail("this test needs faketime(1) (Debian's faketime); .ci/run installs it")
    work = tmp_path / "work"
    assert hosts.run("app-a", "-n", "job", "--once-every", "1h", "--", *counter(work)).returncode == 0
    # A host whose clock is two hours ahead still finds the success 0 s old, by the server's clock.
    ahead = subprocess.run(["unshare", "--uts", "sh", "-c", 'hostname app-b && exec "$@"', "sh",
                            "faketime", "-f", "+2h", *lockrun_argv("-n", "job", "--once-every", "1h", "--",
                                                                    *counter(work))],
                           env=hosts.env("app-b"), capture_output=True, text=True, timeout=60)
    assert ahead.returncode == 0, ahead.stderr
    assert work.read_text().count("ran") == 1
    assert redis_server.client().hget("lockrun:{job}:last", "success_ms").isdigit()


def test_foreign_success_records_are_read_defensively(env, local_env, tmp_path, redis_server):
    client = redis_server.client()
    client.hset("lockrun:{r}:last", mapping={"success_ms": "not a number"})
    done = run_lockrun(env, "-n", "r", "--once-every", "1h", "--", *counter(tmp_path / "r"))
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert (tmp_path / "r").read_text() == "ran\n"  # no success it can read: the job runs
    client.delete("lockrun:{r2}:last")
    client.set("lockrun:{r2}:last", "a string, not a hash")
    done = run_lockrun(env, "-n", "r2", "--once-every", "1h", "--", *counter(tmp_path / "r2"))
    assert done.returncode == 0 and (tmp_path / "r2").read_text() == "ran\n", done.stderr
    # The local backend: its lock description, with junk where the last success would be.
    assert run_lockrun(local_env, "-n", "l", "--", "true").returncode == 0
    description = next(Path(local_env["LOCKRUN_STATE_DIR"]).rglob("l.json"))
    record = json.loads(description.read_text())
    for junk in ("soon", float("inf"), [1], True):
        record["last_success_epoch"] = junk
        description.write_text(json.dumps(record))
        done = run_lockrun(local_env, "-n", "l", "--once-every", "1h", "--", *counter(tmp_path / "l"))
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert (tmp_path / "l").read_text().count("ran") == 4  # each run found no success it could read


@pytest.mark.parametrize(("args", "needle"), [
    (("--once-every", "0"), "at least 1s and at most 365d"),
    (("--once-every", "366d"), "at least 1s and at most 365d"),
    (("--once-every", "-5"), "at least 1s"),
    (("--once-every", "1h", "--slots", "2"), "--slots 2 cannot be combined with --once-every"),
])
def test_bad_values_are_one_line_and_exit_2(any_env, args, needle):
    assert_one_line(run_lockrun(any_env, "-n", "x", *args, "--", "true"), 2, needle)


def test_longer_than_the_fleet_record_remembers_is_refused(env):
    assert_one_line(run_lockrun(env, "-n", "x", "--once-every", "31d", "--", "true"), 2,
                    "longer than the fleet record keeps", "fleet_keep_days = 30")


def test_a_success_in_the_future_counts_as_recent_and_says_so(local_env, tmp_path):
    assert run_lockrun(local_env, "-n", "l", "--", "true").returncode == 0
    description = next(Path(local_env["LOCKRUN_STATE_DIR"]).rglob("l.json"))
    record = json.loads(description.read_text())
    record["last_success_epoch"] = record.get("last_success_epoch", 0) + 7200  # the clock went back 2 h
    description.write_text(json.dumps(record))
    skipped = run_lockrun(local_env, "-v", "-n", "l", "--once-every", "1h", "--", *counter(tmp_path / "l"))
    assert skipped.returncode == 0 and not (tmp_path / "l").exists()
    assert "in the future: a clock was set back" in skipped.stderr, skipped.stderr


@pytest.mark.parametrize("junk", ["inf", "1e300", "9999999999999999999", "253402300800000"])
def test_a_success_no_clock_could_give_is_foreign_not_an_internal_error(env, redis_server, tmp_path, junk):
    # A number, but no time lockrun writes (infinite, past the year 9999): the job runs, as for any
    # success_ms it cannot read, rather than exit 125 on every run until someone deletes the field.
    assert run_lockrun(env, "-n", "r", "--", "true").returncode == 0
    redis_server.client().hset("lockrun:{r}:last", "success_ms", junk)
    done = run_lockrun(env, "-v", "-n", "r", "--once-every", "1h", "--", *counter(tmp_path / "r"))
    assert done.returncode == 0 and "lockrun failed" not in done.stderr, done.stderr
    assert (tmp_path / "r").read_text() == "ran\n"


@pytest.mark.parametrize("junk", [1e300, 1e18, 9999999999999])
def test_a_local_success_no_clock_could_give_is_foreign_not_an_internal_error(local_env, tmp_path, junk):
    assert run_lockrun(local_env, "-n", "l", "--", "true").returncode == 0
    description = next(Path(local_env["LOCKRUN_STATE_DIR"]).rglob("l.json"))
    record = json.loads(description.read_text())
    record["last_success_epoch"] = junk
    description.write_text(json.dumps(record))
    done = run_lockrun(local_env, "-v", "-n", "l", "--once-every", "1h", "--", *counter(tmp_path / "l"))
    assert done.returncode == 0 and "lockrun failed" not in done.stderr, done.stderr
    assert (tmp_path / "l").read_text() == "ran\n"
