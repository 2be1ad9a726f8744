"""The compact fleet record and the registry of names (issue 23): its size, the upgrade from the
older layout, and reads that never walk the keyspace (README "One fleet, one memory")."""

from __future__ import annotations

import json
import time
import uuid

from tests.conftest import history, run_lockrun, spawn_lockrun, wait_until

HOST = "app-17.prod.eu-west-1.example.internal"
COMMAND = ["/opt/app/bin/sync-invoices", "--since", "1h", "--batch", "500"]


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def _runs(backend, name: str, count: int) -> None:
    """``count`` runs as the runner records them: a full row and its lost-lease variant."""
    from lockrun.backends.values import FleetRecord, Lease

    for i in range(count):
        run_id, token, now = uuid.uuid4().hex, uuid.uuid4().hex, time.time()
        info = {"token": token, "run_id": run_id, "host": HOST, "boot_id": str(uuid.uuid4()), "pid": str(4000 + i),
                "command": json.dumps(COMMAND), "started_at": _iso(now), "ttl_ms": "120000"}
        lease = backend.acquire(name, token, 120.0, info)
        assert isinstance(lease, Lease)
        row = {"run_id": run_id, "name": name, "status": "succeeded", "exit_code": 0, "host": HOST, "pid": 4000 + i,
               "command": COMMAND, "backend": "redis", "started_at": _iso(now), "ended_at": _iso(now + 41.2345),
               "duration_s": 41.234512345, "fencing_token": lease.fencing_token, "exit_status": 0,
               "lock_lost_at_release": False}
        lost = {**row, "note": "the lock was no longer this run's at release", "lock_lost_at_release": True}
        assert backend.release(lease, record=FleetRecord(row, if_lost=lost))


def test_the_record_stays_within_its_size_budget(redis_server):
    """<= 160 bytes of MEMORY USAGE per run, <= 64 KiB per name at the default retention (README
    "What the fleet record costs"), with a realistic host name and command."""
    from lockrun.backends.redis.backend import RedisBackend
    from lockrun.backends.values import FleetRetention
    from lockrun.core.defaults import DEFAULT_FLEET_KEEP_RUNS

    client = redis_server.client()
    wide = RedisBackend(redis_server.url, "lockrun:", 5.0, fleet=FleetRetention(keep_runs=100_000))
    backend = RedisBackend(redis_server.url, "lockrun:", 5.0)
    try:
        _runs(wide, "wide", 50)
        before = client.memory_usage("lockrun:{wide}:runs", samples=0)
        _runs(wide, "wide", 500)
        per_run = (client.memory_usage("lockrun:{wide}:runs", samples=0) - before) / 500
        assert per_run <= 160, per_run
        _runs(backend, "job", DEFAULT_FLEET_KEEP_RUNS + 150)  # past the retention: trimmed
    finally:
        wide.close()
        backend.close()
    keys = list(client.scan_iter("lockrun:{job}:*"))
    assert not [key for key in keys if b":ended:" in key]  # no key per run
    per_name = sum(client.memory_usage(key, samples=0) for key in keys)
    assert per_name <= 64 * 1024, per_name
    assert DEFAULT_FLEET_KEEP_RUNS <= client.xlen("lockrun:{job}:runs") <= DEFAULT_FLEET_KEEP_RUNS + 100
    assert client.hlen("lockrun:{job}:vals") == 2  # the host and the command, once
    assert client.zscore("lockrun:names", "job") is not None


def _old_start(client, name: str, run_id: str, host: str, at_ms: int, fence: int) -> str:
    """A start event as lockrun before the compact record wrote it."""
    return client.xadd(f"lockrun:{{{name}}}:runs", {
        "event": "start", "fencing_token": str(fence), "run_id": run_id, "host": host, "pid": "77",
        "command": json.dumps(["old", name]), "started_at": _iso(at_ms / 1000), "ttl_ms": "60000"},
        id=f"{at_ms}-0").decode()


def _old_run(client, name: str, run_id: str, host: str, at_ms: int, fence: int, code: int) -> None:
    """A finished run as lockrun before the compact record wrote it: two events, last, counts."""
    _old_start(client, name, run_id, host, at_ms, fence)
    status = "succeeded" if code == 0 else "failed"
    row = {"run_id": run_id, "status": status, "exit_code": code, "host": host, "pid": 77,
           "command": ["old", name], "started_at": _iso(at_ms / 1000), "ended_at": _iso(at_ms / 1000 + 2),
           "duration_s": 2.0, "fencing_token": fence, "exit_status": code}
    fields = {"event": "end", **{k: json.dumps(v) if k == "command" else str(v) for k, v in row.items()},
              "lock_lost_at_release": "0"}
    client.xadd(f"lockrun:{{{name}}}:runs", fields, id=f"{at_ms + 2000}-0")
    client.hset(f"lockrun:{{{name}}}:last", mapping={"run_id": run_id, "row": json.dumps(row)})
    client.hincrby(f"lockrun:{{{name}}}:counts", status, 1)
    client.set(f"lockrun:{{{name}}}:ended:{run_id}", "1", px=600000)


def test_an_upgrade_keeps_the_older_record(env, redis_server):
    """Runs an older lockrun recorded are read after the upgrade, found without a registry, and a
    run the older lockrun started and this one ends is recorded once."""
    from lockrun.backends.redis.backend import RedisBackend
    from lockrun.backends.values import FleetRecord

    client = redis_server.client()
    now = int(time.time() * 1000) - 60_000
    _old_run(client, "legacy", "a" * 32, "old-1", now, 5, 0)
    _old_run(client, "legacy", "b" * 32, "old-2", now + 10_000, 6, 4)
    _old_run(client, "quiet", "c" * 32, "old-1", now + 5_000, 9, 0)  # never run again
    # A run in flight across the upgrade: started by the older lockrun, still holding.
    token = "d" * 32
    client.set("lockrun:{legacy}:lock", token, px=60000)
    client.hset("lockrun:{legacy}:info", mapping={"token": token, "run_id": "e" * 32, "host": "old-1", "pid": "77"})
    _old_start(client, "legacy", "e" * 32, "old-1", now + 20_000, 7)
    assert not client.exists("lockrun:names")

    rows = history(env, "--fleet")
    assert [(r["name"], r["run_id"][0], r["status"]) for r in rows] == [
        ("legacy", "e", "running"), ("legacy", "b", "failed"), ("quiet", "c", "succeeded"),
        ("legacy", "a", "succeeded")]
    assert set(client.zrange("lockrun:names", 0, -1)) == {b"legacy", b"quiet", b"{scanned}"}

    backend = RedisBackend(redis_server.url, "lockrun:", 2.0)
    try:  # this version ends the older lockrun's run, twice (a retry after a lost reply)
        record = FleetRecord({"run_id": "e" * 32, "status": "succeeded", "exit_code": 0, "host": "old-1"})
        assert backend._release("legacy", token, False, record=record) is True
        assert backend._release("legacy", token, False, record=record) is False
    finally:
        backend.close()
    assert run_lockrun(env, "-n", "legacy", "--", "sh", "-c", "exit 3").returncode == 3  # a new run
    rows = history(env, "--fleet")
    assert [(r["name"], r["run_id"][0], r["status"]) for r in rows[1:]] == [
        ("legacy", "e", "succeeded"), ("legacy", "b", "failed"), ("quiet", "c", "succeeded"),
        ("legacy", "a", "succeeded")]
    assert rows[0]["status"] == "failed" and rows[0]["exit_code"] == 3
    facts = run_lockrun(env, "metrics", "--fleet").stdout
    assert 'lockrun_runs_total{name="quiet",status="succeeded"} 1' in facts
    assert 'lockrun_runs_total{name="legacy",status="failed"} 2' in facts
    assert 'lockrun_runs_total{name="legacy",status="succeeded"} 2' in facts


def _stat(client, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_reads_use_the_registry_not_scan(env, redis_server, tmp_path):
    """With many unrelated keys, status, history/metrics/timeline --fleet read the registry: SCAN
    once (the upgrade's walk), then never again."""
    client = redis_server.client()
    pipe = client.pipeline(transaction=False)
    for i in range(20_000):
        pipe.set(f"app:cache:{i}", "x")
    pipe.execute()
    assert run_lockrun(env, "-n", "one", "--", "true").returncode == 0
    flag = tmp_path / "held"
    holder = spawn_lockrun(env, "-n", "two", "--", "sh", "-c", f"touch {flag}; exec sleep 60")
    try:
        wait_until(flag.exists, what="the holder")
        assert run_lockrun(env, "status").returncode == 0  # the registry's one walk of the keyspace
        scans = _stat(client, "scan")
        assert scans >= 1
        locks = json.loads(run_lockrun(env, "status", "--json").stdout)["locks"]
        assert [(lock["name"], lock["state"]) for lock in locks] == [("two", "held")]
        rows = history(env, "--fleet")
        assert [(r["name"], r["status"]) for r in rows] == [("two", "running"), ("one", "succeeded")]
        assert 'name="one"' in run_lockrun(env, "metrics", "--fleet").stdout
        assert run_lockrun(env, "timeline", "--fleet").returncode == 0
        assert run_lockrun(env, "show", rows[0]["run_id"][:8], "--fleet").returncode == 0
        assert _stat(client, "scan") == scans
    finally:
        holder.terminate()
        holder.wait(30)
    assert [r["status"] for r in history(env, "--fleet", "two")] == ["killed"]  # ended: out of the open hash
    assert client.hlen("lockrun:{two}:open") == 0


def test_an_abandoned_run_stays_in_the_open_hash_and_reads_abandoned(env, redis_server, tmp_path):
    import signal

    flag = tmp_path / "held"
    holder = spawn_lockrun(env, "-n", "gone", "--ttl", "2", "--", "sh", "-c", f"touch {flag}; exec sleep 60")
    wait_until(flag.exists, what="the holder")
    holder.send_signal(signal.SIGKILL)
    holder.wait(10)
    client = redis_server.client()
    wait_until(lambda: not client.exists("lockrun:{gone}:lock"), timeout=30, what="the lease to expire")
    assert run_lockrun(env, "-n", "gone", "--", "true").returncode == 0
    assert [r["status"] for r in history(env, "--fleet", "gone")] == ["succeeded", "abandoned"]
    assert client.hlen("lockrun:{gone}:open") == 1  # the dead run's entry, until pruned
