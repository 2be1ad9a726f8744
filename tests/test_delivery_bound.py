"""Pings and webhooks together delay lockrun's exit by at most 5 s (README "Telling someone"),
however many endpoints hang and wherever: a socket that accepts and never answers, or a name
server that never replies. Measured from the run's end (its row's ended_at) to lockrun's exit."""

from __future__ import annotations

import random
import socket
import subprocess
import threading
import time
from datetime import datetime, timezone

import pytest

from tests.conftest import history, lockrun_argv

BOUND_S = 5.0


@pytest.fixture
def hanging():
    """Listening sockets nobody accepts on: the kernel completes the handshake, then nothing."""
    sockets = []

    def make(count: int) -> list[str]:
        for _ in range(count):
            server = socket.create_server(("127.0.0.1", 0), backlog=64)
            sockets.append(server)
        return [f"http://127.0.0.1:{s.getsockname()[1]}/hook?token=s3cret" for s in sockets[-count:]]

    yield make
    for server in sockets:
        server.close()


def delay_after_the_run(env: dict, argv: list[str], name: str) -> tuple[subprocess.CompletedProcess, float]:
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    exited = time.time()
    (row,) = history(env, name)
    ended = datetime.strptime(row["ended_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()
    return result, exited - ended


def test_one_ping_endpoint_that_never_answers(local_env, hanging):
    """The issue's case: 8.7 s (a start ping and an end ping, two attempts each, one after another)."""
    (url,) = hanging(1)
    result, delay = delay_after_the_run(local_env, lockrun_argv("-n", "p", "--ping", url, "--", "true"), "p")
    assert result.returncode == 0 and delay < BOUND_S, (delay, result.stderr)
    assert result.stderr.count("\n") == 1 and "could not deliver notifications" in result.stderr
    assert "s3cret" not in result.stderr


def test_many_hanging_endpoints_together_stay_within_the_bound(any_env, hanging):
    ping, *hooks = hanging(6)
    argv = lockrun_argv("-n", "many", "--ping", ping, *(a for hook in hooks for a in ("--notify", hook)), "--",
                        "sh", "-c", "exit 3")
    result, delay = delay_after_the_run(any_env, argv, "many")
    assert result.returncode == 3 and delay < BOUND_S, (delay, result.stderr)
    assert result.stderr.count("\n") == 1, result.stderr
    assert all(url.split("/hook")[0] + "/…" in result.stderr for url in (ping, *hooks)), result.stderr
    assert "notification failed" in history(any_env, "many")[0]["note"]


def _bound_on_port_53() -> tuple[socket.socket, str]:
    """A UDP socket on port 53 (resolv.conf names no other port) of a loopback address of its own:
    another run of the suite on this machine has its own."""
    for _ in range(20):
        address = f"127.77.{random.randrange(256)}.{random.randrange(1, 255)}"
        server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            server.bind((address, 53))
        except OSError:
            server.close()
            continue
        return server, address
    pytest.fail("no loopback address with port 53 free for the silent name server")


@pytest.fixture
def silent_name_server(tmp_path):
    """A resolv.conf naming a UDP name server that reads every query and never replies (with
    glibc's timeout raised to 30 s), and a counter of the queries it got."""
    server, address = _bound_on_port_53()
    queries = []

    def swallow() -> None:
        while True:
            try:
                queries.append(server.recv(4096))
            except OSError:
                return

    threading.Thread(target=swallow, daemon=True).start()
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(f"nameserver {address}\noptions timeout:30 attempts:2\n")
    yield resolv, queries
    server.close()


def test_a_name_server_that_never_answers_is_within_the_bound_too(local_env, silent_name_server):
    """No socket timeout covers getaddrinfo: lockrun gives up on the delivery threads instead."""
    resolv, queries = silent_name_server
    inside = ["unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(resolv)]
    argv = [*inside, *lockrun_argv("-n", "dns", "--ping", "http://ping.lockrun-test.invalid/x",
                                   "--notify", "http://hook.lockrun-test.invalid/y", "--", "sh", "-c", "exit 5")]
    result, delay = delay_after_the_run(local_env, argv, "dns")
    assert result.returncode == 5 and delay < BOUND_S, (delay, result.stderr)
    assert result.stderr.count("\n") == 1 and "no answer in time" in result.stderr, result.stderr
    assert queries, "the resolver never asked the silent name server: this test proved nothing"
