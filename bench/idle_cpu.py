"""Idle CPU: what a lockrun costs while its command just sleeps.

    python bench/idle_cpu.py [--seconds 30] [--rounds 5] [--baseline SRC] [--json out.json]

`lockrun --ttl 3 -- sleep SECONDS` against Redis (a renewal every second). The idle figure is
the CPU time of lockrun's threads (``/proc/PID/task/*/schedstat``, in nanoseconds) from two
seconds after the start to one second before the end, per minute: what supervising costs once
start-up is over (renewals, the backstop re-arm, the main loop's wake-ups). The whole run's CPU
(wait4) is printed beside it. With ``--baseline SRC`` (a folder holding another version's
``lockrun`` package) that version runs at the same time in each round, on the same interpreter
(PYTHONPATH), so that both see the same machine.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import LOCKRUN, RedisServer, bench_env, machine, table, write_json


def cpu_ns(pid: int) -> int | None:
    """CPU time of every thread of ``pid`` so far, in ns; None once it is gone."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError):
        return None
    return total


def one_round(cases: dict[str, dict], seconds: float) -> dict[str, tuple[float, float]]:
    """Run every case at once; (idle CPU ms per minute, whole-run CPU s) for each."""
    procs = {name: subprocess.Popen([LOCKRUN, "-n", f"idle-{i}", "--ttl", "3", "--", "sleep", str(seconds)], env=env)
             for i, (name, env) in enumerate(cases.items())}
    started = time.monotonic()
    time.sleep(2.0)
    first = {name: cpu_ns(p.pid) for name, p in procs.items()}
    time.sleep(max(0.0, started + seconds - 1.0 - time.monotonic()))
    window = time.monotonic() - started - 2.0
    last = {name: cpu_ns(p.pid) for name, p in procs.items()}
    result = {}
    for name, proc in procs.items():
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{name}: lockrun exited {proc.returncode}")
        a, b = first[name], last[name]
        if a is None or b is None:
            raise SystemExit(f"{name}: lockrun was gone before the window closed")
        result[name] = ((b - a) / 1e6 / window * 60.0, usage.ru_utime + usage.ru_stime)
    return result


def main(argv: list[str]) -> dict:
    seconds = float(argv[argv.index("--seconds") + 1]) if "--seconds" in argv else 30.0
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 5
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        cases = {"lockrun": bench_env(Path(tmp) / "state", server.url)}
        if "--baseline" in argv:
            source = os.path.abspath(argv[argv.index("--baseline") + 1])
            cases["baseline"] = {**bench_env(Path(tmp) / "base-state", server.url), "PYTHONPATH": source}
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(rounds):
            for name, sample in one_round(cases, seconds).items():
                samples[name].append(sample)
        version = server.version()
    idle = {name: statistics.median(s[0] for s in runs) for name, runs in samples.items()}
    whole = {name: statistics.median(s[1] for s in runs) for name, runs in samples.items()}
    rows = [[name, f"{idle[name]:.1f}", f"{whole[name]:.3f}",
             " ".join(f"{s[0]:.1f}" for s in samples[name])] for name in cases]
    print(f"lockrun --ttl 3 -- sleep {seconds:g}, {rounds} rounds")
    print(table(["case", "idle CPU ms/min (median)", "whole run CPU s (median)", "idle ms/min, each round"], rows))
    result = {"machine": {**machine(), "redis_server": version}, "seconds": seconds, "rounds": rounds,
              "idle_cpu_ms_per_min": idle, "run_cpu_s": whole}
    write_json(argv, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
