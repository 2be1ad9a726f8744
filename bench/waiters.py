"""A queue of waiters on one name: Redis commands and connections per waiter, and the memory a
waiting job holds.

    python bench/waiters.py [--waiters 50] [--idle 5] [--baseline SRC] [--json out.json]

The benchmark holds the lock itself (a SET with its own token and a 120 s TTL), starts N
`lockrun -n q --wait 300 -- true` and waits until all of them block in BLPOP, lets them wait
``--idle`` seconds, then releases the lock with lockrun's own release script: they hand it
over one to the next until the last one exits. Phases, from `INFO commandstats` (calls of
EVAL and BLPOP, the only commands a lockrun sends; commands run inside scripts are not
counted; the benchmark's own release is taken off):

- start: from the first start to all of them blocked;
- idle: while they all wait (the version before polled, an EVAL and a BLPOP a second each);
- hand-over: from the release to the last exit;
- per waiter: all of it, divided by N, with and without each run's own release.

Connections: `INFO clients` while they wait, less the benchmark's own one. Memory of a waiting
job, every process of it together (lockrun, its watchdog shell, its launcher if one is
forked), from /proc/PID/smaps_rollup: USS (private pages, summed), PSS, RSS, and "own", the
pages that no process outside the job maps (a page two of the job's processes share, as a
pre-forked launcher shares lockrun's heap, is private to neither: USS leaves it out, "own"
counts it once; from /proc/PID/pagemap and /proc/kpagecount, root only). With --baseline
SRC (another version's ``lockrun`` package, as in startup.py) the same queue runs with it
first, on the same interpreter and server, both as `python -P -m lockrun`. Each version's own
state directory: the second also starts from an empty ledger. Targets: <= 3 commands per waiter per hand-over,
one connection per waiter, USS of a waiting job <= 6 MB.
"""

from __future__ import annotations

import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import RedisServer, bench_env, machine, table, versions, write_json

from lockrun.backends.redis.backend import RedisBackend, lock_keys
from lockrun.backends.values import Lease

PAGE = os.sysconf("SC_PAGE_SIZE")


def job_pids(pid: int) -> list[int]:
    """``pid`` and every descendant of it."""
    found = [pid]
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for task in tasks:
        try:
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        except OSError:
            continue
        for child in children:
            found += job_pids(int(child))
    return found


def rollup(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0])
    return fields


def mapped_pages(pid: int) -> list[int]:
    """The page frames ``pid`` maps (present pages only)."""
    frames = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in maps:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if line.rstrip().endswith("[vsyscall]"):
                continue
            pagemap.seek(start // PAGE * 8)
            data = pagemap.read((end - start) // PAGE * 8)
            for (entry,) in struct.iter_unpack("Q", data):
                if entry >> 63 and entry & ((1 << 55) - 1):
                    frames.append(entry & ((1 << 55) - 1))
    return frames


def own_kib(pids: list[int]) -> float | None:
    """KiB of the pages mapped by these processes and by no other (None: not allowed to read frames)."""
    counts: dict[int, int] = {}
    try:
        for pid in pids:
            for frame in mapped_pages(pid):
                counts[frame] = counts.get(frame, 0) + 1
        own = 0
        with open("/proc/kpagecount", "rb") as kpagecount:
            for frame, seen in counts.items():
                kpagecount.seek(frame * 8)
                (mapcount,) = struct.unpack("Q", kpagecount.read(8))
                own += mapcount <= seen
    except OSError:
        return None
    if not counts:
        return None  # no frame numbers: /proc/PID/pagemap hides them without CAP_SYS_ADMIN
    return own * PAGE / 1024


def job_memory(pid: int) -> dict:
    pids = job_pids(pid)
    rolls = [rollup(p) for p in pids]
    return {
        "processes": len(pids),
        "uss_kib": sum(r["Private_Clean"] + r["Private_Dirty"] for r in rolls),
        "pss_kib": sum(r["Pss"] for r in rolls),
        "rss_kib": sum(r["Rss"] for r in rolls),
        "own_kib": own_kib(pids),
    }


def lockrun_calls(server: RedisServer) -> dict[str, int]:
    stats = server.client().info("commandstats")
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("eval", "evalsha", "blpop")}


def minus(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


def queue(server: RedisServer, lockrun: list[str], env: dict, waiters: int, idle: float, sampled: int) -> dict:
    client = server.client()
    keys = lock_keys("lockrun:", "q")
    client.delete(keys.wake)
    client.set(keys.lock, "bench-holder", px=120000)
    client.config_resetstat()
    started = time.monotonic()
    procs = [subprocess.Popen([*lockrun, "-n", "q", "-w", "300", "--", "true"], env=env) for _ in range(waiters)]
    deadline = time.monotonic() + 120
    while int(client.info("clients")["blocked_clients"]) < waiters:
        if time.monotonic() > deadline:
            raise SystemExit("the waiters never all blocked")
        time.sleep(0.01)
    start_phase = lockrun_calls(server)
    start_s = time.monotonic() - started
    connections = []
    idle_until = time.monotonic() + idle
    while time.monotonic() < idle_until:
        connections.append(int(client.info("clients")["connected_clients"]) - 1)  # less our own
        time.sleep(0.1)
    idle_phase = minus(lockrun_calls(server), start_phase)
    memory = [job_memory(p.pid) for p in procs[:sampled]]
    before_release = lockrun_calls(server)
    holder = RedisBackend(server.url, "lockrun:", timeout=5.0)
    holder.release(Lease(name="q", token="bench-holder", fencing_token=0, ttl=120, sent_at=0.0))
    holder.close()
    released = time.monotonic()
    codes = [p.wait(300) for p in procs]
    drained_s = time.monotonic() - released
    if codes != [0] * waiters:
        raise SystemExit(f"some waiters failed: {codes}")
    handover_phase = minus(lockrun_calls(server), before_release)
    handover_phase["eval"] -= 1  # the benchmark's own release
    total = {k: start_phase[k] + idle_phase[k] + handover_phase[k] for k in start_phase}
    commands = sum(total.values())
    return {
        "waiters": waiters, "idle_s": idle, "start_s": start_s, "drained_s": drained_s,
        "start": start_phase, "idle": idle_phase, "handover": handover_phase, "total": total,
        "per_waiter": commands / waiters,
        "per_waiter_without_release": (commands - waiters) / waiters,
        "idle_per_waiter_per_s": sum(idle_phase.values()) / waiters / idle,
        "connections_max": max(connections), "connections_median": statistics.median(connections),
        "memory": memory,
        "memory_median": {k: statistics.median(m[k] for m in memory if m[k] is not None)
                          if any(m[k] is not None for m in memory) else None
                          for k in ("processes", "uss_kib", "pss_kib", "rss_kib", "own_kib")},
    }


def main(argv: list[str]) -> dict:
    waiters = int(argv[argv.index("--waiters") + 1]) if "--waiters" in argv else 50
    idle = float(argv[argv.index("--idle") + 1]) if "--idle" in argv else 5.0
    sampled = min(waiters, 10)
    results: dict[str, dict] = {}
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        for name, (lockrun, env) in versions(argv, bench_env(Path(tmp) / "state", server.url)).items():
            state = Path(tmp) / name.replace(" ", "-")  # each version its own ledger, from empty
            state.mkdir()
            left = server.client().keys("lockrun:{q}:*")  # and a clean name in Redis
            if left:
                server.client().delete(*left)
            results[name] = queue(server, lockrun, {**env, "LOCKRUN_STATE_DIR": str(state)}, waiters, idle, sampled)
        version = server.version()
    rows = []
    for name, r in results.items():
        mem = r["memory_median"]
        own = f"{mem['own_kib'] / 1024:.1f}" if mem["own_kib"] is not None else "-"
        rows.append([
            name, f"{r['per_waiter_without_release']:.2f} ({r['per_waiter']:.2f})",
            f"{r['idle_per_waiter_per_s']:.2f}",
            " ".join(f"{k}={v}" for k, v in r["total"].items() if v),
            f"{r['connections_max']}", f"{mem['processes']:.0f}", f"{mem['uss_kib'] / 1024:.1f}",
            f"{mem['pss_kib'] / 1024:.1f}", f"{mem['rss_kib'] / 1024:.1f}", own, f"{r['drained_s']:.2f}",
        ])
    print(f"{waiters} waiters on one name, {idle:g} s of waiting, then {waiters} hand-overs")
    print(table(["version", "commands/waiter (with its release)", "idle commands/waiter/s", "by command",
                 "connections", "processes/job", "USS MiB/job", "PSS MiB/job", "RSS MiB/job", "own MiB/job",
                 "drain s"], rows))
    mine = results["this version"]
    print(f"\ncommands per waiter per hand-over {mine['per_waiter_without_release']:.2f} (target <= 3), "
          f"connections {mine['connections_max']} for {waiters} waiters (target {waiters}), "
          f"USS per waiting job {mine['memory_median']['uss_kib'] / 1024:.1f} MiB (target <= 6)")
    result = {"machine": {**machine(), "redis_server": version}, "results": results}
    write_json(argv, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
