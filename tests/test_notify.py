"""Telling someone: webhooks, healthchecks pings and output tails, against a real HTTP server."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import free_port, history, lockrun_argv, run_lockrun, spawn_lockrun, wait_until

PY = sys.executable
SECRET = "tok3n-s3cret"


class Receiver:
    """A stdlib HTTP server on 127.0.0.1 that records every request; it can answer 500 or hang."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.mode = "ok"
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                receiver.requests.append({"path": self.path, "body": body, "type": self.headers.get("Content-Type"),
                                          "auth": self.headers.get("Authorization"), "host": self.headers.get("Host")})
                if receiver.mode == "hang":
                    receiver.release.wait(30)
                code = 500 if receiver.mode == "error" else 200
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def paths(self) -> list[str]:
        return [r["path"] for r in self.requests]

    def json_bodies(self) -> list[dict]:
        return [json.loads(r["body"]) for r in self.requests]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def env(any_env):
    return any_env


# --- webhooks -------------------------------------------------------------------------------------


def test_webhook_on_failure_carries_the_outcome(env, receiver):
    hook = f"{receiver.url}/hook?token={SECRET}"
    result = run_lockrun(env, "-n", "job", "--notify", hook, "--capture-tail", "1k", "--",
                         "sh", "-c", "echo working; exit 3")
    assert result.returncode == 3 and result.stdout == "working\n" and result.stderr == ""
    (payload,) = receiver.json_bodies()
    assert receiver.requests[0]["path"] == f"/hook?token={SECRET}"
    row = history(env, "job")[0]
    assert payload["name"] == "job" and payload["status"] == "failed" and payload["exit_code"] == 3
    assert payload["run_id"] == row["run_id"] and payload["host"] == row["host"]
    assert payload["fencing_token"] == row["fencing_token"] and payload["duration_s"] >= 0
    assert payload["started_at"] == row["started_at"] and payload["ended_at"] == row["ended_at"]
    assert payload["output_tail"] == "working\n"


def test_no_webhook_on_success_by_default_and_notify_on_widens_it(env, receiver):
    assert run_lockrun(env, "-n", "ok", "--notify", receiver.url, "--", "true").returncode == 0
    assert receiver.requests == []
    run_lockrun(env, "-n", "ok", "--notify", receiver.url, "--notify-on", "succeeded,failed", "--", "true")
    assert [b["status"] for b in receiver.json_bodies()] == ["succeeded"]


def test_busy_webhook_names_the_holder_but_not_its_token(env, receiver, tmp_path):
    flag = tmp_path / "held"
    holder = spawn_lockrun(env, "-n", "b", "--", "sh", "-c", f"touch {flag}; sleep 30")
    try:
        wait_until(flag.exists, what="the holder")
        busy = run_lockrun(env, "-n", "b", "--notify", receiver.url, "--notify-on", "busy", "--", "true")
        assert busy.returncode == 75
        (payload,) = receiver.json_bodies()
        assert payload["status"] == "busy" and payload["holder"]["pid"] == holder.pid
        assert "token" not in payload["holder"]
    finally:
        holder.terminate()
        holder.wait(30)


def test_slack_format(env, receiver):
    run_lockrun(env, "-n", "slack", "--notify", receiver.url, "--notify-format", "slack", "--", "sh", "-c", "exit 2")
    (body,) = receiver.json_bodies()
    assert set(body) == {"text"} and "*slack*" in body["text"] and "failed" in body["text"] and "exit 2" in body["text"]


def test_several_webhooks_and_the_config_file(env, receiver, tmp_path):
    config = tmp_path / "n.toml"
    config.write_text(f'notify_urls = ["{receiver.url}/a", "{receiver.url}/b"]\n')
    env["LOCKRUN_CONFIG"] = str(config)
    run_lockrun(env, "-n", "cfg", "--", "false")
    assert sorted(receiver.paths()) == ["/a", "/b"]


@pytest.mark.parametrize("mode", ["hang", "error", "refused"])
def test_a_failing_endpoint_costs_bounded_time_and_changes_nothing(env, receiver, mode):
    receiver.mode = mode
    base = f"http://127.0.0.1:{free_port()}" if mode == "refused" else receiver.url
    url = f"{base}/x?token={SECRET}"
    started = time.monotonic()
    result = run_lockrun(env, "-n", "slow", "--notify", url, "--ping", url, "--", "sh", "-c", "exit 4")
    took = time.monotonic() - started
    assert result.returncode == 4
    assert took < 15, took  # two attempts of at most 2 s each, deliveries side by side
    assert result.stderr.count("\n") == 1 and "could not deliver notifications" in result.stderr
    assert SECRET not in result.stderr
    note = history(env, "slow")[0]["note"]
    assert "notification failed" in note and SECRET not in note
    if mode == "error":
        assert len([r for r in receiver.requests if r["path"].startswith("/x?")]) >= 2  # one retry on a 5xx


# --- pings -----------------------------------------------------------------------------------------


def test_ping_sequence_on_success_and_failure(env, receiver):
    base = f"{receiver.url}/ping/abc"
    run_lockrun(env, "-n", "p", "--ping", base, "--", "true")
    run_id = history(env, "p")[0]["run_id"]
    assert receiver.paths() == [f"/ping/abc/start?rid={run_id}", f"/ping/abc?rid={run_id}"]
    receiver.requests.clear()
    run_lockrun(env, "-n", "p", "--ping", base, "--capture-tail", "1k", "--", "sh", "-c", "echo boom >&2; exit 7")
    run_id = history(env, "p")[0]["run_id"]
    assert receiver.paths() == [f"/ping/abc/start?rid={run_id}", f"/ping/abc/7?rid={run_id}"]
    assert receiver.requests[1]["body"] == b"boom\n"


def test_ping_on_timeout_is_fail(env, receiver):
    result = run_lockrun(env, "-n", "t", "--ping", receiver.url, "--timeout", "0.3", "--", "sleep", "30")
    assert result.returncode == 124
    run_id = history(env, "t")[0]["run_id"]
    assert receiver.paths() == [f"/start?rid={run_id}", f"/fail?rid={run_id}"]


def test_busy_pings_nothing_unless_asked(env, receiver, tmp_path):
    flag = tmp_path / "held"
    holder = spawn_lockrun(env, "-n", "pb", "--", "sh", "-c", f"touch {flag}; sleep 30")
    try:
        wait_until(flag.exists, what="the holder")
        assert run_lockrun(env, "-n", "pb", "--ping", receiver.url, "--", "true").returncode == 75
        assert receiver.requests == []
        assert run_lockrun(env, "-n", "pb", "--ping", receiver.url, "--ping-on-busy", "--", "true").returncode == 75
        (request,) = receiver.requests
        assert request["path"].startswith("/fail?rid=") and b"busy" in request["body"]
    finally:
        holder.terminate()
        holder.wait(30)


# --- output tail -------------------------------------------------------------------------------------

INTERLEAVED = (
    "import os, sys\n"
    "for i in range(200):\n"
    "    os.write(1, f'out {i}\\n'.encode()); os.write(2, f'err {i}\\n'.encode())\n"
    "os.write(1, b'\\x00binary\\xff end')\n"
)


def test_tail_passthrough_is_byte_identical_and_the_tail_is_bounded(env):
    import subprocess

    direct = subprocess.run([PY, "-c", INTERLEAVED], capture_output=True)
    wrapped = subprocess.run(lockrun_argv("-n", "tail", "--capture-tail", "100", "--", PY, "-c", INTERLEAVED),
                             env=env, capture_output=True, timeout=60)
    assert wrapped.returncode == 0
    assert (wrapped.stdout, wrapped.stderr) == (direct.stdout, direct.stderr)
    run_id = history(env, "tail")[0]["run_id"]
    shown = json.loads(run_lockrun(env, "show", run_id[:8], "--json").stdout)
    tail = shown["output_tail"]
    assert len(tail.encode("utf-8", "surrogateescape")) <= 100 + 8  # a replaced byte may widen by a few
    # The two streams interleave in arrival order, so either may end the tail.
    assert "binary\ufffd end" in tail or tail.endswith("err 199\n")
    human = run_lockrun(env, "show", run_id)
    assert human.returncode == 0 and "output tail" in human.stdout and "binary" in human.stdout


def test_tail_keeps_lines_from_both_streams(env):
    run_lockrun(env, "-n", "both", "--capture-tail", "10k", "--", "sh", "-c", "echo one; echo two >&2; echo three")
    tail = json.loads(run_lockrun(env, "show", history(env, "both")[0]["run_id"], "--json").stdout)["output_tail"]
    assert sorted(tail.split()) == ["one", "three", "two"]
    assert tail.index("one") < tail.index("three")  # in order within a stream


def test_without_capture_there_is_no_tail(env):
    run_lockrun(env, "-n", "none", "--", "echo", "x")
    shown = json.loads(run_lockrun(env, "show", history(env, "none")[0]["run_id"], "--json").stdout)
    assert shown["output_tail"] is None


@pytest.mark.parametrize("args", [["--capture-tail", "0"], ["--capture-tail", "20g"], ["--capture-tail", "lots"],
                                  ["--notify", "ftp://example"], ["--ping", "not a url"], ["--notify-on", "nope"]])
def test_bad_notification_options_are_usage_errors(env, args):
    result = run_lockrun(env, "-n", "bad", *args, "--", "true")
    assert result.returncode == 2 and result.stderr.count("\n") == 1


def test_basic_auth_webhooks_and_pings_never_leak_the_credential(env, receiver):
    import base64

    host = receiver.url.split("://", 1)[1]
    hook = f"http://hook%40user:pa%3Ass-{SECRET}@{host}/hook"
    ping = f"http://ping:{SECRET}@{host}/check"
    result = run_lockrun(env, "-n", "auth", "--notify", hook, "--notify-on", "failed", "--ping", ping, "--",
                         "sh", "-c", "exit 3")
    assert result.returncode == 3 and result.stderr == ""
    by_path = {r["path"].split("?")[0]: r for r in receiver.requests}
    assert set(by_path) == {"/hook", "/check/start", "/check/3"}
    assert by_path["/hook"]["auth"] == "Basic " + base64.b64encode(f"hook@user:pa:ss-{SECRET}".encode()).decode()
    assert by_path["/check/3"]["auth"] == "Basic " + base64.b64encode(f"ping:{SECRET}".encode()).decode()
    assert all(r["host"] == host for r in receiver.requests)  # the user info never reached the resolver
    assert SECRET.encode() not in b"".join(r["body"] for r in receiver.requests)
    assert json.loads(by_path["/hook"]["body"])["status"] == "failed"
    # An endpoint that fails: the message and the ledger note name the host only.
    receiver.mode = "error"
    failed = run_lockrun(env, "-n", "auth", "--notify", hook, "--notify-on", "failed", "--", "sh", "-c", "exit 3")
    assert "HTTP 500" in failed.stderr and SECRET not in failed.stderr and "hook%40user" not in failed.stderr
    assert SECRET not in json.dumps(history(env, "auth"))
