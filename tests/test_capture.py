"""--capture-tail passes output through as if it were not there: order, closed pipes, closed
streams, slow readers (both backends)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import history, lockrun_argv, run_lockrun, wait_until

PY = sys.executable
O1_E1_O2 = ["sh", "-c", "echo o1; echo e1 >&2; echo o2"]


@pytest.fixture
def env(any_env):
    return any_env


def tail_of(env, name):
    run_id = history(env, name)[0]["run_id"]
    return json.loads(run_lockrun(env, "show", run_id, "--json").stdout)["output_tail"]


@pytest.mark.parametrize("capture", [[], ["--capture-tail", "1k"]], ids=["inherited", "captured"])
def test_a_closed_pipe_stops_the_command_as_it_would_without_lockrun(env, capture):
    # `yes | head -1`: once head exits, yes must get SIGPIPE, with or without the tail pump.
    shell = f"{shlex.join(lockrun_argv('-n', 'yes', *capture, '--', 'yes'))} | head -1; echo \"${{PIPESTATUS[0]}}\""
    result = subprocess.run(["bash", "-c", shell], env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout == "y\n141\n" and result.stderr == ""
    row = history(env, "yes")[0]
    assert (row["status"], row["signal"], row["exit_status"]) == ("killed", 13, 141)


def test_stderr_still_flows_when_stdout_is_gone(env):
    script = ("import sys, time\n"
              "try:\n"
              "    for i in range(100000): sys.stdout.write('x' * 100 + '\\n'); sys.stdout.flush()\n"
              "except BrokenPipeError:\n"
              "    sys.stderr.write('stdout is gone\\n'); sys.stderr.flush()\n"
              "    sys.stdout = None\n")
    argv = lockrun_argv("-n", "half", "--capture-tail", "1k", "--", PY, "-c", script)
    shell = f"{shlex.join(argv)} | head -c 1000 >/dev/null"
    result = subprocess.run(["bash", "-c", shell], env=env, capture_output=True, text=True, timeout=60)
    assert result.stderr == "stdout is gone\n"
    assert history(env, "half")[0]["status"] == "succeeded"


def test_one_destination_keeps_the_exact_order(env, tmp_path):
    # cron gives a job one pipe for stdout and stderr: lockrun gives the command one too.
    for attempt in range(10):
        result = subprocess.run(lockrun_argv("-n", "order", "--capture-tail", "1k", "--", *O1_E1_O2), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        assert result.stdout == b"o1\ne1\no2\n", attempt
        assert tail_of(env, "order") == "o1\ne1\no2\n"
    log = tmp_path / "job.log"
    with open(log, "ab") as f:  # `>> job.log 2>&1`
        subprocess.run(lockrun_argv("-n", "order", "--capture-tail", "1k", "--", *O1_E1_O2), env=env, stdout=f,
                       stderr=f, timeout=60, check=True)
    assert log.read_bytes() == b"o1\ne1\no2\n"


def test_two_destinations_each_keep_their_order_and_every_byte(env):
    result = subprocess.run(lockrun_argv("-n", "two", "--capture-tail", "1k", "--", *O1_E1_O2), env=env,
                            capture_output=True, timeout=60)
    assert (result.stdout, result.stderr) == (b"o1\no2\n", b"e1\n")
    tail = tail_of(env, "two")
    assert sorted(tail.split()) == ["e1", "o1", "o2"] and tail.index("o1") < tail.index("o2")


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_stream_lockrun_was_started_without_stays_closed_for_the_command(env, closed):
    command = "echo out; echo err >&2; exit 0"
    redirect = ">&-" if closed == "stdout" else "2>&-"
    seen = []
    for capture in ([], ["--capture-tail", "1k"]):
        argv = shlex.join(lockrun_argv("-n", "closed", *capture, "--", "sh", "-c", command))
        result = subprocess.run(["bash", "-c", f"{argv} {redirect}"], env=env, capture_output=True, text=True,
                                timeout=60)
        seen.append((result.returncode, result.stdout, result.stderr))
    assert seen[0] == seen[1]
    assert seen[0][0] == 0 and ("out" in seen[0][1]) == (closed == "stderr")


def test_a_slow_non_blocking_reader_gets_every_byte(env):
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # lockrun's stdout says EAGAIN when the pipe is full
    proc = subprocess.Popen(lockrun_argv("-n", "slow", "--capture-tail", "1k", "--", PY, "-c",
                                         "import sys; sys.stdout.buffer.write(b'z' * 1000000)"),
                            env=env, stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    received = bytearray()

    def read() -> None:
        time.sleep(0.5)  # let the pipe fill first: the pump must wait, not drop output
        while chunk := os.read(read_end, 65536):
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    assert proc.wait(60) == 0
    reader.join(60)
    os.close(read_end)
    assert len(received) == 1000000 and proc.stderr.read() == b""
    proc.stderr.close()


def cpu_seconds_of_a_run(env, stdout, stderr, *args: str) -> float:
    """User plus system CPU of one lockrun and all it reaped (its command): os.wait4's usage."""
    proc = subprocess.Popen(lockrun_argv(*args), env=env, stdout=stdout, stderr=stderr)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    return usage.ru_utime + usage.ru_stime


def test_two_destinations_cost_about_what_one_does(env, tmp_path):
    # Every cron run goes through the pump now (the default failure tail), and `2>/dev/null` or
    # `2>>errors.log` gives it two pipes: a flood on one of them must not be read 1 KiB at a time
    # (3 to 7 times the CPU of one pipe, 5 s a GiB) when the other has nothing to say.
    flood = ["--", "head", "-c", "256M", "/dev/zero"]
    with open(os.devnull, "wb") as null, open(tmp_path / "errors.log", "ab") as errors:
        one = min(cpu_seconds_of_a_run(env, null, null, "-n", "flood", *flood) for _ in range(2))
        two = min(cpu_seconds_of_a_run(env, null, errors, "-n", "flood", *flood) for _ in range(2))
    assert two < 1.5 * one + 0.1, (one, two)


def test_a_reader_that_starts_late_still_gets_the_end_of_the_output(env):
    # cron's mailer, an ssh, a log shipper may take seconds to start reading. What the command wrote
    # before it exited sits in its pipe and lockrun's: without lockrun the command would wait for the
    # reader; the pump must too, not give up after PUMP_DRAIN_S and drop the end (the error message).
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(lockrun_argv("-n", "late", "--", "sh", "-c", "head -c 100000 /dev/zero; echo last words"),
                            env=env, stdout=write_end, stderr=subprocess.DEVNULL)
    os.close(write_end)
    time.sleep(4)  # the reader starts late on purpose: longer than the pump's 2 s drain
    received = bytearray()
    while chunk := os.read(read_end, 65536):
        received.extend(chunk)
    os.close(read_end)
    assert proc.wait(60) == 0
    assert len(received) == 100011 and received.endswith(b"last words\n"), len(received)


def stalled_run(env, *args: str) -> tuple[subprocess.Popen, int]:
    """lockrun writing 100 kB into a pipe nobody reads (but that stays open): the read end is returned."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(lockrun_argv("-n", "stalled", *args, "--", "head", "-c", "100000", "/dev/zero"),
                            env=env, stdout=write_end, stderr=subprocess.DEVNULL)
    os.close(write_end)
    return proc, read_end


def test_a_reader_that_never_reads_holds_lockrun_no_longer_than_the_timeout(env):
    proc, read_end = stalled_run(env, "--timeout", "2", "--kill-after", "1")
    try:
        started = time.monotonic()
        assert proc.wait(30) == 0  # the command did succeed; the killed command would have lost it too
        assert 2 < time.monotonic() - started < 20
    finally:
        proc.kill()
        os.close(read_end)


def child_commands(pid: int) -> list[str]:
    """The names of a process's children (lockrun's: its command, its watchdog)."""
    names = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(OSError):  # gone meanwhile
            names.append(Path(f"/proc/{child}/comm").read_text().strip())
    return names


def test_a_signal_ends_the_wait_for_a_reader_that_never_reads(env):
    proc, read_end = stalled_run(env)
    try:
        wait_until(lambda: history(env, "stalled") and "head" not in child_commands(proc.pid),
                   what="the command to be done and lockrun to wait for its reader")
        time.sleep(3)  # past the 2 s an idle pump gets: lockrun still waits, as the command would have
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    finally:
        proc.kill()
        os.close(read_end)


def test_a_replace_ends_the_wait_for_a_reader_that_never_reads(env):
    # Waiting for the reader holds the lock, as the command blocked in its write would: a --replace
    # (or a lost lease) stops that wait as it would have stopped the command: at its next renewal.
    proc, read_end = stalled_run(env, "--ttl", "3")
    try:
        wait_until(lambda: history(env, "stalled") and "head" not in child_commands(proc.pid),
                   what="the command to be done and lockrun to wait for its reader")
        started = time.monotonic()
        replaced = run_lockrun(env, "-n", "stalled", "--replace", "--wait", "20", "--", "true")
        assert replaced.returncode == 0, replaced.stderr
        assert time.monotonic() - started < 15
        proc.wait(15)
    finally:
        proc.kill()
        os.close(read_end)
