"""The Python API (docs/python.md): ``with lockrun.lock(name)`` in real Python processes, against
real redis-server processes and the local backend, beside real ``lockrun`` commands."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import history, run_lockrun, spawn_lockrun, wait_until

# A block that holds NAME until the file RELEASE appears: ENTERED gets the fencing token.
HOLD = """
import json, os, sys, time, lockrun
name, entered, release = sys.argv[1:4]
ttl = float(sys.argv[4]) if len(sys.argv) > 4 else None
wait = float(sys.argv[5]) if len(sys.argv) > 5 else 0
try:
    with lockrun.lock(name, ttl=ttl, wait=wait) as lease:
        with open(entered + ".tmp", "w") as f:
            f.write(str(lease.token))
        os.rename(entered + ".tmp", entered)
        while not os.path.exists(release):
            time.sleep(0.02)
except lockrun.Busy as exc:
    print(json.dumps({"busy": str(exc), "type": type(exc).__name__}))
    sys.exit(75)
print(json.dumps({"token": lease.token, "run_id": lease.run_id}))
"""


def script(tmp_path: Path, text: str, name: str = "job.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def python(env: dict, path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(path), *args], env=env, capture_output=True, text=True, timeout=timeout)


def spawn_python(env: dict, path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(path), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finished(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, dict, str]:
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return proc.returncode, json.loads(lines[-1]) if lines else {}, err


class Holder:
    """A Python process holding a name through the API until :meth:`release`."""

    def __init__(self, env: dict, tmp_path: Path, name: str, label: str, *args: str) -> None:
        self.entered, self.release_file = tmp_path / f"{label}.in", tmp_path / f"{label}.out"
        self.proc = spawn_python(env, script(tmp_path, HOLD, "hold.py"), name, str(self.entered),
                                 str(self.release_file), *args)

    def wait_entered(self) -> int:
        wait_until(lambda: self.entered.exists() or self.proc.poll() is not None, what="the block to be entered")
        assert self.entered.exists(), self.proc.communicate()
        return int(self.entered.read_text())

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=30)

    def release(self) -> dict:
        self.release_file.touch()
        code, out, err = finished(self.proc)
        assert code == 0 and err == "", (code, err)
        return out


def status_of(env: dict, name: str) -> dict:
    result = run_lockrun(env, "status", "--json", name)
    assert result.returncode == 0, result.stderr
    (lock,) = json.loads(result.stdout)["locks"]
    return lock


# -- exclusion ------------------------------------------------------------------------------------


def test_two_python_processes_exclude_each_other_and_status_shows_the_holder(any_env, tmp_path):
    first = Holder(any_env, tmp_path, "two", "a")
    token = first.wait_entered()
    held = status_of(any_env, "two")
    assert (held["state"], held["pid"], held["command"]) == ("held", first.proc.pid, ["hold.py", "__main__:<module>"])
    assert held["host"] == os.uname().nodename
    busy = python(any_env, tmp_path / "hold.py", "two", str(tmp_path / "b.in"), str(tmp_path / "b.out"))
    assert busy.returncode == 75 and busy.stderr == "", busy
    assert json.loads(busy.stdout)["type"] == "Busy" and f":{first.proc.pid}" in json.loads(busy.stdout)["busy"]
    waiter = Holder(any_env, tmp_path, "two", "c", "5", "60")  # waits for the release
    wait_until(lambda: any(row["pid"] == waiter.proc.pid for row in history(any_env, "two")),
               what="the waiter's row: it is trying for the lock")
    assert not waiter.entered.exists()
    first.release()
    assert waiter.wait_entered() > token
    waiter.release()
    assert [row["status"] for row in history(any_env, "two")] == ["succeeded", "busy", "succeeded"]


def test_the_cli_and_the_api_exclude_each_other_both_ways(any_env, tmp_path):
    api = Holder(any_env, tmp_path, "both", "api")
    api.wait_entered()
    cli = run_lockrun(any_env, "-n", "both", "--", "touch", str(tmp_path / "cli-ran"))
    assert cli.returncode == 75 and not (tmp_path / "cli-ran").exists()
    api.release()

    flag = tmp_path / "cli-started"
    proc = spawn_lockrun(any_env, "-n", "both", "--", "sh", "-c", f"touch {flag}; exec sleep 300")
    wait_until(flag.exists, what="the CLI's command")
    refused = python(any_env, tmp_path / "hold.py", "both", str(tmp_path / "x.in"), str(tmp_path / "x.out"))
    assert refused.returncode == 75 and f":{proc.pid}" in json.loads(refused.stdout)["busy"]
    waiter = Holder(any_env, tmp_path, "both", "after", "5", "60")
    proc.terminate()  # forwarded to the command; the release wakes the waiter
    proc.wait(timeout=30)
    waiter.wait_entered()
    waiter.release()
    statuses = sorted((row["status"], row["command"][0]) for row in history(any_env, "both"))
    assert statuses == [("busy", "hold.py"), ("busy", "touch"), ("killed", "sh"), ("succeeded", "hold.py"),
                        ("succeeded", "hold.py")]


# -- status and unlock ----------------------------------------------------------------------------


def test_unlock_refuses_a_live_api_holder_and_clears_a_sigkilled_one(env, tmp_path):
    holder = Holder(env, tmp_path, "u", "a")
    holder.wait_entered()
    refused = run_lockrun(env, "unlock", "u", "--yes")
    assert refused.returncode == 1 and "alive" in refused.stderr, refused.stderr
    holder.kill()
    assert status_of(env, "u")["state"] == "zombie"
    cleared = run_lockrun(env, "unlock", "u", "--yes")
    assert cleared.returncode == 0, cleared.stderr
    assert status_of(env, "u")["state"] == "free"
    assert [row["status"] for row in history(env, "u")] == ["unlocked", "abandoned"]


def test_a_local_api_holder_in_status_unlock_and_unlock_force(local_env, tmp_path):
    holder = Holder(local_env, tmp_path, "loc", "a", "2")
    holder.wait_entered()
    held = status_of(local_env, "loc")
    assert (held["state"], held["pid"], held["ttl_remaining_s"]) == ("held", holder.proc.pid, None)
    assert run_lockrun(local_env, "unlock", "loc", "--yes").returncode == 1
    assert run_lockrun(local_env, "unlock", "loc", "--force", "--yes").returncode == 0
    code, _, err = finished(holder.proc)  # the keeper finds its lock file gone: LeaseLost in the block
    assert code == 1 and "LeaseLost: lease on 'loc' lost: the lock was taken over or cleared" in err
    row = history(local_env, "loc", "--status", "lost")[0]
    assert (row["exit_status"], row["backend"]) == (76, "local")

    killed = Holder(local_env, tmp_path, "loc", "b")
    killed.wait_entered()
    killed.kill()
    again = Holder(local_env, tmp_path, "loc", "c")  # a dead holder's kernel lock is gone with it
    again.wait_entered()
    again.release()
    assert [row["status"] for row in history(local_env, "loc")][:2] == ["succeeded", "abandoned"]


# -- a lost lease reaches the block ----------------------------------------------------------------

LOSE = """
import json, os, signal, sys, threading, time, lockrun
name, where, entered = sys.argv[1:4]
out = {}
def block():
    try:
        with lockrun.lock(name, ttl=3) as lease:
            out["token"] = lease.token
            open(entered, "w").close()
            try:
                if where == "main":
                    time.sleep(120)          # a long sleep: the signal cuts it short
                else:
                    while True:
                        time.sleep(0.05)     # another thread: raised when it comes back to Python
            except lockrun.LeaseLost:
                out["lost_at"] = time.time()  # in the block, where it was raised
                raise
    except lockrun.LeaseLost as exc:
        out.update(type=type(exc).__name__, message=str(exc), reason=exc.reason,
                   thread=threading.current_thread().name, held=lease.held, lost=lease.lost)
if where == "main":
    block()
else:
    worker = threading.Thread(target=block, name="worker")
    worker.start()
    worker.join()
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["main", "thread"])
@pytest.mark.parametrize("fault", ["deleted", "paused"])
def test_a_lost_lease_raises_leaselost_in_the_thread_that_entered_the_block(env, redis_server, tmp_path, where,
                                                                            fault):
    entered = tmp_path / "entered"
    proc = spawn_python(env, script(tmp_path, LOSE), "lose", where, str(entered))
    wait_until(entered.exists, what="the block")
    fault_at = time.time()
    if fault == "deleted":
        redis_server.client().delete("lockrun:{lose}:lock")
    else:
        redis_server.pause()
    try:
        code, out, err = finished(proc)
    finally:
        if fault == "paused":
            redis_server.resume()
    assert code == 0 and err == "", err
    assert (out["type"], out["thread"], out["held"], out["lost"]) == (
        "LeaseLost", "MainThread" if where == "main" else "worker", False, True)
    assert out["lost_at"] < fault_at + 3.0  # by the lease's end (ttl 3), whatever the block was doing
    why = "taken over or cleared" if fault == "deleted" else "no renewal succeeded"
    assert why in out["reason"] and out["message"] == f"lease on 'lose' lost: {out['reason']}"
    row = history(env, "lose")[0]
    assert (row["status"], row["exit_status"], row["fencing_token"]) == ("lost", 76, out["token"])
    assert row["note"] == f"lease lost: {out['reason']}"
    if fault == "deleted":
        fleet = history(env, "lose", "--fleet")[0]
        assert (fleet["status"], fleet["run_id"]) == ("lost", row["run_id"])


BLOCKED = """
import json, sys, threading, time, lockrun
name, entered, fifo = sys.argv[1:4]
out = {}
def block():
    try:
        with lockrun.lock(name, ttl=2):
            open(entered, "w").close()
            with open(fifo, "rb") as f:      # a call that does not come back until the test writes
                f.read(1)
            out["after_read"] = True
    except lockrun.LeaseLost as exc:
        out["type"] = type(exc).__name__
worker = threading.Thread(target=block)
worker.start()
worker.join()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_thread_stuck_in_a_call_is_recorded_lost_at_the_lease_end_and_told_when_it_returns(env, redis_server,
                                                                                          tmp_path):
    entered, fifo = tmp_path / "entered", tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = spawn_python(env, script(tmp_path, BLOCKED), "stuck", str(entered), str(fifo))
    wait_until(entered.exists, what="the block")
    redis_server.client().delete("lockrun:{stuck}:lock")
    row = wait_until(lambda: next(iter(history(env, "stuck", "--status", "lost")), None), what="the row lost")
    assert "the block was still running at the lease's end" in row["note"]
    assert proc.poll() is None  # the block still waits in its read
    assert status_of(env, "stuck")["state"] == "free"  # released: never renewed past its end
    with open(fifo, "wb") as f:
        f.write(b"x")
    code, out, err = finished(proc)
    assert (code, out) == (0, {"type": "LeaseLost"}), err  # the first Python code after the read raised it
    assert [r["status"] for r in history(env, "stuck")] == ["lost"]


FLAG = """
import json, sys, time, lockrun
name, entered = sys.argv[1:3]
out = {}
with lockrun.lock(name, ttl=2, on_lost="flag") as lease:
    open(entered, "w").close()
    while not lease.lost:
        time.sleep(0.02)
    out["reason"] = lease.reason
    try:
        lease.check()
    except lockrun.LeaseLost as exc:
        out["check"] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_on_lost_flag_sets_lost_and_the_block_goes_on(env, redis_server, tmp_path):
    entered = tmp_path / "entered"
    proc = spawn_python(env, script(tmp_path, FLAG), "flagged", str(entered))
    wait_until(entered.exists, what="the block")
    redis_server.client().delete("lockrun:{flagged}:lock")
    code, out, err = finished(proc)
    assert code == 0 and err == "", err
    assert "taken over or cleared" in out["reason"] and out["check"] == f"lease on 'flagged' lost: {out['reason']}"
    row = history(env, "flagged")[0]  # the block ended by itself: its status, and a note (--on-lost continue)
    assert (row["status"], row["note"]) == ("succeeded", f"lease lost: {out['reason']}")


@pytest.mark.slow
def test_a_replace_from_the_cli_stops_an_api_block(env, tmp_path):
    holder = Holder(env, tmp_path, "rep", "a", "2")
    holder.wait_entered()
    replaced = run_lockrun(env, "-n", "rep", "--replace", "--", "true")
    assert replaced.returncode == 0, replaced.stderr
    code, _, err = finished(holder.proc)
    assert code == 1 and "LeaseLost: lease on 'rep' lost: another run asked to replace this one" in err
    assert [row["status"] for row in history(env, "rep")] == ["succeeded", "preempted"]


# -- what a block records ----------------------------------------------------------------------------

ENDS = """
import json, sys, lockrun

class SyncError(Exception):
    pass

@lockrun.locked("ends")
def job(how):
    if how == "fail":
        raise SyncError("secret detail")
    if how == "exit":
        sys.exit(3)
    if how == "interrupt":
        raise KeyboardInterrupt

seen = []
for how in ("ok", "fail", "exit", "interrupt"):
    try:
        job(how)
        seen.append("returned")
    except BaseException as exc:
        seen.append(type(exc).__name__)
with lockrun.lock("ends") as lease:
    pass
print(json.dumps(seen))
"""


def test_history_says_how_each_block_ended(any_env, tmp_path):
    result = python(any_env, script(tmp_path, ENDS))
    assert result.stderr == "" and json.loads(result.stdout) == ["returned", "SyncError", "SystemExit",
                                                                   "KeyboardInterrupt"]
    rows = [(r["status"], r["exit_status"], r["exit_code"], r["signal"], r["note"], r["command"])
            for r in reversed(history(any_env, "ends"))]
    assert rows == [
        ("succeeded", 0, 0, None, None, ["job.py", "__main__:job"]),
        ("failed", 1, 1, None, "raised __main__.SyncError", ["job.py", "__main__:job"]),
        ("failed", 3, 3, None, "raised SystemExit(3)", ["job.py", "__main__:job"]),
        ("killed", 130, None, 2, "KeyboardInterrupt", ["job.py", "__main__:job"]),
        ("succeeded", 0, 0, None, None, ["job.py", "__main__:<module>"]),
    ]
    tokens = [r["fencing_token"] for r in reversed(history(any_env, "ends"))]
    assert tokens == sorted(tokens) and len(set(tokens)) == 5
    # Run ids as the command line gives them (with dashes), found by `show` from their start.
    run_id = history(any_env, "ends")[0]["run_id"]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", run_id), run_id
    assert run_lockrun(any_env, "show", run_id[:13]).returncode == 0


def test_an_unreachable_redis_is_unavailable_and_recorded(env, tmp_path):
    env["LOCKRUN_REDIS_URL"] = f"unix://{tmp_path}/nothing.sock"
    result = python(env, script(tmp_path, """
        import json, lockrun
        try:
            with lockrun.lock("gone"):
                print("ran")
        except lockrun.Unavailable as exc:
            print(json.dumps([type(exc).__name__, isinstance(exc, lockrun.LockrunError), exc.exit_code]))
    """))
    assert (result.stdout, result.stderr) == ('["Unavailable", true, 69]\n', "")
    assert history(env, "gone")[0]["status"] == "unavailable"


def test_a_redis_that_never_answers_is_unavailable_in_bounded_time(env, tmp_path):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes the handshake; nobody ever reads
        env["LOCKRUN_REDIS_URL"] = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        started = time.monotonic()
        result = python(env, script(tmp_path, """
            import lockrun
            try:
                with lockrun.lock("mute", ttl=5):
                    print("ran")
            except lockrun.Unavailable as exc:
                print(type(exc).__name__)
        """))
        took = time.monotonic() - started
    assert (result.stdout, result.stderr) == ("Unavailable\n", "")
    assert took < 10  # each call bounded by TTL/5 (1 s here)


def test_a_paused_name_is_not_run(any_env, tmp_path):
    assert run_lockrun(any_env, "pause", "held-back", "--for", "1h").returncode == 0
    result = python(any_env, script(tmp_path, """
        import json, lockrun
        try:
            with lockrun.lock("held-back"):
                print("ran")
        except lockrun.Busy as exc:
            print(json.dumps(type(exc).__name__))
    """))
    assert (result.stdout, result.stderr) == ('"Paused"\n', "")
    assert history(any_env, "held-back")[0]["status"] == "paused"


# -- a library that behaves like one --------------------------------------------------------------

QUIET = """
import json, logging, sys
if sys.argv[1] == "logging":
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
import lockrun
loaded = {"api": "lockrun.api.lock" in sys.modules}
lockrun.lock
loaded.update(lockrun="lockrun.api.lock" in sys.modules,
              **{name: name in sys.modules for name in ("click", "rich", "redis", "asyncio", "lockrun.cli")})
with lockrun.lock("quiet", ttl=2, on_lost="flag") as lease:
    import subprocess
    subprocess.run(["redis-cli", "-s", sys.argv[2], "DEL", "lockrun:{quiet}:lock"], check=True,
                   stdout=subprocess.DEVNULL)
    while not lease.lost:
        pass
loaded["redis_after"] = "redis" in sys.modules
print(json.dumps(loaded))
"""


@pytest.mark.slow
def test_the_library_prints_nothing_unless_logging_is_configured_and_imports_lazily(env, redis_server, tmp_path):
    path = script(tmp_path, QUIET)
    silent = python(env, path, "silent", redis_server.socket)
    assert silent.stderr == "", silent.stderr
    assert json.loads(silent.stdout) == {"api": False, "lockrun": True, "click": False, "rich": False, "redis": False,
                                         "asyncio": False, "lockrun.cli": False, "redis_after": True}
    logged = python(env, path, "logging", redis_server.socket)
    assert "lockrun WARNING lease on 'quiet' lost: the lock was taken over or cleared" in logged.stderr


# -- hostile uses ---------------------------------------------------------------------------------

HOSTILE = """
import json, os, subprocess, sys, threading, time, warnings, lockrun
# Python 3.12+ warns of any fork in a process with threads (a block has two: docs/python.md).
warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
out = {}

# The same name twice in one thread: refused at once, whatever the wait.
with lockrun.lock("twice", wait=30) as outer:
    try:
        with lockrun.lock("twice", wait=30):
            out["twice"] = "entered"
    except lockrun.Busy as exc:
        out["twice"] = str(exc)
    with lockrun.lock("nested") as inner:  # another name inside: fine
        out["nested"] = [outer.held, inner.held]

# A lock used after its block: the lease is released; the block object may be entered again.
block = lockrun.lock("again")
with block as first:
    pass
with block as second:
    pass
try:
    first.check()
except lockrun.LeaseLost as exc:
    out["after"] = [str(exc), first.held, first.lost, second.token > first.token]

# fork inside the block: the child holds nothing and leaves the lock to its parent.
lockrun_command = os.path.join(os.path.dirname(sys.executable), "lockrun")
with lockrun.lock("forky") as lease:
    pid = os.fork()
    if pid == 0:
        try:
            lease.check()
            code = 1
        except lockrun.LeaseLost:
            code = 0
    else:
        _, status = os.waitpid(pid, 0)  # the child has left the block
        state = json.loads(subprocess.run([lockrun_command, "status", "--json", "forky"], capture_output=True,
                                          text=True, check=True).stdout)["locks"][0]
        out["fork"] = [os.waitstatus_to_exitcode(status), lease.held, state["state"], state["pid"] == os.getpid()]
if pid == 0:
    os._exit(code)

# Several threads, one block object, each entry its own lease: never two inside at once.
spans, shared = [], lockrun.lock("shared", wait=60)
def worker():
    for _ in range(5):
        with shared as lease:
            start = time.monotonic()
            time.sleep(0.01)
            spans.append((start, time.monotonic(), lease.token))
threads = [threading.Thread(target=worker) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
spans.sort()
out["overlaps"] = sum(1 for a, b in zip(spans, spans[1:]) if b[0] < a[1])
out["tokens_increase"] = [s[2] for s in spans] == sorted(s[2] for s in spans)
out["entries"] = len(spans)
print(json.dumps(out))
"""


def test_hostile_uses(any_env, tmp_path):
    result = python(any_env, script(tmp_path, HOSTILE), timeout=120)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    out = json.loads(result.stdout)
    assert "already held by this thread" in out["twice"] and "not re-entrant" in out["twice"]
    assert out["nested"] == [True, True]
    assert out["after"] == ["the block of 'again' has ended: its lease was released", False, False, True]
    assert out["fork"] == [0, True, "held", True]
    assert (out["overlaps"], out["tokens_increase"], out["entries"]) == (0, True, 20)
    assert [row["status"] for row in history(any_env, "forky")] == ["succeeded"]  # one row: the parent's
    assert [row["status"] for row in history(any_env, "twice")] == ["busy", "succeeded"]  # newest first
    assert status_of(any_env, "shared")["state"] == "free"


FDS = """
import json, os, subprocess, sys, time, lockrun
lockrun_command = os.path.join(os.path.dirname(sys.executable), "lockrun")
open_fds = []
for i in range(6):  # a name that is busy for a moment each time: every block waits in the kernel
    flag = f"{sys.argv[1]}/held-{i}"
    holder = subprocess.Popen([lockrun_command, "-n", f"name-{i}", "--", "sh", "-c", f"touch {flag}; sleep 0.3"])
    while not os.path.exists(flag):
        time.sleep(0.01)
    with lockrun.lock(f"name-{i}", wait=30):
        pass
    holder.wait()
    open_fds.append(len(os.listdir("/proc/self/fd")))
print(json.dumps(open_fds))
"""


def test_local_waits_on_many_names_leave_no_descriptors_behind(local_env, tmp_path):
    # A service that takes one name per customer must not keep a pipe and a descriptor per name it
    # ever waited for (backends/local/waiting.py: KernelWaits.close).
    result = python(local_env, script(tmp_path, FDS), str(tmp_path))
    assert result.stderr == ""
    open_fds = json.loads(result.stdout)
    assert open_fds == [open_fds[0]] * 6, open_fds
    (block,) = [row for row in history(local_env, "name-5") if row["command"][0] == "job.py"]
    assert block["waited_s"] > 0.05  # it did wait for the lock


# -- asyncio ------------------------------------------------------------------------------------------

ASYNC = """
import asyncio, json, sys, time, lockrun
name, entered = sys.argv[1:3]
out = {"ticks": 0}

async def ticker():
    while True:
        await asyncio.sleep(0.01)
        out["ticks"] += 1

async def block():
    try:
        async with lockrun.lock_async(name, ttl=3) as lease:
            open(entered, "w").close()
            await asyncio.sleep(120)
    except lockrun.LeaseLost as exc:
        out.update(type=type(exc).__name__, reason=exc.reason, held=lease.held)

@lockrun.locked("deco-async")
async def decorated():
    return "ok"

async def main():
    tick = asyncio.create_task(ticker())
    async with lockrun.lock_async("a-twice") as first:
        try:
            async with lockrun.lock_async("a-twice", wait=5):
                out["twice"] = "entered"
        except lockrun.Busy:
            out["twice"] = "busy"
    await block()
    out["decorated"] = await decorated()
    out["cancelling"] = getattr(asyncio.current_task(), "cancelling", lambda: 0)()  # uncancelled (3.11+)
    tick.cancel()
    out["ticked"] = out["ticks"] > 10  # the loop ran on while the block waited
asyncio.run(main())
print(json.dumps(out))
"""


@pytest.mark.slow
def test_asyncio_blocks_are_cancelled_into_leaselost(env, redis_server, tmp_path):
    entered = tmp_path / "entered"
    proc = spawn_python(env, script(tmp_path, ASYNC), "aio", str(entered))
    wait_until(entered.exists, what="the async block")
    redis_server.client().delete("lockrun:{aio}:lock")
    code, out, err = finished(proc)
    assert code == 0 and err == "", err
    assert (out["type"], out["held"], out["twice"], out["decorated"], out["ticked"], out["cancelling"]) == (
        "LeaseLost", False, "busy", "ok", True, 0)
    assert "taken over or cleared" in out["reason"]
    assert history(env, "aio")[0]["status"] == "lost"
    assert [row["status"] for row in history(env, "deco-async")] == ["succeeded"]


CANCELLED_WAIT = """
import asyncio, json, time, lockrun

async def main():
    async def hold(entered):
        async with lockrun.lock_async("cw", ttl=30):
            entered.set()
            await asyncio.sleep(1)

    entered = asyncio.Event()
    holder = asyncio.create_task(hold(entered))
    await entered.wait()
    async def wait_for_it():
        async with lockrun.lock_async("cw", wait=30):
            print(json.dumps({"ran": True}))

    try:
        await asyncio.wait_for(wait_for_it(), 0.2)
    except asyncio.TimeoutError:
        pass
    await holder

asyncio.run(main())
time.sleep(1.5)  # a wait still going on would take the lock now, and tell a closed loop
"""


def test_a_cancelled_wait_ends_and_takes_nothing(any_env, tmp_path):
    # The wait is for another task of this process on the local backend, for the holder's key on
    # Redis: either way, cancelling the task ends it, the row says busy, nothing is taken after.
    result = python(any_env, script(tmp_path, CANCELLED_WAIT))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    rows = history(any_env, "cw")
    assert sorted(row["status"] for row in rows) == ["busy", "succeeded"], rows
    assert [row["fencing_token"] for row in rows if row["status"] == "busy"] == [None]


# -- settings ---------------------------------------------------------------------------------------


def test_a_block_resolves_its_settings_as_the_cli_does(tmp_path, monkeypatch):
    from lockrun.api.settings import block_settings

    for key in [key for key in os.environ if key.startswith("LOCKRUN_")]:
        monkeypatch.delenv(key)
    config = tmp_path / "config.toml"
    config.write_text('redis_url = "redis://127.0.0.1:1/0"\nttl = "2m"\n')
    config.chmod(0o600)
    monkeypatch.setenv("LOCKRUN_CONFIG", str(config))
    monkeypatch.setenv("LOCKRUN_STATE_DIR", str(tmp_path / "state"))
    resolved = block_settings("x", redis_url=None, ttl=None)
    assert (resolved.redis_url, resolved.ttl, resolved.backend_from) == (
        "redis://127.0.0.1:1/0", 120.0, f"redis_url in {config}")
    monkeypatch.setenv("LOCKRUN_REDIS_URL", "unix:///run/r.sock")
    monkeypatch.setenv("LOCKRUN_TTL", "90s")
    resolved = block_settings("x", redis_url=None, ttl=None)
    assert (resolved.redis_url, resolved.ttl, resolved.backend_from) == ("unix:///run/r.sock", 90.0,
                                                                         "LOCKRUN_REDIS_URL")
    resolved = block_settings("x", redis_url="redis://h:6379/1", ttl=5)
    assert (resolved.redis_url, resolved.ttl, resolved.backend_from) == ("redis://h:6379/1", 5.0, "redis_url=")
    # The name's own table in the config file, as for a crontab line's run of the name.
    config.write_text('ttl = "2m"\n[job.x]\nttl = "7m"\n')
    monkeypatch.delenv("LOCKRUN_TTL")
    assert (block_settings("x", redis_url=None, ttl=None).ttl, block_settings("y", redis_url=None, ttl=None).ttl) == (
        420.0, 120.0)
    config.write_text("")
    monkeypatch.delenv("LOCKRUN_REDIS_URL")
    assert block_settings("x", redis_url=None, ttl=None).backend_name == "local"
