"""Supervisor footprint: peak RSS and CPU seconds of lockrun while its command sleeps.

    python bench/footprint.py [--seconds 60] [--json out.json]

`lockrun --ttl 3 -- sleep SECONDS` against Redis: 20 renewals a minute. Peak RSS
is lockrun's own VmHWM (read from /proc just before it exits); CPU is user +
system time from wait4() (lockrun plus what it reaped: `sleep` costs ~0). The
watchdog shell's RSS is reported beside it. Targets: RSS <= 35 MiB, CPU <= 0.2 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import LOCKRUN, RedisServer, bench_env, machine, table, write_json


def status_kib(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


# The same stack loaded and left idle: what any click + redis + sqlite3 program costs.
FLOOR = (
    "import click, redis, sqlite3, resource\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
)


def main(argv: list[str]) -> dict:
    seconds = float(argv[argv.index("--seconds") + 1]) if "--seconds" in argv else 60.0
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        env = bench_env(Path(tmp), server.url)
        proc = subprocess.Popen([LOCKRUN, "-n", "fp", "--ttl", "3", "--", "sleep", str(seconds)], env=env)
        peak_kib, watchdog_kib, usage, code = 0, 0, None, None
        deadline = time.monotonic() + seconds + 30
        while time.monotonic() < deadline:
            # VmHWM is only readable while lockrun lives (a zombie has no memory to report).
            peak_kib = max(peak_kib, status_kib(proc.pid, "VmHWM") or 0)
            for child in children(proc.pid):
                try:
                    if Path(f"/proc/{child}/comm").read_text().strip() in ("sh", "dash"):
                        watchdog_kib = max(watchdog_kib, status_kib(child, "VmRSS") or 0)
                except OSError:
                    pass
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                code = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.1)
        proc.returncode = code  # reaped here, through wait4, to get lockrun's rusage
        floor_runs = []
        for _ in range(5):  # the machine is noisy: the median of five
            floor = subprocess.Popen([sys.executable, "-c", FLOOR], env=env, stdout=subprocess.DEVNULL)
            _, _, floor_usage = os.wait4(floor.pid, 0)
            floor.returncode = 0
            floor_runs.append(floor_usage)
        floor_runs.sort(key=lambda u: u.ru_utime + u.ru_stime)
        floor_usage = floor_runs[len(floor_runs) // 2]
        version = server.version()
    cpu = usage.ru_utime + usage.ru_stime if code is not None else float("nan")
    rss_mib = peak_kib / 1024
    floor_cpu = floor_usage.ru_utime + floor_usage.ru_stime
    rows = [
        ["peak RSS (MiB)", f"{rss_mib:.1f}", "<= 35", "met" if rss_mib <= 35 else "MISSED"],
        ["CPU seconds", f"{cpu:.3f}", "<= 0.2", "met" if cpu <= 0.2 else "MISSED"],
        ["watchdog RSS (MiB)", f"{watchdog_kib / 1024:.1f}", "", ""],
        ["floor: import click, redis, sqlite3 - peak RSS (MiB)", f"{floor_usage.ru_maxrss / 1024:.1f}", "", ""],
        ["floor: import click, redis, sqlite3 - CPU seconds", f"{floor_cpu:.3f}", "", ""],
        ["lockrun CPU above the floor", f"{cpu - floor_cpu:.3f}", "", ""],
        ["exit code", proc.returncode, "0", ""],
    ]
    print(f"lockrun --ttl 3 -- sleep {seconds:g}")
    print(table(["measure", "value", "target", "result"], rows))
    result = {"machine": {**machine(), "redis_server": version}, "seconds": seconds, "peak_rss_mib": rss_mib,
              "cpu_s": cpu, "watchdog_rss_mib": watchdog_kib / 1024, "exit_code": proc.returncode,
              "floor_rss_mib": floor_usage.ru_maxrss / 1024, "floor_cpu_s": floor_cpu}
    write_json(argv, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
