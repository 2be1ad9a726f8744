"""Where a `lockrun -n b -- true` spends its time beyond importing click, redis and sqlite3.

    python bench/breakdown.py [--rounds 30] [--json out.json]

Runs lockrun's own `main()` in a fresh interpreter per round with its phases
timed (lockrun's imports, then each step of a run), and reports the median of
each. The steps are the ones every run must take (docs/internals.md): the ledger row
written before the command starts and completed after, the acquire and release
round trips, a process for the command with PR_SET_PDEATHSIG armed, and the
watchdog that kills the command's group if lockrun is SIGKILLed, and the walk of lockrun's process
tree when the command exits (what it left behind). A `true` ends before the 10 ms after which a
command gets a cgroup of its own: that costs it nothing.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import RedisServer, bench_env, machine, table, write_json

PROBE = r'''
import json, sys, time
t0 = time.perf_counter()
import click, redis, sqlite3
t1 = time.perf_counter()
import lockrun.cli.main, lockrun.run.runner, lockrun.backends.redis.backend, lockrun.run.supervisor,\
    lockrun.ledger.store, lockrun.run.keeper
t2 = time.perf_counter()
from lockrun import backends
from lockrun.run import journal as J
from lockrun.run import supervisor as S
from lockrun.run import watchdog as W
from lockrun.backends.redis import backend as BR
spent = {}
def timed(owner, name, label):
    original = getattr(owner, name)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.perf_counter() - started
    setattr(owner, name, wrapper)
timed(J.RunJournal, "open", "ledger: open + row 'running'")
timed(J.RunJournal, "finish", "ledger: final status")
timed(BR.RedisBackend, "__init__", "redis: client set-up")
timed(BR.RedisBackend, "acquire", "redis: connect + acquire round trip")
timed(BR.RedisBackend, "release", "redis: release round trip")
timed(W.Watchdog, "start", "watchdog shell")
timed(S, "load_prctl", "libc prctl (ctypes)")
timed(S.Supervisor, "spawn", "command: fork, PDEATHSIG, exec")
timed(S.Supervisor, "finish", "command: wait, reap")
timed(S.Supervisor, "command_exited", "descendants: walk at the command's exit")
sys.argv = ["lockrun", "-n", "b", "--", "true"]
t3 = time.perf_counter()
try:
    lockrun.cli.main.main()
except SystemExit:
    pass
t4 = time.perf_counter()
spent["lockrun's own imports"] = t2 - t1
spent["the rest of the run"] = (t4 - t3) - sum(v for k, v in spent.items() if k != "lockrun's own imports")
spent["floor: import click, redis, sqlite3"] = t1 - t0
print(json.dumps(spent))
'''


def main(argv: list[str]) -> dict:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 30
    samples: dict[str, list[float]] = {}
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        env = bench_env(Path(tmp), server.url)
        for _ in range(rounds):
            out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
            for key, value in json.loads(out.stdout.strip().splitlines()[-1]).items():
                samples.setdefault(key, []).append(value * 1000)
    medians = {key: statistics.median(values) for key, values in samples.items()}
    floor = medians.pop("floor: import click, redis, sqlite3")
    spawn = medians["command: fork, PDEATHSIG, exec"]
    # spawn() includes prepare(): the watchdog and prctl times are inside it, not beside it.
    nested = ("watchdog shell", "libc prctl (ctypes)")
    rows = [[key, f"{value:.2f}"] for key, value in medians.items()]
    extra = sum(v for k, v in medians.items() if k not in nested)
    rows += [["total beyond the floor", f"{extra:.2f}"], ["floor: import click, redis, sqlite3", f"{floor:.2f}"],
             ["10 % of the floor (the target's budget)", f"{floor * 0.10:.2f}"]]
    print(table(["step (median ms, in-process)", "ms"], rows))
    required = extra - medians["lockrun's own imports"] - medians["the rest of the run"]
    print(f"\nrequired steps alone: {required:.2f} ms; the spawn alone: {spawn:.2f} ms")
    result = {"machine": machine(), "rounds": rounds, "median_ms": medians, "floor_ms": floor,
              "beyond_floor_ms": extra, "required_steps_ms": required}
    write_json(argv, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
