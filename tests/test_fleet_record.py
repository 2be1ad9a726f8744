"""The fleet record: two "hosts" (own host name, own ledger) on one real Redis see each other's runs."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import (
    RedisServer,
    as_host,
    client_commands,
    history,
    isolated_env,
    lockrun_argv,
    run_lockrun,
    spawn_lockrun,
    wait_until,
)


def test_status_on_one_host_shows_the_other_hosts_failure(hosts):
    assert hosts.run("app-b", "-n", "job", "--", "sh", "-c", "exit 3").returncode == 3
    lock = hosts.json("app-a", "status", "job")["locks"][0]
    assert lock["state"] == "free"
    last = lock["last_run"]
    assert (last["status"], last["exit_code"], last["host"]) == ("failed", 3, "app-b")
    table = hosts.run("app-a", "status", "job").stdout
    assert "failed (3) on app-b" in table
    # This host's own newer run wins over the fleet's older one, and the other way round.
    assert hosts.run("app-a", "-n", "job", "--", "true").returncode == 0
    assert hosts.json("app-b", "status", "job")["locks"][0]["last_run"]["host"] == "app-a"
    assert hosts.json("app-a", "status", "job")["locks"][0]["last_run"]["status"] == "succeeded"


def test_history_fleet_merges_every_host_newest_first(hosts):
    for hostname, code in (("app-a", 0), ("app-b", 1), ("app-a", 2), ("app-b", 0)):
        assert hosts.run(hostname, "-n", "nightly", "--", "sh", "-c", f"exit {code}").returncode == code
    assert hosts.run("app-b", "-n", "other", "--", "true").returncode == 0
    rows = hosts.json("app-a", "history", "--fleet")
    assert [(r["name"], r["host"], r["exit_code"]) for r in rows] == [
        ("other", "app-b", 0), ("nightly", "app-b", 0), ("nightly", "app-a", 2), ("nightly", "app-b", 1),
        ("nightly", "app-a", 0),
    ]
    tokens = [r["fencing_token"] for r in rows if r["name"] == "nightly"]
    assert tokens == sorted(tokens, reverse=True) and len(set(tokens)) == 4  # newest first
    # The same row objects as history --json, from this host's ledger.
    mine = hosts.json("app-a", "history")
    assert len(mine) == 2
    fleet_rows = {r["run_id"]: r for r in rows}
    for row in mine:
        shared = fleet_rows[row["run_id"]]
        for key in ("run_id", "name", "status", "exit_code", "signal", "host", "pid", "command", "backend",
                    "fencing_token", "once_key", "error"):
            assert shared[key] == row[key], key
        assert set(row) <= set(shared)
    assert {r["host"] for r in hosts.json("app-a", "history", "--fleet", "--host", "app-b")} == {"app-b"}
    assert len(hosts.json("app-a", "history", "--fleet", "nightly", "--limit", "2")) == 2
    assert [r["exit_code"] for r in hosts.json("app-a", "history", "--fleet", "--status", "failed")] == [2, 1]
    assert hosts.json("app-a", "history", "--fleet", "--since", "1h", "--host", "app-c") == []
    table = hosts.run("app-a", "history", "--fleet").stdout
    assert "app-b" in table and "app-a" in table


def test_a_sigkilled_run_reads_running_then_abandoned(hosts, tmp_path):
    flag = tmp_path / "started"
    holder = hosts.spawn("app-b", "-n", "purge", "--ttl", "2", "--", "sh", "-c", f"touch {flag}; sleep 60")
    try:
        wait_until(flag.exists, what="the holder on app-b")
        row = hosts.json("app-a", "history", "--fleet", "purge")[0]
        assert (row["status"], row["host"], row["ended_at"]) == ("running", "app-b", None)
        assert [r["run_id"] for r in hosts.json("app-a", "history", "--fleet", "--status", "running")] == [
            row["run_id"]]
        holder.send_signal(signal.SIGKILL)  # lockrun itself: no release, no end event
        holder.wait(10)
        wait_until(lambda: hosts.json("app-a", "history", "--fleet", "purge")[0]["status"] == "abandoned",
                   timeout=30, what="the run to read abandoned once its lease expired")
        assert hosts.json("app-a", "history", "--fleet", "--status", "abandoned")[0]["run_id"] == row["run_id"]
        assert hosts.run("app-a", "-n", "purge", "--", "true").returncode == 0
        rows = hosts.json("app-a", "history", "--fleet", "purge")
        assert [r["status"] for r in rows] == ["succeeded", "abandoned"]
    finally:
        holder.kill()
        holder.wait(10)


def _samples(text: str) -> dict:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_fleet_counts_every_hosts_outcomes(hosts, tmp_path):
    flag = tmp_path / "held"
    holder = hosts.spawn("app-a", "-n", "etl", "--", "sh", "-c", f"touch {flag}; sleep 30")
    try:
        wait_until(flag.exists, what="the holder")
        assert hosts.run("app-b", "-n", "etl", "--", "true").returncode == 75
        assert hosts.run("app-b", "-n", "etl", "-w", "0.3", "--", "true").returncode == 75  # one busy, not three
    finally:
        holder.terminate()
        holder.wait(30)
    assert hosts.run("app-b", "-n", "etl", "--", "sh", "-c", "exit 4").returncode == 4
    for _ in range(2):
        assert hosts.run("app-a", "-n", "daily", "--once", "d1", "--", "true").returncode == 0
    text = hosts.run("app-a", "metrics", "--fleet").stdout
    samples = _samples(text)

    def total(name, status):
        return samples.get(("lockrun_runs_total", (("name", name), ("status", status))))

    assert total("etl", "busy") == 2 and total("etl", "failed") == 1 and total("etl", "killed") == 1
    assert total("daily", "succeeded") == 1 and total("daily", "duplicate") == 1
    assert samples[("lockrun_last_exit_code", (("name", "etl"),))] == 4
    assert ("lockrun_last_success_timestamp_seconds", (("name", "etl"),)) not in samples
    assert samples[("lockrun_last_success_timestamp_seconds", (("name", "daily"),))] > time.time() - 120
    # This host's own metrics know only its own runs.
    own = _samples(hosts.run("app-b", "metrics").stdout)
    assert ("lockrun_runs_total", (("name", "daily"), ("status", "succeeded"))) not in own


def test_show_fleet_finds_another_hosts_run_with_its_tail(hosts):
    result = hosts.run("app-b", "-n", "rep", "--capture-tail", "1k", "--", "sh", "-c", "echo report-done; exit 5")
    assert result.returncode == 5 and result.stdout == "report-done\n"
    run_id = hosts.json("app-b", "history")[0]["run_id"]
    assert hosts.run("app-a", "show", run_id[:8]).returncode == 1
    shown = hosts.json("app-a", "show", run_id[:8], "--fleet")
    assert (shown["run_id"], shown["host"], shown["exit_code"], shown["output_tail"]) == (
        run_id, "app-b", 5, "report-done\n")
    assert [event["event"] for event in shown["events"]] == ["start", "end"]
    text = hosts.run("app-a", "show", run_id[:8], "--fleet").stdout
    assert "app-b" in text and "report-done" in text
    assert hosts.run("app-a", "show", "ffffffff", "--fleet").returncode == 1


def test_fleet_commands_exit_69_when_redis_is_down(hosts, redis_server):
    assert hosts.run("app-a", "-n", "x", "--", "true").returncode == 0
    redis_server.kill()
    for args in (("history", "--fleet"), ("metrics", "--fleet"), ("show", "abcd1234", "--fleet")):
        result = hosts.run("app-a", *args)
        assert result.returncode == 69, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    plain = hosts.run("app-a", "history", "--json")  # needs no backend
    assert plain.returncode == 0 and len(json.loads(plain.stdout)) == 1


def test_an_uncontended_run_is_still_two_round_trips(redis_server, env):
    for argv in (lockrun_argv("-n", "rt", "--", "true"), lockrun_argv("-n", "rt", "--slots", "2", "--", "true")):
        assert client_commands(redis_server, argv, env) == ["EVAL", "EVAL"]
    keys = redis_server.client().keys("lockrun:{rt}:*")
    assert {b"lockrun:{rt}:runs", b"lockrun:{rt}:last", b"lockrun:{rt}:counts"} <= set(keys)


def test_status_reads_many_locks_and_their_last_runs_in_one_call_per_batch(redis_server, env, tmp_path):
    """status over every lock: one script call per batch reads the holders and their fleet last
    runs (no GET/HGETALL/HMGET per name), and answers exactly as the per-name reads do."""
    flags = [tmp_path / f"started-{i}" for i in range(3)]
    for i in range(3):
        assert run_lockrun(env, "-n", f"done-{i}", "--", "sh", "-c", f"exit {i}").returncode == i
    holders = [spawn_lockrun(env, "-n", f"done-{i}", "--", "sh", "-c", f"touch {flags[i]}; exec sleep 60")
               for i in range(3)]
    try:
        for flag in flags:
            wait_until(flag.exists, what="three holders")
        commands = client_commands(redis_server, lockrun_argv("status", "--json"), env)
        # one EVAL for the holders and last runs, one for the names' pauses and cadences (docs/operating.md
        # "Pausing a job"), each per batch of names; the registry read once
        assert commands.count("EVAL") == 2 and commands.count("ZRANGE") == 1, commands
        assert not {"GET", "HGETALL", "HMGET", "SCAN"} & set(commands), commands
        locks = json.loads(run_lockrun(env, "status", "--json").stdout)["locks"]
        assert [(lock["name"], lock["state"], lock["last_run"]["exit_code"]) for lock in locks] == [
            ("done-0", "held", 0), ("done-1", "held", 1), ("done-2", "held", 2)]
        # A value that is not UTF-8 makes that batch read name by name: the same answer.
        redis_server.client().hset("lockrun:{done-1}:info", "host", b"\xff\xfe")
        again = json.loads(run_lockrun(env, "status", "--json").stdout)["locks"]
        assert [lock["last_run"]["exit_code"] for lock in again] == [0, 1, 2]
        moving = ("ttl_remaining_s", "heartbeat_age_s")
        assert again[1]["host"] == "\ufffd\ufffd"
        assert [{k: v for k, v in lock.items() if k not in moving} for lock in (again[0], again[2])] == [
            {k: v for k, v in lock.items() if k not in moving} for lock in (locks[0], locks[2])]
    finally:
        for holder in holders:
            holder.terminate()
            holder.wait(30)


def test_nothing_secret_in_the_record(tmp_path):
    server = RedisServer(password="s3cret-pw").start()
    try:
        env = {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": server.url}
        flag = tmp_path / "held"
        holder = spawn_lockrun(env, "-n", "sec", "--", "sh", "-c", f"touch {flag}; sleep 30")
        wait_until(flag.exists, what="the holder")
        client = server.client()
        token = client.get("lockrun:{sec}:lock")
        assert run_lockrun(env, "-n", "sec", "--", "true").returncode == 75
        holder.terminate()
        holder.wait(30)
        dump = b""
        for key in client.scan_iter("lockrun:{sec}:*"):
            kind = client.type(key)
            if kind == b"stream":
                dump += repr(client.xrange(key)).encode()
            elif kind == b"hash":
                dump += repr(client.hgetall(key)).encode()
        assert b"run_id" in dump and token not in dump and b"s3cret-pw" not in dump
        assert b"redis://" not in dump and b"unix://" not in dump
    finally:
        server.cleanup()


def test_a_record_that_cannot_be_written_changes_nothing(env, redis_server):
    client = redis_server.client()
    for kind in ("runs", "last", "counts"):
        client.set(f"lockrun:{{bad}}:{kind}", "not what lockrun wrote")
    result = run_lockrun(env, "-n", "bad", "--", "sh", "-c", "exit 7")
    assert (result.returncode, result.stderr) == (7, "")
    assert client.exists("lockrun:{bad}:lock") == 0  # released all the same
    assert run_lockrun(env, "-n", "bad", "--", "true").returncode == 0
    assert history(env)[0]["status"] == "succeeded"
    assert json.loads(run_lockrun(env, "history", "--fleet", "--json").stdout) == []
    assert run_lockrun(env, "metrics", "--fleet").returncode == 0
    assert run_lockrun(env, "status", "bad").returncode == 0


@pytest.mark.parametrize("fields", [
    {"event": "end", "run_id": "r1", "status": "x" * 10000, "pid": "99999999999999999999999", "command": "[1, 2]"},
    {"event": "start", "run_id": "r2", "started_at": "[1]", "fencing_token": "-"},
    {"event": "end"},
    {"event": "nonsense", "run_id": "r3"},
    {"run_id": "r4", "exit_code": "1e400", "duration_s": "nan", "ended_at": "\x1b[31mred"},
    {"event": "end", "run_id": "r5", "command": "[" * 100000, "row": "[" * 100000},  # nested past the parser's depth
    {"r": "r6", "s": "x" * 10000, "p": "99999999999999999999999", "c": "=[1, 2]", "h": "99", "t": "\xff",
     "e": "12", "d": "nan", "k": "-5"},
])
def test_records_written_by_someone_else_read_as_strange_runs(env, redis_server, fields):
    """Entries in the record's layout (an ``r``) read as strange runs; any other entry is no run."""
    client = redis_server.client()
    client.xadd("lockrun:{odd}:runs", fields)
    client.hset("lockrun:{odd}:last", mapping={k: v for k, v in fields.items() if k != "event"} or {"x": "y"})
    client.hset("lockrun:{odd}:counts", mapping={"failed": "many", "Ünïcode": 3, "busy": "-2", "succeeded": 1})
    for args in (("history", "--fleet"), ("history", "--fleet", "--json"), ("metrics", "--fleet"),
                 ("status", "odd"), ("status", "odd", "--json"), ("show", "abcd", "--fleet")):
        result = run_lockrun(env, *args)
        assert result.returncode in (0, 1), (args, result.stderr)
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert run_lockrun(env, "-n", "odd", "--", "true").returncode == 0
    rows = json.loads(run_lockrun(env, "history", "--fleet", "odd", "--json").stdout)
    assert rows[0]["status"] == "succeeded"
    assert [row["run_id"] for row in rows[1:]] == ([fields["r"]] if "r" in fields else [])
    samples = _samples(run_lockrun(env, "metrics", "--fleet").stdout)
    assert samples[("lockrun_runs_total", (("name", "odd"), ("status", "succeeded")))] == 2


def test_retention_bounds_the_record(tmp_path, redis_server):
    from lockrun.backends.redis.backend import RedisBackend
    from lockrun.backends.values import FleetRecord, FleetRetention, Lease

    backend = RedisBackend(redis_server.url, "lockrun:", 2.0, fleet=FleetRetention(keep_runs=10, keep_days=2))
    try:
        for i in range(400):
            lease = backend.acquire("ret", f"token{i}", 5.0, {"run_id": f"run{i}", "host": "h"})
            assert isinstance(lease, Lease)
            row = {"run_id": f"run{i}", "status": "succeeded", "host": "h", "exit_code": 0,
                   "ended_at": "2026-12-01T00:00:00.000000Z"}
            assert backend.release(lease, record=FleetRecord(row))
    finally:
        backend.close()
    client = redis_server.client()
    length = client.xlen("lockrun:{ret}:runs")
    assert 10 <= length <= 110  # at least the newest 10 runs (one entry each), trimmed in whole nodes of 100
    newest = client.xrevrange("lockrun:{ret}:runs", count=2)
    assert [e[1][b"r"] for e in newest] == [b"run399", b"run398"]
    assert client.hlen("lockrun:{ret}:open") == 0  # every run ended
    for kind in ("runs", "last", "counts", "vals"):
        assert 0 < client.pttl(f"lockrun:{{ret}}:{kind}") <= 2 * 86400 * 1000
    assert client.hget("lockrun:{ret}:counts", "succeeded") == b"400"


def test_a_retried_release_records_the_end_once(redis_server):
    from lockrun.backends.redis.backend import RedisBackend
    from lockrun.backends.values import FleetRecord

    backend = RedisBackend(redis_server.url, "lockrun:", 2.0)
    try:
        lease = backend.acquire("twice", "tok", 5.0, {"run_id": "r1"})
        record = FleetRecord({"run_id": "r1", "status": "succeeded"})
        assert backend.release(lease, record=record) is True
        assert backend.release(lease, record=record) is False  # a retry after a lost reply
    finally:
        backend.close()
    events = [e[1][b"r"] for e in redis_server.client().xrange("lockrun:{twice}:runs")]
    assert events == [b"r1"]  # one entry per finished run, once
    assert redis_server.client().keys("lockrun:{twice}:ended:*") == []  # no marker per run
    assert redis_server.client().hget("lockrun:{twice}:counts", "succeeded") == b"1"


def test_local_backend_fleet_is_this_host(local_env):
    assert run_lockrun(local_env, "-n", "loc", "--", "sh", "-c", "exit 2").returncode == 2
    rows = history(local_env, "--fleet")
    assert [(r["name"], r["exit_code"], r["backend"]) for r in rows] == [("loc", 2, "local")]
    assert "lockrun_runs_total" in run_lockrun(local_env, "metrics", "--fleet").stdout
    assert run_lockrun(local_env, "show", rows[0]["run_id"][:8], "--fleet").returncode == 0


def test_unlock_is_recorded_in_the_fleet_but_is_not_the_last_run(hosts, tmp_path):
    assert hosts.run("app-a", "-n", "z", "--", "sh", "-c", "exit 9").returncode == 9
    flag = tmp_path / "held"
    holder = hosts.spawn("app-a", "-n", "z", "--ttl", "30", "--", "sh", "-c", f"touch {flag}; sleep 60")
    try:
        wait_until(flag.exists, what="the holder")
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        cleared = hosts.run("app-b", "unlock", "z", "--force", "--yes")
        assert cleared.returncode == 0, cleared.stderr
    finally:
        holder.kill()
        holder.wait(10)
    rows = hosts.json("app-a", "history", "--fleet", "z")
    assert [(r["status"], r["host"]) for r in rows] == [("unlocked", "app-b"), ("abandoned", "app-a"),
                                                        ("failed", "app-a")]
    # An unlock is not a run: no exit status, in the fleet record as in the unlocking host's ledger.
    in_ledger = hosts.json("app-b", "history", "z", "--status", "unlocked")[0]
    assert rows[0]["exit_status"] is None and in_ledger["exit_status"] is None
    assert rows[0]["exit_code"] is None and in_ledger["exit_code"] is None
    last = hosts.json("app-b", "status", "z")["locks"][0]["last_run"]
    assert (last["status"], last["exit_code"]) == ("failed", 9)


def test_show_fleet_pages_through_long_streams(redis_server, monkeypatch):
    from lockrun.backends.redis import fleet as redis_fleet
    from lockrun.backends.redis.backend import RedisBackend
    from lockrun.backends.values import FleetRecord, Lease
    from lockrun.views import fleet

    monkeypatch.setattr(redis_fleet, "FIND_PAGE", 7)  # every scan call sees a few entries only
    backend = RedisBackend(redis_server.url, "lockrun:", 2.0)
    try:
        for i in range(30):
            lease = backend.acquire("long", f"tok{i}", 5.0, {"run_id": f"{i:032x}", "host": "h"})
            assert isinstance(lease, Lease)
            backend.release(lease, record=FleetRecord({"run_id": f"{i:032x}", "status": "failed", "exit_code": i}))
        row, tail, events = fleet.find_run(backend.fleet_record(), backend.holders, f"{0:032x}")
        assert (row["exit_code"], [e["event"] for e in events], tail) == (0, ["start", "end"], None)
        assert fleet.find_run(backend.fleet_record(), backend.holders, f"{29:032x}")[0]["exit_code"] == 29
        with pytest.raises(fleet.FleetReadError):
            fleet.find_run(backend.fleet_record(), backend.holders, "0000")
    finally:
        backend.close()


def test_timeline_fleet_draws_every_hosts_runs(hosts, tmp_path):
    assert hosts.run("app-a", "-n", "tl", "--", "true").returncode == 0
    assert hosts.run("app-b", "-n", "tl", "--", "sh", "-c", "exit 1").returncode == 1
    assert hosts.run("app-b", "-n", "other", "--", "true").returncode == 0
    env = {**hosts.env("app-a"), "NO_COLOR": "1", "TZ": "UTC"}

    def drawn(*args):
        result = subprocess.run(as_host("app-a", lockrun_argv("timeline", "--since", "10m", "--width", "120", *args)),
                                env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    own = drawn()
    assert "tl" in own and "other" not in own  # this host's ledger: app-a's one run
    every = drawn("--fleet", "--by-host")
    lines = [line for line in every.splitlines() if line.startswith(("tl", "other"))]
    assert any("app-a" in line for line in lines) and any("app-b" in line for line in lines)
    assert any(line.startswith("other") for line in lines)
    assert "F" in every and "S" in every  # app-b's failure and the successes, as letters without colour
    svg = tmp_path / "fleet.svg"
    assert subprocess.run(as_host("app-a", lockrun_argv("timeline", "--fleet", "--svg", str(svg))), env=env,
                          timeout=60).returncode == 0
    assert "every host" in svg.read_text()


def test_a_host_without_the_run_names_the_fleet_record(hosts):
    """history and show on a host that did not run the job say where its runs are (README "Why did
    it fail?"), on stderr, without asking Redis; with --fleet they find them."""
    failed = hosts.run("app-a", "-n", "nightly", "--", "sh", "-c", "exit 3")
    assert failed.returncode == 3
    run_id = hosts.json("app-a", "history", "nightly")[0]["run_id"]
    empty = hosts.run("app-b", "history", "nightly")
    assert empty.returncode == 0 and "no runs recorded" in empty.stdout
    assert empty.stderr.count("\n") == 1 and "add --fleet" in empty.stderr
    missing = hosts.run("app-b", "show", run_id[:8])
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "add --fleet" in missing.stderr
    found = hosts.run("app-b", "show", run_id[:8], "--fleet")
    assert found.returncode == 0 and "failed" in found.stdout
    assert "--capture-tail SIZE keeps" in found.stdout  # no tail kept: how to keep one
    assert hosts.run("app-a", "history", "nightly").stderr == ""  # found here: nothing to add
