"""What redis-py's eager imports cost lockrun's run path, for the installed redis-py and others.

    python bench/redis_import.py [--rounds 20] [--redis-py DIR ...] [--json out.json]

Each case runs `python -X importtime -c "import lockrun.backends.redis.backend"` (all that the
Redis run path imports from redis-py, and lockrun's own Redis modules) and `python -c pass`,
interleaved, and reads from -X importtime the cumulative microseconds of: the whole import,
``redis`` (its package), and what it pulls that lockrun never uses: ``redis.asyncio`` (and
``asyncio`` with it), ``importlib.metadata``, ``logging``, ``concurrent.futures``, ``ssl``.
``--redis-py DIR`` (a folder with another redis-py, e.g. ``pip install --target DIR redis==5.0.8``)
adds that version through PYTHONPATH. Whatever is imported by another first is counted there
once: the rows are what each module's first import cost, not what removing it would save
(``redis.asyncio`` is the first thing ``import redis`` does, so nearly all of redis-py is
under it). -X importtime slows imports down; wall-clock figures follow, interleaved, for the
installed redis-py: `python -c pass`, `import redis`, the standard-library modules redis-py
imports and lockrun's run path never uses (asyncio, importlib.metadata, logging,
concurrent.futures), and lockrun's Redis run path with each redis-py.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

from common import interleaved, machine, median_ms, table, write_json

WATCHED = ("redis", "redis.asyncio", "asyncio", "importlib.metadata", "logging", "concurrent.futures", "ssl")
CODE = "import lockrun.backends.redis.backend"


def one(env: dict) -> dict[str, float]:
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", CODE], env=env, capture_output=True, text=True,
                            check=True)
    found: dict[str, float] = {}
    total = 0.0
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        indent = len(name) - len(name.lstrip())
        name = name.strip()
        if indent == 1:  # a top-level import of the -c line
            total += int(cumulative)
        if name in WATCHED and name not in found:
            found[name] = int(cumulative) / 1000
    found["total"] = total / 1000
    return found


def version(env: dict) -> str:
    return subprocess.run([sys.executable, "-c", "import redis; print(redis.__version__)"], env=env,
                          capture_output=True, text=True, check=True).stdout.strip()


def main(argv: list[str]) -> dict:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 20
    envs = {"installed": dict(os.environ)}
    for i, arg in enumerate(argv):
        if arg == "--redis-py":
            folder = os.path.abspath(argv[i + 1])
            envs[folder] = {**os.environ, "PYTHONPATH": folder}
    names = {key: version(env) for key, env in envs.items()}
    samples: dict[str, list[dict[str, float]]] = {key: [] for key in envs}
    for _ in range(rounds):
        for key, env in envs.items():
            samples[key].append(one(env))
    rows, result = [], {}
    for key, runs in samples.items():
        medians = {name: statistics.median(r.get(name, 0.0) for r in runs) for name in ("total", *WATCHED)}
        result[names[key]] = medians
        rows.append([f"redis-py {names[key]}", *(f"{medians[n]:.1f}" for n in ("total", *WATCHED))])
    print(f"`{CODE}`: cumulative import time, ms (median of {rounds}; -X importtime)")
    print(table(["redis-py", "whole import", *WATCHED], rows))
    py = sys.executable
    cases = {
        "python -c pass": ([py, "-c", "pass"], envs["installed"]),
        "import redis": ([py, "-c", "import redis"], envs["installed"]),
        "import asyncio, importlib.metadata, logging, concurrent.futures": (
            [py, "-c", "import asyncio, importlib.metadata, logging, concurrent.futures"], envs["installed"]),
        **{f"{CODE} (redis-py {names[key]})": ([py, "-c", CODE], env) for key, env in envs.items()},
    }
    times = interleaved(cases, rounds)
    wall = {name: median_ms(t) for name, t in times.items()}
    floor = wall["python -c pass"]
    print(f"\nwall clock, redis-py {names['installed']}, median of {rounds} interleaved")
    print(table(["case", "median ms", "above python -c pass"],
                [[name, f"{ms:.1f}", f"{ms - floor:+.1f}"] for name, ms in wall.items()]))
    write_json(argv, {"machine": machine(), "rounds": rounds, "medians_ms": result, "wall_ms": wall})
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
