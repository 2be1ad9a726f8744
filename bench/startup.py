"""Start-up overhead: `lockrun -n b -- true` against its stack floor and its peers.

    python bench/startup.py [--rounds 40] [--baseline SRC] [--json out.json]

Cases, run interleaved:
- lockrun with Redis, and with the local backend;
- the floor of lockrun's own stack: python -c "import click, redis, sqlite3";
- flock(1): the kernel-lock peer, no ledger, no lease;
- a shell wrapper around redis-cli SET NX / DEL: the naive Redis peer;
- with --baseline SRC (a folder holding another version's ``lockrun`` package, e.g. from
  ``git archive BASE lockrun | tar -x -C SRC``): that version too, on the same interpreter,
  through PYTHONPATH, so that a change's cost is measured against what it changes.
Target: lockrun (Redis) <= 1.10 x its stack floor.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from common import LOCKRUN, RedisServer, bench_env, interleaved, machine, median_ms, table, write_json


def main(argv: list[str]) -> dict:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 40
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        redis_env = bench_env(Path(tmp) / "redis-state", server.url)
        local_env = bench_env(Path(tmp) / "local-state")
        shell_wrapper = (
            f"redis-cli -s {server.socket} SET lock:b 1 NX PX 60000 >/dev/null && "
            f"{{ true; redis-cli -s {server.socket} DEL lock:b >/dev/null; }}"
        )
        cases = {
            "lockrun (redis)": ([LOCKRUN, "-n", "b", "--", "true"], redis_env),
            "lockrun (local)": ([LOCKRUN, "-n", "b", "--", "true"], local_env),
            "floor: python -c 'import click, redis, sqlite3'": (
                [sys.executable, "-c", "import click, redis, sqlite3"], redis_env),
            "flock -n f true": (["flock", "-n", str(Path(tmp) / "f"), "true"], redis_env),
            "sh: redis-cli SET NX; true; DEL": (["sh", "-c", shell_wrapper], redis_env),
        }
        if "--baseline" in argv:
            # Both versions through `python -P -m lockrun` and PYTHONPATH (-P: not the current
            # directory first, whatever it holds): an entry-point script names
            # one version's module layout, and runpy's few hundred microseconds cancel in the ratio.
            source = os.path.abspath(argv[argv.index("--baseline") + 1])
            here = str(Path(__file__).resolve().parent.parent)
            for label, path in (("this", here), ("baseline", source)):
                for backend, env in (("redis", redis_env), ("local", local_env)):
                    cases[f"{label} -m lockrun ({backend})"] = (
                        [sys.executable, "-P", "-m", "lockrun", "-n", "b", "--", "true"], {**env, "PYTHONPATH": path})
        times = interleaved(cases, rounds)
        redis_version = server.version()
    floor_times = times["floor: python -c 'import click, redis, sqlite3'"]

    def paired_ratio(samples: list[float]) -> float:
        # Each round ran every case back to back: the ratio within a round cancels
        # the machine's slow and fast phases that a ratio of medians would not.
        return statistics.median(a / b for a, b in zip(samples, floor_times, strict=True))

    rows = [[name, f"{median_ms(t):.1f}", f"{paired_ratio(t):.3f}"] for name, t in times.items()]
    print(table(["case", "median ms", "x floor (median of per-round ratios)"], rows))
    ratio = paired_ratio(times["lockrun (redis)"])
    print(f"\nlockrun (redis) / stack floor = {ratio:.3f} (target <= 1.10): {'met' if ratio <= 1.10 else 'MISSED'}")
    against: dict[str, float] = {}
    for backend in ("redis", "local"):
        base = times.get(f"baseline -m lockrun ({backend})")
        if base is not None:
            mine = times[f"this -m lockrun ({backend})"]
            against[backend] = statistics.median(a / b for a, b in zip(mine, base, strict=True))
            print(f"lockrun ({backend}) / baseline = {against[backend]:.3f} "
                  f"({median_ms(mine) - median_ms(base):+.1f} ms in medians)")
    result = {"machine": {**machine(), "redis_server": redis_version}, "rounds": rounds,
              "median_ms": {name: median_ms(t) for name, t in times.items()},
              "ratio_to_floor": {name: paired_ratio(t) for name, t in times.items()}, "ratio": ratio, "target": 1.10,
              "ratio_to_baseline": against}
    write_json(argv, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
