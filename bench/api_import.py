"""What the Python API (docs/python.md) costs a program that imports lockrun, and one block.

    python bench/api_import.py [--rounds 30] [--json out.json]

Cases, each a fresh interpreter, interleaved round by round:
- ``python -c pass``: the interpreter alone;
- ``import lockrun``: what every program (and the ``lockrun`` command) pays for the package;
- ``import lockrun; lockrun.lock``: the API's modules loaded (PEP 562 loads them on first use);
- ``lockrun.lock_async``: the same, with asyncio;
- one uncontended block, ``with lockrun.lock("b"): pass``, on the local backend and on Redis
  (settings, ledger row, acquire, keeper and watcher threads, release, final row), beside
  ``lockrun -n b -- true`` for the same backend.
Then, from ``-X importtime``, how many modules ``lockrun.lock`` loads and the largest of them.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from common import LOCKRUN, RedisServer, bench_env, interleaved, machine, median_ms, table, write_json

BLOCK = "import lockrun\nwith lockrun.lock('b'):\n    pass"


def imported(code: str, env: dict) -> list[tuple[int, str]]:
    """(cumulative microseconds, module) of each top-level import ``code`` makes, largest first."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True,
                         check=True).stderr
    rows = []
    for line in err.splitlines()[1:]:  # "import time:  self |  cumulative | name", nested names indented more
        _, cumulative, name = line.split("|")
        if not name.startswith("  "):  # a top-level import of the code, not one of its own imports
            rows.append((int(cumulative), name.strip()))
    return sorted(rows, reverse=True)


def main(argv: list[str]) -> dict:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 30
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        local_env = bench_env(Path(tmp) / "local-state")
        redis_env = bench_env(Path(tmp) / "redis-state", server.url)
        py = sys.executable
        cases = {
            "python -c pass": ([py, "-c", "pass"], local_env),
            "import lockrun": ([py, "-c", "import lockrun"], local_env),
            "import lockrun; lockrun.lock": ([py, "-c", "import lockrun; lockrun.lock"], local_env),
            "import lockrun; lockrun.lock_async": ([py, "-c", "import lockrun; lockrun.lock_async"], local_env),
            "one block (local)": ([py, "-c", BLOCK], local_env),
            "lockrun -n b -- true (local)": ([LOCKRUN, "-n", "b", "--", "true"], local_env),
            "one block (redis)": ([py, "-c", BLOCK], redis_env),
            "lockrun -n b -- true (redis)": ([LOCKRUN, "-n", "b", "--", "true"], redis_env),
        }
        times = interleaved(cases, rounds)
        floor = median_ms(times["python -c pass"])
        rows = [[name, f"{median_ms(t):.1f}", f"{median_ms(t) - floor:+.1f}"] for name, t in times.items()]
        print(table(["case", "median ms", "beyond python -c pass"], rows))
        loads = imported("import lockrun; lockrun.lock", local_env)
        modules = subprocess.run([py, "-c", "import sys; before = set(sys.modules); import lockrun; lockrun.lock;"
                                  " print(len(set(sys.modules) - before))"], env=local_env, capture_output=True,
                                 text=True, check=True).stdout.strip()
        print(f"\nimport lockrun; lockrun.lock loads {modules} modules; the largest top-level imports (-X importtime, "
              "cumulative us):")
        print(table(["module", "us"], [[name, str(us)] for us, name in loads[:8]]))
    result = {"machine": machine(), "rounds": rounds, "median_ms": {name: median_ms(t) for name, t in times.items()},
              "modules_loaded_by_lock": int(modules)}
    write_json(argv, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
