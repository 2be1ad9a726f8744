"""What the fleet record costs in Redis: MEMORY USAGE per recorded run and per name at the default
retention, this version beside another (the one before the compact record), in one run.

    python bench/fleet_memory.py [--baseline DIR] [--json out.json]

DIR holds another version's ``lockrun`` package (``git archive move lockrun | tar -x -C DIR``).
Each version drives its own RedisBackend against its own fresh redis-server, with a realistic
host name and command: runs are taken and given back as the runner does (a full row, its
lost-lease variant), as fast as one process can. Measured with ``MEMORY USAGE KEY SAMPLES 0``
(exact, every element counted) over every key of the name:

- bytes per run: the ``runs`` stream's growth per run with nothing trimmed (2,000 runs);
- per name at the default retention: every key of a name after 1.5x its default kept runs
  (the stream trimmed as Redis does, ``last``, ``counts`` and the rest), without the
  ``ended:RUN_ID`` markers an older lockrun leaves for 10 minutes, which are counted apart
  (they grow with the run rate, not with the retention).

Targets (issue 23): <= 160 bytes per run, <= 64 KiB per name (10,000 names <= 640 MB).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from common import ROOT, RedisServer, machine, table, write_json

HOST = "app-17.prod.eu-west-1.example.internal"
COMMAND = ["/opt/app/bin/sync-invoices", "--since", "1h", "--batch", "500"]
BYTES_PER_RUN, BYTES_PER_NAME = 160, 64 * 1024

# Runs in the version under test (PYTHONPATH picks it): prints {"per_run", "per_name", ...}.
DRIVER = textwrap.dedent('''
    import json, sys, time, uuid
    import redis
    from lockrun.backends.redis.backend import RedisBackend
    from lockrun.backends.values import FleetRecord, FleetRetention, Lease
    from lockrun.core.defaults import DEFAULT_FLEET_KEEP_RUNS

    url, host, command = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    client = redis.Redis.from_url(url)

    def iso(t):
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int(t % 1 * 1e6)

    def runs(backend, name, count):
        for i in range(count):
            run_id, token, now = uuid.uuid4().hex, uuid.uuid4().hex, time.time()
            info = {"token": token, "run_id": run_id, "host": host, "boot_id": str(uuid.uuid4()),
                    "machine_id": uuid.uuid4().hex, "pid_ns": "4026531836", "pid": str(40000 + i % 20000),
                    "pid_start": str(123456789 + i), "child_pid": "", "command": json.dumps(command),
                    "started_at": iso(now), "ttl_ms": "120000"}
            lease = backend.acquire(name, token, 120.0, info)
            assert isinstance(lease, Lease), lease
            row = {"run_id": run_id, "name": name, "status": "succeeded", "exit_code": 0, "signal": None,
                   "host": host, "pid": 40000 + i % 20000, "command": command, "backend": "redis",
                   "started_at": iso(now), "ended_at": iso(now + 41.2345), "duration_s": 41.234512345,
                   "fencing_token": lease.fencing_token, "once_key": None, "error": None, "note": None,
                   "exit_status": 0, "waited_s": None, "lock_lost_at_release": False}
            lost = {**row, "note": "the lock was no longer this run's at release: another run may have"
                                   " overlapped it", "lock_lost_at_release": True}
            assert backend.release(lease, record=FleetRecord(row, if_lost=lost))

    def usage(pattern, leave_out=":ended:"):
        total, markers, count = 0, 0, 0
        for key in client.scan_iter(match=pattern, count=1000):
            size = client.memory_usage(key, samples=0) or 0
            if leave_out.encode() in key:
                markers += size
                count += 1
            else:
                total += size
        return total, markers, count

    # bytes per run: the stream's growth, nothing trimmed
    wide = RedisBackend(url, "lockrun:", 5.0, fleet=FleetRetention(keep_runs=1000000))
    runs(wide, "wide", 100)
    before = client.memory_usage("lockrun:{wide}:runs", samples=0)
    runs(wide, "wide", 2000)
    per_run = (client.memory_usage("lockrun:{wide}:runs", samples=0) - before) / 2000
    wide.close()
    # per name at the default retention
    backend = RedisBackend(url, "lockrun:", 5.0)
    runs(backend, "job", DEFAULT_FLEET_KEEP_RUNS * 3 // 2)
    # and the busy skips it keeps in time (the newest few; a version without them counts only)
    held = backend.acquire("job", "holder", 120.0, {"host": host})
    for i in range(50):
        assert not isinstance(backend.acquire("job", uuid.uuid4().hex, 120.0,
                                              {"host": host, "run_id": uuid.uuid4().hex}), Lease)
    skips_bytes = client.memory_usage("lockrun:{job}:skips", samples=0) or 0
    backend.release(held)
    per_name, markers, marker_count = usage("lockrun:{job}:*")
    shared = sum(client.memory_usage(key, samples=0) or 0 for key in client.scan_iter(match="lockrun:names*"))
    backend.close()
    print(json.dumps({"per_run": per_run, "per_name": per_name, "keep_runs": DEFAULT_FLEET_KEEP_RUNS,
                      "stream_entries": client.xlen("lockrun:{job}:runs"), "ended_markers": marker_count,
                      "ended_bytes": markers, "registry_bytes": shared,
                      "skips_bytes": skips_bytes}))
''')


def measure(package_dir: str) -> dict:
    with RedisServer() as server:
        env = {**os.environ, "PYTHONPATH": package_dir}
        done = subprocess.run([sys.executable, "-c", DRIVER, server.url, HOST, json.dumps(COMMAND)], env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the driver failed under {package_dir}:\n{done.stderr}")
        result = json.loads(done.stdout)
        result["redis_server"] = server.version()
    return result


def main(argv: list[str]) -> dict:
    baseline = argv[argv.index("--baseline") + 1] if "--baseline" in argv else None
    versions = {"this version": str(ROOT)}
    if baseline:
        versions = {"before (baseline)": baseline, **versions}
    results = {label: measure(path) for label, path in versions.items()}
    rows = []
    for label, r in results.items():
        rows.append([label, f"{r['per_run']:.0f}", r["keep_runs"], r["stream_entries"],
                     f"{r['per_name'] / 1024:.1f}", f"{r['per_name'] * 10_000 / 1e6:.0f}",
                     f"{r['ended_markers']} ({r['ended_bytes'] / 1024:.0f} KiB)", r.get("skips_bytes", 0)])
    print(table(["version", "bytes/run", "default keep_runs", "entries kept", "KiB/name at default",
                 "MB for 10,000 names", "ended:RUN_ID markers left",
                 "skips list after 50 busy skips (bytes)"], rows))
    mine = results["this version"]
    met = mine["per_run"] <= BYTES_PER_RUN and mine["per_name"] <= BYTES_PER_NAME
    print(f"\nfleet record: {mine['per_run']:.0f} bytes/run (<= {BYTES_PER_RUN}), "
          f"{mine['per_name'] / 1024:.1f} KiB/name (<= 64): {'met' if met else 'MISSED'}")
    data = {"machine": machine(), "host": HOST, "command": COMMAND, "versions": results}
    write_json(argv, data)
    return data


if __name__ == "__main__":
    main(sys.argv[1:])
