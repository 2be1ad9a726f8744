"""A local --wait sleeps in the kernel (backends/local/waiting.py): it wakes when the holder lets
go, keeps its deadline, ends on a signal, waits for --slots too, and never keeps a lock it only
waited for. What it costs is bench/local_wait.py's figure; here, how often it wakes."""

from __future__ import annotations

import signal
import subprocess
import time

from tests.conftest import history, run_lockrun, spawn_lockrun, wait_until
from tests.test_local import start_holder


def voluntary_switches(pid: int) -> int:
    """How often the main thread of ``pid`` went to sleep so far (a poller: every few ms)."""
    with open(f"/proc/{pid}/task/{pid}/status") as f:
        line = next(line for line in f if line.startswith("voluntary_ctxt_switches:"))
    return int(line.split()[1])


def waiting(env, tmp_path, name: str, *extra: str) -> subprocess.Popen:
    """A lockrun waiting for ``name``; it writes a file once its command runs."""
    ran = tmp_path / f"{name}.ran"
    return spawn_lockrun(env, "-n", name, "--wait", "600", *extra, "--", "sh", "-c", f"touch {ran}",
                         stderr=subprocess.PIPE)


def test_a_local_waiter_sleeps_until_the_holder_lets_go(local_env, tmp_path):
    holder = start_holder(local_env, tmp_path, "sleepy")
    waiter = waiting(local_env, tmp_path, "sleepy")
    try:
        # Started and waiting: its helper thread is there (the poller had none).
        wait_until(lambda: _threads(waiter.pid) >= 2, what="the waiter's helper thread")
        before = voluntary_switches(waiter.pid)
        time.sleep(2.0)  # a window to count wake-ups in, not a wait for a condition
        woke = voluntary_switches(waiter.pid) - before
        # Polling every 5 ms woke ~400 times in 2 s; sleeping in the kernel, once a second or so.
        assert woke < 40, woke
        assert not (tmp_path / "sleepy.ran").exists()
    finally:
        holder.terminate()
        holder.communicate(timeout=30)
    _, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    assert (tmp_path / "sleepy.ran").exists()
    assert [r["status"] for r in history(local_env, "sleepy")] == ["succeeded", "killed"]


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


def test_a_local_wait_keeps_its_deadline(local_env, tmp_path):
    holder = start_holder(local_env, tmp_path, "deadline")
    try:
        started = time.monotonic()
        result = run_lockrun(local_env, "-n", "deadline", "--wait", "1.5", "--", "true")
        took = time.monotonic() - started
    finally:
        holder.terminate()
        holder.communicate(timeout=30)
    assert result.returncode == 75, result.stderr
    assert took >= 1.5, took  # never gives up early (it gave up at all: the exit code)


def test_sigterm_ends_a_local_wait(local_env, tmp_path):
    holder = start_holder(local_env, tmp_path, "term")
    try:
        waiter = waiting(local_env, tmp_path, "term")
        wait_until(lambda: _threads(waiter.pid) >= 2, what="the waiter's helper thread")
        waiter.send_signal(signal.SIGTERM)
        _, err = waiter.communicate(timeout=30)
    finally:
        holder.terminate()
        holder.communicate(timeout=30)
    assert waiter.returncode == 128 + signal.SIGTERM, err
    assert "interrupted by signal 15 before the command started" in err
    assert not (tmp_path / "term.ran").exists()


def test_a_local_slots_waiter_sleeps_and_takes_the_first_slot_let_go(local_env, tmp_path):
    first = start_holder(local_env, tmp_path, "pool", "--slots", "2")
    flag = tmp_path / "pool-b.started"
    second = spawn_lockrun(local_env, "-n", "pool", "--slots", "2", "--", "sh", "-c", f"touch {flag}; exec sleep 300")
    wait_until(flag.exists, what="the second holder of pool")
    waiter = waiting(local_env, tmp_path, "pool", "--slots", "2")
    try:
        wait_until(lambda: _threads(waiter.pid) >= 3, what="one helper thread per slot")
        before = voluntary_switches(waiter.pid)
        time.sleep(2.0)
        assert voluntary_switches(waiter.pid) - before < 40
        second.terminate()
        second.wait(timeout=30)
        _, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, err
        assert (tmp_path / "pool.ran").exists()
    finally:
        for proc in (first, second):
            proc.terminate()
            proc.communicate(timeout=30)


def test_a_wait_given_up_keeps_no_lock_and_never_drops_one_taken_later(local_env, tmp_path):
    """The helper a timed-out wait leaves blocked gives the lock straight back once granted, and its
    descriptor is never closed on a file the process holds (closing one drops a POSIX lock)."""
    from lockrun.backends.local.backend import LocalBackend
    from lockrun.backends.values import Holder, Lease

    holder = start_holder(local_env, tmp_path, "handed")
    backend = LocalBackend(local_env["LOCKRUN_STATE_DIR"])
    try:
        assert isinstance(backend.acquire("handed", "tok", 30.0, {"run_id": "r1"}), Holder)
        backend.wait_for_release("handed", 0.2)  # gives up: its helper stays blocked on the file
        holder.terminate()
        holder.communicate(timeout=30)
        helpers = backend._waits._helpers.values()  # noqa: SLF001 - the helper, granted and done
        wait_until(lambda: all(helper.done.is_set() for helper in helpers), what="the helper granted")
        # Granted once the holder is gone, the helper gave it back: another process can take it.
        wait_until(lambda: run_lockrun(local_env, "-n", "handed", "--", "true").returncode == 0,
                   what="the lock free for others")
        lease = backend.acquire("handed", "tok", 30.0, {"run_id": "r1"})
        assert isinstance(lease, Lease)
        backend.wait_for_release("other", 0.05)  # finished helpers' descriptors are closed here...
        busy = run_lockrun(local_env, "-n", "handed", "--", "true")
        assert busy.returncode == 75, busy.stderr  # ...but not the one on the file we hold
        assert backend.release(lease) is True
        assert run_lockrun(local_env, "-n", "handed", "--", "true").returncode == 0
    finally:
        backend.close()


def test_a_local_waiter_takes_a_lock_cleared_by_unlock_force(local_env, tmp_path):
    """unlock --force removes the lock file its helper sleeps on: the waiter notices it is gone."""
    holder = start_holder(local_env, tmp_path, "forced", "--ttl", "3")
    waiter = waiting(local_env, tmp_path, "forced")
    try:
        wait_until(lambda: _threads(waiter.pid) >= 2, what="the waiter's helper thread")
        assert run_lockrun(local_env, "unlock", "forced", "--force", "--yes").returncode == 0
        _, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, err
        assert (tmp_path / "forced.ran").exists()
    finally:
        holder.terminate()
        holder.communicate(timeout=30)


def test_a_local_waiter_sleeps_through_a_min_hold_and_runs_after_it(local_env, tmp_path):
    """A finished run's --min-hold holds no kernel lock (nothing to block on): its end is a time,
    slept until, never a busy loop."""
    assert run_lockrun(local_env, "-n", "cooled", "--min-hold", "4", "--", "true").returncode == 0
    cooling_ends = time.time() + 3.0  # at least: the run ended before this line
    waiter = waiting(local_env, tmp_path, "cooled")
    wait_until(lambda: _threads(waiter.pid) >= 1 and voluntary_switches(waiter.pid) > 0, what="the waiter")
    before = voluntary_switches(waiter.pid)
    time.sleep(1.0)  # a window to count wake-ups in
    assert voluntary_switches(waiter.pid) - before < 40
    _, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    assert (tmp_path / "cooled.ran").stat().st_mtime >= cooling_ends
