"""The compact fleet record and the registry of names (issue 23): its size, and reads that never
walk the keyspace (README "One fleet, one memory")."""

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


def _stat(client, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_reads_use_the_registry_not_scan(env, redis_server, tmp_path):
    """With many unrelated keys, status, history/metrics/timeline --fleet read the registry: no
    SCAN at all."""
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
        scans = _stat(client, "scan")
        assert run_lockrun(env, "status").returncode == 0
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
