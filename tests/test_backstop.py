"""The backstop timer (lockrun/backstop.py): it kills its own process, and only when it should.

Each case runs in a real subprocess, since the timer's whole point is to SIGKILL the
process that armed it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

PROGRAM = """
import sys, time
from lockrun.run.backstop import Backstop
backstop = Backstop()
{steps}
time.sleep(3)
print("alive")
"""


def run(steps: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROGRAM.format(steps=steps)], capture_output=True, text=True,
                          timeout=30)


def test_it_kills_its_process_when_the_moment_comes():
    started = time.monotonic()
    result = run("backstop.arm(time.monotonic() + 0.2)")
    assert result.returncode == -signal.SIGKILL and result.stdout == ""
    assert time.monotonic() - started < 2.5  # at the moment armed, not after the 3 s sleep


def test_each_arm_moves_the_moment():
    result = run("backstop.arm(time.monotonic() + 0.3)\nbackstop.arm(time.monotonic() + 60)")
    assert (result.returncode, result.stdout) == (0, "alive\n")


def test_a_moment_already_past_fires_at_once():
    result = run("backstop.arm(time.monotonic() - 1)")
    assert result.returncode == -signal.SIGKILL


def test_disarmed_it_stays_retired_even_if_a_late_renewal_arms_it():
    result = run("backstop.arm(time.monotonic() + 0.3)\nbackstop.disarm()\nbackstop.arm(time.monotonic() + 0.1)")
    assert (result.returncode, result.stdout) == (0, "alive\n")


def test_it_kills_a_stopped_process():
    steps = "backstop.arm(time.monotonic() + 1.0)\nprint('armed', flush=True)"
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM.format(steps=steps)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "armed\n"
    proc.send_signal(signal.SIGSTOP)
    try:
        assert proc.wait(timeout=15) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.communicate()
