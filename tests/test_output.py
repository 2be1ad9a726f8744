"""What lockrun does with the command's output beyond passing it on (docs/operating.md "Output"): the
tail a failed run keeps by default, --output on-failure (chronic), --warn-after and --syslog.
Everything through real processes: lockrun under a pipe, under a pty, under a file size limit."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.conftest import (
    assert_one_line,
    history,
    in_pty,
    lockrun_argv,
    read_until,
    run_lockrun,
    spawn_lockrun,
    wait_until,
)
from tests.test_notify import Receiver

PY = sys.executable
# Writes that alternate between the streams, with a binary end: what cron must get unchanged.
INTERLEAVED = (
    "import os, sys\n"
    "for i in range(300):\n"
    "    os.write(1, f'out {i}\\n'.encode()); os.write(2, f'err {i}\\n'.encode())\n"
    "os.write(2, b'\\x00last words\\xff\\n')\n"
    "sys.exit(3)\n"
)
CHATTY = "for i in $(seq 1 50); do echo out-$i; echo err-$i >&2; done"


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


def shown(env: dict, name: str) -> dict:
    run_id = history(env, name)[0]["run_id"]
    result = run_lockrun(env, "show", run_id, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def fleet_tail(env: dict, name: str) -> bytes | None:
    with redis.Redis.from_url(env["LOCKRUN_REDIS_URL"]) as client:
        assert client.exists(f"lockrun:{{{name}}}:last")  # the run is recorded: only its tail is left out
        return client.hget(f"lockrun:{{{name}}}:last", "output_tail")


# --- A: the tail of a failed run, kept by default -----------------------------------------------------


def test_a_failed_run_under_a_pipe_keeps_its_tail_and_its_output_reaches_the_pipe_unchanged(env):
    direct = subprocess.run([PY, "-c", INTERLEAVED], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wrapped = subprocess.run(lockrun_argv("-n", "why", "--", PY, "-c", INTERLEAVED), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    # One pipe for both streams (as cron gives): byte for byte, in the order the command wrote.
    assert wrapped.returncode == 3 and wrapped.stdout == direct.stdout
    run = shown(env, "why")
    tail = run["output_tail"]
    assert tail.endswith("err 299\n\x00last words\ufffd\n")
    assert 4000 <= len(tail.encode()) <= 4096 + 8 and "out 299\nerr 299\n" in tail
    text = run_lockrun(env, "show", run["run_id"]).stdout
    assert "--- output tail (" in text and "last words" in text and "--capture-tail SIZE keeps the last SIZE" in text
    # Redis is readable by every host: the default tail stays in this host's ledger.
    assert fleet_tail(env, "why") is None


def test_two_destinations_each_get_their_own_stream(any_env):
    wrapped = subprocess.run(lockrun_argv("-n", "two", "--", "sh", "-c", "echo o1; echo e1 >&2; echo o2; exit 1"),
                             env=any_env, capture_output=True, timeout=60)
    assert (wrapped.returncode, wrapped.stdout, wrapped.stderr) == (1, b"o1\no2\n", b"e1\n")
    assert sorted(shown(any_env, "two")["output_tail"].split()) == ["e1", "o1", "o2"]


def test_a_succeeded_run_keeps_no_tail(any_env):
    result = run_lockrun(any_env, "-n", "fine", "--", "sh", "-c", "echo private data; echo more >&2")
    assert (result.returncode, result.stdout, result.stderr) == (0, "private data\n", "more\n")
    assert shown(any_env, "fine")["output_tail"] is None
    assert "--- no output kept: a failed run keeps" in run_lockrun(
        any_env, "show", history(any_env, "fine")[0]["run_id"]).stdout


def test_on_a_terminal_no_tail_is_kept(any_env):
    proc, master = in_pty(any_env, "-n", "tty", "--", "sh", "-c", "echo on-the-terminal; exit 4")
    try:
        assert b"on-the-terminal" in read_until(master, b"on-the-terminal")
        assert proc.wait(60) == 4
    finally:
        os.close(master)
    row = history(any_env, "tty")[0]
    assert row["status"] == "failed"
    assert shown(any_env, "tty")["output_tail"] is None


def test_no_tail_flag_and_config_keep_none(any_env, tmp_path):
    result = run_lockrun(any_env, "-n", "off", "--no-tail", "--", "sh", "-c", "echo secret; exit 2")
    assert (result.returncode, result.stdout) == (2, "secret\n")
    assert shown(any_env, "off")["output_tail"] is None
    config = tmp_path / "off.toml"
    config.write_text("output_tail = false\n")
    result = run_lockrun({**any_env, "LOCKRUN_CONFIG": str(config)}, "-n", "off2", "--", "sh", "-c", "echo s; exit 2")
    assert (result.returncode, result.stdout) == (2, "s\n")
    assert shown(any_env, "off2")["output_tail"] is None
    config.write_text("output_tail = 1\n")
    result = run_lockrun({**any_env, "LOCKRUN_CONFIG": str(config)}, "-n", "bad", "--", "true")
    assert_one_line(result, 78, "output_tail must be true or false")


def test_keep_detached_keeps_no_default_tail(local_env):
    # What the command leaves running writes where lockrun's output is, not into a pump that ends.
    result = run_lockrun(local_env, "-n", "kd", "--keep-detached", "--", "sh", "-c", "echo direct; exit 2")
    assert (result.returncode, result.stdout) == (2, "direct\n")
    assert shown(local_env, "kd")["output_tail"] is None


def test_no_tail_with_capture_tail_is_a_usage_error(any_env):
    result = run_lockrun(any_env, "-n", "x", "--no-tail", "--capture-tail", "1k", "--", "true")
    assert_one_line(result, 2, "--no-tail and --capture-tail cannot be combined")


def test_capture_tail_still_shares_the_tail_with_the_fleet_and_webhooks(env, receiver):
    result = run_lockrun(env, "-n", "cap", "--capture-tail", "1k", "--notify", receiver.url, "--",
                         "sh", "-c", "echo shared; exit 5")
    assert result.returncode == 5
    assert fleet_tail(env, "cap") == b"shared\n"
    assert [body["output_tail"] for body in receiver.json_bodies()] == ["shared\n"]


def test_the_default_tail_goes_to_no_webhook_or_ping(env, receiver):
    result = run_lockrun(env, "-n", "quiet", "--notify", receiver.url, "--ping", f"{receiver.url}/p", "--",
                         "sh", "-c", "echo local-$((40 + 2)); exit 5")  # the argv, in the payload, lacks it
    assert result.returncode == 5
    assert shown(env, "quiet")["output_tail"] == "local-42\n"
    hooks = [r for r in receiver.requests if r["path"] == "/"]
    assert [json.loads(r["body"])["output_tail"] for r in hooks] == [None]
    assert len(receiver.requests) == 3 and all(b"local-42" not in r["body"] for r in receiver.requests)


# --- B: --output on-failure --------------------------------------------------------------------------


def on_failure_env(env: dict, tmp_path) -> dict:
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir(exist_ok=True)
    return {**env, "TMPDIR": str(spool_dir)}


def test_on_failure_with_a_succeeding_chatty_command_prints_nothing(any_env, tmp_path):
    env = on_failure_env(any_env, tmp_path)
    result = run_lockrun(env, "-n", "chatty", "--output", "on-failure", "--", "sh", "-c", CHATTY)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert history(env, "chatty")[0]["status"] == "succeeded"
    assert os.listdir(tmp_path / "spool") == []


def test_on_failure_with_a_failing_command_prints_all_of_it(any_env, tmp_path):
    env = on_failure_env(any_env, tmp_path)
    direct = subprocess.run(["sh", "-c", CHATTY], capture_output=True)
    argv = lockrun_argv("-n", "broke", "--output", "on-failure", "--", "sh", "-c", CHATTY + "; exit 6")
    result = subprocess.run(argv, env=env, capture_output=True, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (6, direct.stdout, direct.stderr)
    # In one pipe (as cron gives), in the order the command wrote it.
    joined = subprocess.run(lockrun_argv("-n", "broke", "--output", "on-failure", "--", PY, "-c", INTERLEAVED),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    plain = subprocess.run([PY, "-c", INTERLEAVED], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert (joined.returncode, joined.stdout) == (3, plain.stdout)
    assert os.listdir(tmp_path / "spool") == []


def spool_of(pid: int, spool_dir) -> tuple[str, os.stat_result]:
    """lockrun's open spool file: where its descriptor points, and the file's stat."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with _suppress_gone():
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith(str(spool_dir)):
                return target, os.stat(f"/proc/{pid}/fd/{fd}")
    raise AssertionError("no spool file open")


class _suppress_gone:  # noqa: N801 - used as a context manager, like contextlib.suppress
    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        return kind is not None and issubclass(kind, OSError)


def test_the_spool_is_private_nameless_and_written_out_when_lockrun_is_stopped(any_env, tmp_path):
    env = on_failure_env(any_env, tmp_path)
    spool_dir = tmp_path / "spool"
    flag = tmp_path / "written"
    proc = spawn_lockrun(env, "-n", "term", "--output", "on-failure", "--", "sh", "-c",
                         f"echo before-the-signal; echo to-stderr >&2; touch {flag}; sleep 60",
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(flag.exists, what="the command's output")
        target, st = spool_of(proc.pid, spool_dir)
        assert target.endswith("(deleted)") and stat.S_IMODE(st.st_mode) == 0o600 and st.st_size > 0
        assert os.listdir(spool_dir) == []  # it has no name: nothing can be left behind
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 143 and out == "before-the-signal\n" and "to-stderr\n" in err
    assert history(env, "term")[0]["status"] == "killed"
    assert os.listdir(spool_dir) == []


def test_a_spool_that_cannot_grow_passes_the_output_through_and_loses_nothing(local_env, tmp_path):
    # A full disk, by a file size limit (SIGXFSZ ignored, so the write fails with EFBIG): the ledger
    # fits under it, the command's megabyte of output does not.
    env = on_failure_env(local_env, tmp_path)
    limit = 256 * 1024

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    lines = 100_000
    script = f"import sys\nfor i in range({lines}): print(f'line-{{i}}')\nsys.exit(1)\n"
    result = subprocess.run(lockrun_argv("-n", "full", "--output", "on-failure", "--", PY, "-c", script), env=env,
                            capture_output=True, text=True, timeout=120, preexec_fn=limited)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"line-{i}" for i in range(lines)]
    assert_one_line(result, 1, "--output on-failure: cannot keep the command's output in a temporary file",
                    "File too large", "passes through from now on")
    assert history(env, "full")[0]["status"] == "failed"


def test_held_output_that_cannot_be_written_out_is_said_as_passed_through_output_is(any_env, tmp_path):
    # Without --output on-failure a full disk under stdout is one line on stderr and a note on the
    # row (capture.py): written out at the end, the held output must not be dropped silently either.
    env = on_failure_env(any_env, tmp_path)
    with open("/dev/full", "wb") as full:
        for output in ("always", "on-failure"):
            result = subprocess.run(lockrun_argv("-n", f"full-{output}", "--output", output, "--", "sh", "-c",
                                                 "echo out; echo err >&2; exit 3"),
                                    env=env, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
            assert result.returncode == 3
            assert "err\n" in result.stderr, (output, result.stderr)
            assert "standard output could not be written (No space left on device)" in result.stderr, output
            note = history(env, f"full-{output}")[0]["note"] or ""
            assert "standard output could not be written (No space left on device)" in note, (output, note)


def test_on_failure_and_capture_tail_together(any_env, tmp_path):
    env = on_failure_env(any_env, tmp_path)
    result = run_lockrun(env, "-n", "both", "--output", "on-failure", "--capture-tail", "1k", "--",
                         "sh", "-c", "echo kept; exit 2")
    assert (result.returncode, result.stdout) == (2, "kept\n")
    assert shown(env, "both")["output_tail"] == "kept\n"
    result = run_lockrun(env, "-n", "both", "--output", "on-failure", "--capture-tail", "1k", "--", "echo", "quiet")
    assert (result.returncode, result.stdout) == (0, "")
    assert shown(env, "both")["output_tail"] == "quiet\n"  # --capture-tail keeps a success's tail too


def test_output_from_the_config_file(any_env, tmp_path):
    config = tmp_path / "chronic.toml"
    config.write_text('output = "on-failure"\n')
    env = {**on_failure_env(any_env, tmp_path), "LOCKRUN_CONFIG": str(config)}
    assert run_lockrun(env, "-n", "c", "--", "echo", "hidden").stdout == ""
    assert run_lockrun(env, "-n", "c", "--output", "always", "--", "echo", "shown").stdout == "shown\n"
    config.write_text('output = "sometimes"\n')
    assert_one_line(run_lockrun(env, "-n", "c", "--", "true"), 78, 'output must be "always" or "on-failure"')
    assert run_lockrun(any_env, "-n", "c", "--output", "sometimes", "--", "true").returncode == 2


def test_keep_detached_with_on_failure_is_a_usage_error(local_env):
    # Held output goes through lockrun's pump, which ends with lockrun: the daemon --keep-detached
    # means to leave running would die of SIGPIPE at its next write (and lockrun wait for it).
    result = run_lockrun(local_env, "-n", "x", "--keep-detached", "--output", "on-failure", "--", "true")
    assert_one_line(result, 2, "--keep-detached and --output on-failure cannot be combined")


def test_keep_detached_leaves_the_config_files_on_failure_aside(local_env, tmp_path):
    config = tmp_path / "chronic.toml"
    config.write_text('output = "on-failure"\n')
    env = {**local_env, "LOCKRUN_CONFIG": str(config)}
    alive, left = tmp_path / "alive", tmp_path / "left"

    def daemon(alive_file: Path) -> str:
        # The command waits until the daemon has left its group (setsid ran): one still in it when
        # the command ends is the command's, and goes with it, --keep-detached or not.
        return (f"setsid sh -c 'touch {left}; sleep 1; echo daemon; touch {alive_file}' {{}} & "
                f"until [ -e {left} ]; do sleep 0.01; done")

    result = run_lockrun(env, "-n", "kd", "--keep-detached", "--", "sh", "-c",
                         daemon(tmp_path / "first").format("> /dev/null") + "; echo started")
    assert (result.returncode, result.stdout) == (0, "started\n"), result.stderr  # passed through, not held
    left.unlink()
    result = run_lockrun(env, "-n", "kd2", "--keep-detached", "--", "sh", "-c", daemon(alive).format(""))
    assert result.returncode == 0, result.stderr
    wait_until(alive.exists, what="the daemon left running to write and go on")


# --- B: --warn-after -----------------------------------------------------------------------------------


def test_warn_after_says_slow_once_and_lets_the_command_finish(env, receiver, tmp_path):
    flag = tmp_path / "started"
    proc = spawn_lockrun(env, "-n", "slowpoke", "--warn-after", "2", "--notify", receiver.url,
                         "--ping", f"{receiver.url}/hc", "--", "sh", "-c", f"touch {flag}; sleep 4",
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def state() -> str | None:
            return json.loads(run_lockrun(env, "status", "slowpoke", "--json").stdout)["locks"][0]["state"]

        wait_until(flag.exists, what="the command")
        assert state() == "held"
        wait_until(lambda: state() == "slow", what="status to say slow")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 0 and out == ""
    assert err.count("\n") == 1 and "'slowpoke' is slow: still running after --warn-after 2s" in err
    row = history(env, "slowpoke")[0]
    assert row["status"] == "succeeded" and "slow: still running after --warn-after 2s" in row["note"]
    hooks = [json.loads(r["body"]) for r in receiver.requests if r["path"] == "/"]
    assert [(hook["status"], hook["run_id"], hook["ended_at"]) for hook in hooks] == [("slow", row["run_id"], None)]
    run_id = row["run_id"]
    assert sorted(receiver.paths()) == sorted(["/", f"/hc/start?rid={run_id}", f"/hc/log?rid={run_id}",
                                               f"/hc?rid={run_id}"])
    metrics = run_lockrun(env, "metrics").stdout
    assert 'lockrun_slow_runs_total{name="slowpoke"} 1' in metrics
    # The fleet record does not count slow runs: no family, rather than a 0 that is not true.
    fleet = run_lockrun(env, "metrics", "--fleet").stdout
    assert 'lockrun_runs_total{name="slowpoke",status="succeeded"} 1' in fleet
    assert "lockrun_slow_runs_total{" not in fleet


def test_a_quick_command_is_not_slow(any_env):
    result = run_lockrun(any_env, "-n", "quick", "--warn-after", "5", "--", "true")
    assert (result.returncode, result.stderr) == (0, "")
    assert history(any_env, "quick")[0]["note"] is None
    assert 'lockrun_slow_runs_total{name="quick"} 0' in run_lockrun(any_env, "metrics").stdout


@pytest.mark.parametrize("value", ["0.5", "0", "31d", "soon"])
def test_warn_after_out_of_range_is_a_usage_error(any_env, value):
    assert_one_line(run_lockrun(any_env, "-n", "x", "--warn-after", value, "--", "true"), 2, "--warn-after")


# --- B: --syslog -------------------------------------------------------------------------------------------

# As logger(1) sends to the local socket: <PRI>, an RFC 3164 timestamp, the tag (tests/test_client_syslog.py
# has a real rsyslogd read it, and the other forms).
SYSLOG_LINE = re.compile(r"<(\d+)>[A-Z][a-z]{2} [ 1-3]\d \d\d:\d\d:\d\d lockrun\[(\d+)\]: (.*)")


@pytest.fixture
def syslog_socket(tmp_path):
    path = tmp_path / "log.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(path))
    server.settimeout(10)
    yield path, server
    server.close()


def fields(message: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in message.split(" "))


def test_syslog_gets_one_key_value_line_per_finished_run(any_env, syslog_socket):
    path, server = syslog_socket
    env = {**any_env, "LOCKRUN_SYSLOG_SOCKET": str(path)}
    failed = run_lockrun(env, "-n", "logged", "--syslog", "--", "sh", "-c", "exit 3")
    assert (failed.returncode, failed.stderr) == (3, "")
    priority, pid, message = SYSLOG_LINE.fullmatch(server.recv(4096).decode()).groups()
    row = history(env, "logged")[0]
    assert int(priority) == 9 * 8 + 4  # facility cron, severity warning for a failure
    assert int(pid) == row["pid"]
    assert fields(message) == {"name": "logged", "run_id": row["run_id"], "status": "failed", "exit_status": "3",
                               "duration_s": f"{row['duration_s']:g}", "host": row["host"], "attempt": "1"}
    assert run_lockrun(env, "-n", "logged", "--syslog", "--", "true").returncode == 0
    priority, _, message = SYSLOG_LINE.fullmatch(server.recv(4096).decode()).groups()
    assert int(priority) == 9 * 8 + 6 and fields(message)["status"] == "succeeded"


def test_syslog_from_the_config_file_and_an_unreachable_syslog(any_env, syslog_socket, tmp_path):
    path, server = syslog_socket
    config = tmp_path / "syslog.toml"
    config.write_text("syslog = true\n")
    env = {**any_env, "LOCKRUN_SYSLOG_SOCKET": str(path), "LOCKRUN_CONFIG": str(config)}
    assert run_lockrun(env, "-n", "cfg", "--", "true").returncode == 0
    assert "name=cfg " in server.recv(4096).decode()
    gone = {**any_env, "LOCKRUN_SYSLOG_SOCKET": str(tmp_path / "nothing-here")}
    result = run_lockrun(gone, "-n", "cfg", "--syslog", "--", "sh", "-c", "exit 4")
    assert_one_line(result, 4, "--syslog: cannot", "nothing-here")
    assert history(gone, "cfg")[0]["status"] == "failed"


def test_the_spool_settles_attempt_by_attempt_under_headers(tmp_path):
    # The hook --retry's loop uses: each failed attempt's output under its header, a success's dropped.
    script = (
        "from lockrun.run.capture import OutputSpool\n"
        "spool = OutputSpool(print)\n"
        "spool.keep(1, b'first out\\n'); spool.keep(2, b'first err\\n')\n"
        "spool.settle(failed=True, header='lockrun: attempt 1 failed')\n"
        "spool.keep(1, b'second\\n'); spool.settle(failed=False)\n"
        "spool.settle(failed=True, header='lockrun: attempt 3 printed nothing')\n"
        "spool.keep(1, b'unsettled\\n'); spool.close()\n"
    )
    result = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "first out\nunsettled\n"
    assert result.stderr == "lockrun: attempt 1 failed\nfirst err\n"
    assert os.listdir(tmp_path) == []


def test_retry_with_output_on_failure_prints_nothing_when_a_later_attempt_succeeds(any_env, tmp_path):
    # Contract: written out only when the run did not succeed; with --retry, each failed attempt's
    # output under a one-line header (docs/operating.md "Output").
    counter = tmp_path / "n"
    script = (f'n=$(cat "{counter}" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "{counter}"; '
              'echo "out $n"; echo "err $n" >&2; [ $n -ge 2 ]')
    rescued = run_lockrun(any_env, "-n", "later", "--retry", "2", "--retry-delay", "0", "--output", "on-failure",
                          "--", "sh", "-c", script)
    assert (rescued.returncode, rescued.stdout, rescued.stderr) == (0, "", "")
    failing = run_lockrun(any_env, "-n", "never", "--retry", "1", "--retry-delay", "0", "--output", "on-failure",
                          "--", "sh", "-c", "echo out; echo err >&2; exit 4")
    assert failing.returncode == 4 and failing.stdout == "out\nout\n", failing.stdout
    assert failing.stderr == ("lockrun: attempt 1 of 2 of 'never': failed (exit 4)\nerr\n"
                              "lockrun: attempt 2 of 2 of 'never': failed (exit 4)\nerr\n"), failing.stderr
