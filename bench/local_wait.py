"""A local `--wait`: what waiting costs, and how fast a release hands over (local backend, no Redis).

    python bench/local_wait.py [--seconds 10] [--rounds 3] [--handovers 20] [--baseline SRC] [--json out.json]

CPU: the benchmark holds a lock of the local backend itself (in this process, as lockrun holds
one); `lockrun -n NAME --wait 600 -- true` waits for it. The figure is the CPU time of every
thread of the waiter (``/proc/PID/task/*/schedstat``) over SECONDS, from two seconds after its
start (start-up is over), as a percentage of one core. Target: well under 1 %.

Hand-over: the benchmark holds the lock, two lockruns wait on it running `date +%s.%N`; once
both have waited for a second, the benchmark notes the time and releases the lock (closing its
descriptor, as lockrun's release does); the sample is the first `date` printed minus that time
(same host, same clock). Target: p50 <= 5 ms, as `handover.py` asks of Redis.

With ``--baseline SRC`` (a folder holding another version's ``lockrun`` package, e.g. from
``git archive``) that version is measured in the same run, interleaved, on the same interpreter
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

from common import LOCKRUN, bench_env, machine, percentile, table, write_json
from idle_cpu import cpu_ns

from lockrun.backends.local.backend import LocalBackend
from lockrun.backends.values import Lease


def hold(state_dir: Path, name: str) -> tuple[LocalBackend, Lease]:
    backend = LocalBackend(state_dir)
    lease = backend.acquire(name, "bench-holder", 600.0, {"token": "bench-holder", "pid": str(os.getpid())})
    if not isinstance(lease, Lease):
        raise SystemExit(f"the benchmark could not take {name!r}: {lease!r}")
    return backend, lease


def waiting_cpu(env: dict, seconds: float, name: str) -> float:
    """Percent of one core a waiting lockrun uses over ``seconds``."""
    backend, lease = hold(Path(env["LOCKRUN_STATE_DIR"]), name)
    proc = subprocess.Popen([LOCKRUN, "-n", name, "--wait", "600", "--", "true"], env=env)
    try:
        time.sleep(2.0)
        first, started = cpu_ns(proc.pid), time.monotonic()
        time.sleep(seconds)
        last, window = cpu_ns(proc.pid), time.monotonic() - started
    finally:
        backend.release(lease)
        code = proc.wait(60)
    if first is None or last is None or code != 0:
        raise SystemExit(f"the waiter exited early or failed ({code})")
    return (last - first) / 1e9 / window * 100.0


def handover(env: dict, name: str) -> float:
    backend, lease = hold(Path(env["LOCKRUN_STATE_DIR"]), name)
    procs = [subprocess.Popen([LOCKRUN, "-n", name, "-w", "120", "--", "date", "+%s.%N"], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(1.5)  # both started (about 0.2 s) and waiting; not part of the measurement
    released_at = time.time()
    backend.release(lease)
    starts = [float(p.communicate(timeout=120)[0]) for p in procs]
    return min(starts) - released_at


def main(argv: list[str]) -> dict:
    seconds = float(argv[argv.index("--seconds") + 1]) if "--seconds" in argv else 10.0
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 3
    handovers = int(argv[argv.index("--handovers") + 1]) if "--handovers" in argv else 20
    with tempfile.TemporaryDirectory() as tmp:
        cases = {"lockrun": bench_env(Path(tmp) / "state")}
        if "--baseline" in argv:
            source = os.path.abspath(argv[argv.index("--baseline") + 1])
            cases["baseline"] = {**bench_env(Path(tmp) / "base-state"), "PYTHONPATH": source}
        cpu: dict[str, list[float]] = {case: [] for case in cases}
        hand: dict[str, list[float]] = {case: [] for case in cases}
        for i in range(rounds):
            for case, env in cases.items():
                cpu[case].append(waiting_cpu(env, seconds, f"cpu-{i}"))
        for i in range(handovers):
            for case, env in cases.items():
                hand[case].append(handover(env, f"ho-{i}"))
    rows = [[case, f"{statistics.median(cpu[case]):.2f}", " ".join(f"{v:.2f}" for v in cpu[case]),
             f"{percentile(hand[case], 50) * 1000:.2f}", f"{percentile(hand[case], 99) * 1000:.2f}"]
            for case in cases]
    print(f"a local --wait over {seconds:g} s ({rounds} rounds), {handovers} hand-overs to 2 waiters")
    print(table(["case", "waiting CPU % of a core (median)", "each round", "hand-over p50 ms", "p99 ms"], rows))
    result = {"machine": machine(), "seconds": seconds, "rounds": rounds,
              "waiting_cpu_percent": {case: statistics.median(v) for case, v in cpu.items()},
              "handover_p50_ms": {case: percentile(v, 50) * 1000 for case, v in hand.items()},
              "handover_p99_ms": {case: percentile(v, 99) * 1000 for case, v in hand.items()},
              "handover_samples_ms": {case: [round(x * 1000, 3) for x in v] for case, v in hand.items()},
              "load_average": os.getloadavg()}
    write_json(argv, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
