"""Shared pieces of the benchmarks: a throwaway redis-server, lockrun's argv, timing and tables.

Benchmarks are scripts, not tests: each prints a table and, with --json PATH,
writes its numbers for bench/report.py. They compare lockrun with its floor
and its peers in the same run, interleaved, and report ratios, because this
machine is noisy and absolute times mean little.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
LOCKRUN = shutil.which("lockrun", path=str(Path(sys.executable).parent)) or "lockrun"


class RedisServer:
    """A redis-server on a unix socket in a private temp dir, stopped on exit."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="lr-bench-"))
        self.socket = str(self.dir / "redis.sock")
        self.url = f"unix://{self.socket}"
        self.proc = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", self.socket, "--save", "", "--appendonly", "no",
             "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while True:
            try:
                self.client().ping()
                break
            except redis.RedisError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit("redis-server did not start (is the redis-server package installed?)") from None
                time.sleep(0.02)

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.socket, socket_timeout=30, protocol=2)

    def version(self) -> str:
        return self.client().info("server")["redis_version"]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def versions(argv: list[str], env: dict) -> dict[str, tuple[list[str], dict]]:
    """How to start lockrun: this version alone, or with --baseline SRC (another version's
    ``lockrun`` package), both as `python -P -m lockrun` on PYTHONPATH, as startup.py does (an
    entry-point script names one version's module layout)."""
    if "--baseline" not in argv:
        return {"this version": ([LOCKRUN], env)}
    source = os.path.abspath(argv[argv.index("--baseline") + 1])
    module = [sys.executable, "-P", "-m", "lockrun"]
    return {"baseline": (module, {**env, "PYTHONPATH": source}),
            "this version": (module, {**env, "PYTHONPATH": str(ROOT)})}


def bench_env(state_dir: str | Path, redis_url: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKRUN_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure lockrun as installed: with cached bytecode
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    config = Path(state_dir) / "empty-config.toml"
    config.write_text("")
    env.update(LOCKRUN_STATE_DIR=str(state_dir), LOCKRUN_CONFIG=str(config))
    if redis_url:
        env["LOCKRUN_REDIS_URL"] = redis_url
    return env


def wall(argv: list[str], env: dict, **kwargs) -> float:
    """Wall time of one run; a run that fails is an error, not a fast sample."""
    started = time.perf_counter()
    result = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kwargs)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{argv} exited {result.returncode}: {result.stderr.decode()[-500:]}")
    return elapsed


def interleaved(cases: dict[str, tuple[list[str], dict]], rounds: int, warmup: int = 3) -> dict[str, list[float]]:
    """Run every case once per round, in turn, so that machine noise hits all of them alike."""
    for _ in range(warmup):
        for argv, env in cases.values():
            wall(argv, env)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (argv, env) in cases.items():
            times[name].append(wall(argv, env))
    return times


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000.0


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100.0 * (len(ordered) - 1))))
    return ordered[index]


def machine() -> dict:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "redis_py": redis.__version__,
    }


def table(headers: list[str], rows: list[list]) -> str:
    widths = [max(len(str(x)) for x in [h, *[r[i] for r in rows]]) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def write_json(argv: list[str], data: dict) -> None:
    if "--json" in argv:
        path = Path(argv[argv.index("--json") + 1])
        path.write_text(json.dumps(data, indent=2))
