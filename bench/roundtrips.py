"""Redis round trips per run, as the server saw them (MONITOR), script-internal calls excluded.

    python bench/roundtrips.py [--json out.json]

Target: exactly 2 commands for an uncontended run (acquire, release) plus 1 per
renewal. The connection handshake sends nothing (RESP2, no CLIENT SETINFO).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

from common import LOCKRUN, RedisServer, bench_env, machine, table, write_json


def client_commands(server: RedisServer, argv: list[str], env: dict) -> Counter:
    """Commands sent by clients other than the monitor while ``argv`` ran."""
    seen: Counter = Counter()
    started = threading.Event()
    done = threading.Event()

    def watch():
        with server.client().monitor() as monitor:
            started.set()
            for event in monitor.listen():
                command = event["command"]
                if command == "PING stop-monitor":
                    break
                if event.get("client_type") == "lua" or "lua" in str(event.get("client_address", "")):
                    continue
                seen[command.split()[0].upper()] += 1
        done.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    started.wait(10)
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    server.client().execute_command("PING", "stop-monitor")
    done.wait(10)
    seen.pop("PING", None)
    return seen


def main(argv: list[str]) -> dict:
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        env = bench_env(Path(tmp), server.url)
        cases = {
            "uncontended `true`": ([LOCKRUN, "-n", "rt", "--", "true"], 2),
            "`sleep 2.2` with --ttl 3 (2 renewals)": ([LOCKRUN, "-n", "rt", "--ttl", "3", "--", "sleep", "2.2"], 4),
            "--once, first run": ([LOCKRUN, "-n", "rt", "--once", "k", "--", "true"], 2),
            "--once, duplicate (nothing to release)": ([LOCKRUN, "-n", "rt", "--once", "k", "--", "true"], 1),
        }
        rows, results = [], {}
        for name, (command, expected) in cases.items():
            calls = client_commands(server, command, env)
            total = sum(calls.values())
            results[name] = {"calls": dict(calls), "total": total, "expected": expected}
            rows.append([name, total, expected, ", ".join(f"{k}={v}" for k, v in sorted(calls.items())),
                         "met" if total == expected else "MISSED"])
        version = server.version()
    print(table(["run", "commands", "target", "by command", "result"], rows))
    result = {"machine": {**machine(), "redis_server": version}, "cases": results}
    write_json(argv, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
