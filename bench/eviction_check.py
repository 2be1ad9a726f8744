"""What the acquire script's own ``INFO memory`` (the eviction check) costs, on the server and per
round trip.

    python bench/eviction_check.py [--rounds 2000] [--json out.json]

In-process ``RedisBackend.acquire`` against a local redis-server, in interleaved blocks, with the
script as shipped and with the check cut out (``local evicts = nil``): the server's own account
(``INFO commandstats``: usec_per_call of ``eval`` for the acquires alone, and of ``info``, which
the server counts for calls made from scripts too) and the client's round trip, median and p99.
Again with 500 idle client connections, since some Redis versions walked the client list for
INFO memory.
"""

from __future__ import annotations

import statistics
import sys
import time

import redis
from common import ROOT, RedisServer, machine, percentile, table, write_json

sys.path.insert(0, str(ROOT))
from lockrun.backends.redis import scripts as redis_scripts  # noqa: E402
from lockrun.backends.redis.backend import RedisBackend  # noqa: E402

SHIPPED = redis_scripts.ACQUIRE_SCRIPT
UNCHECKED = SHIPPED.replace("local evicts = eviction()", "local evicts = nil")
assert UNCHECKED != SHIPPED
BLOCK = 100


def block(server: RedisServer, backend: RedisBackend, script: str) -> tuple[list[float], float, float | None]:
    """BLOCK acquires of fresh names with ``script``: client round trips (s), and the server's
    usec_per_call of eval and of info over exactly those acquires."""
    redis_scripts.ACQUIRE_SCRIPT = script
    client = server.client()
    leases = []
    client.config_resetstat()
    times = []
    for _ in range(BLOCK):
        name = f"b{time.monotonic_ns()}"
        started = time.perf_counter()
        leases.append(backend.acquire(name, "t" * 32, 60.0, {"run_id": "r", "host": "h", "pid": "1"}))
        times.append(time.perf_counter() - started)
    stats = client.info("commandstats")
    for lease in leases:
        backend.release(lease)
    info = stats.get("cmdstat_info")
    return times, stats["cmdstat_eval"]["usec_per_call"], info["usec_per_call"] if info else None


def measure(server: RedisServer, rounds: int) -> dict:
    backend = RedisBackend(server.url, "lockrun:", 5.0)
    results: dict = {"shipped": {"rtt": [], "eval": [], "info": []}, "unchecked": {"rtt": [], "eval": [], "info": []}}
    try:
        for _ in range(max(1, rounds // BLOCK)):
            for label, script in (("shipped", SHIPPED), ("unchecked", UNCHECKED)):
                times, eval_us, info_us = block(server, backend, script)
                results[label]["rtt"] += times
                results[label]["eval"].append(eval_us)
                if info_us is not None:
                    results[label]["info"].append(info_us)
    finally:
        redis_scripts.ACQUIRE_SCRIPT = SHIPPED
        backend.close()
    out = {}
    for label, found in results.items():
        out[label] = {
            "rtt_median_us": statistics.median(found["rtt"]) * 1e6, "rtt_p99_us": percentile(found["rtt"], 99) * 1e6,
            "eval_usec_per_call": statistics.median(found["eval"]),
            "info_usec_per_call": statistics.median(found["info"]) if found["info"] else None,
        }
    return out


def main(argv: list[str]) -> dict:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 2000
    data: dict = {"machine": machine(), "rounds": rounds}
    with RedisServer() as server:
        data["machine"]["redis_server"] = server.version()
        data["idle"] = measure(server, rounds)
        idle = [redis.Redis(unix_socket_path=server.socket, protocol=2) for _ in range(500)]
        for connection in idle:
            connection.ping()
        try:
            data["500 clients"] = measure(server, rounds)
        finally:
            for connection in idle:
                connection.close()
    rows = []
    for case in ("idle", "500 clients"):
        shipped, unchecked = data[case]["shipped"], data[case]["unchecked"]
        rows.append([case, f"{shipped['info_usec_per_call']:.2f}",
                     f"{shipped['eval_usec_per_call']:.2f} vs {unchecked['eval_usec_per_call']:.2f}",
                     f"{shipped['rtt_median_us']:.0f} ({shipped['rtt_p99_us']:.0f}) vs "
                     f"{unchecked['rtt_median_us']:.0f} ({unchecked['rtt_p99_us']:.0f})"])
    print(table(["server", "INFO memory µs/call", "acquire EVAL µs/call, with vs without", "round trip µs, p99"],
                rows))
    write_json(argv, data)
    return data


if __name__ == "__main__":
    main(sys.argv[1:])
