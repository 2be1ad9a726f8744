"""Nothing the command started outlives the lock: descendants that leave its process group
(setsid, setpgid, double forks, nohup ... &) are stopped with the kill schedule and reaped
before the release, whatever ends the run; lockrun as PID 1 reaps every orphan; a preempted
holder always stops. Real lockrun subprocesses throughout (README "What lockrun guarantees,
and how": the command; "Known limits").

Each escaped grandchild is TICKER: it appends its pid to a file, then a wall-clock tick to
another every 20 ms until it dies. A second run of the same name, queued with --wait, writes
when its command started: it must come after the grandchild's last tick, or the lock was
released while the grandchild still ran.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lockrun.run.cgroup import RunCgroup
from tests.conftest import history, lockrun_argv, run_lockrun, spawn_lockrun, wait_until

PY = sys.executable

TICKER = (
    "import os, signal, sys, time\n"
    "if 'ignore-term' in sys.argv: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "with open(sys.argv[2], 'a') as f: f.write(f'{os.getpid()}\\n')\n"
    "with open(sys.argv[1], 'a', buffering=1) as f:\n"
    "    while True:\n"
    "        f.write(f'{time.time()!r}\\n')\n"
    "        time.sleep(0.02)\n"
)

# How each command leaves a TICKER behind outside its process group, then waits for it to have
# started ($T: the ticker's argv). The command itself exits right after, unless a `sleep` follows.
DETACH = {
    "setsid": 'setsid $T &',
    "setpgid": f'{PY} -c "import os, subprocess, sys; subprocess.Popen(sys.argv[1:], process_group=0)" $T',
    "double-fork": '($T &)',
    "nohup": 'nohup $T >/dev/null 2>&1 &',
}
WAIT_FOR_PID = 'while [ ! -s "$P" ]; do sleep 0.01; done'


class Escapee:
    """The files of one escaping grandchild: its program, its ticks and its pid."""

    def __init__(self, folder: Path, name: str = "g") -> None:
        self.ticks, self.pids = folder / f"{name}.ticks", folder / f"{name}.pids"
        self.program = folder / "ticker.py"
        self.program.write_text(TICKER)

    def command(self, how: str, then: str = "", ignore_term: bool = False) -> list[str]:
        ticker = f"{PY} {self.program} {self.ticks} {self.pids}" + (" ignore-term" if ignore_term else "")
        script = f'T="{ticker}"; P={self.pids}\n{DETACH[how]}\n{WAIT_FOR_PID}\n{then}'
        return ["sh", "-c", script]

    def started(self) -> bool:
        return self.pids.exists() and bool(self.pids.read_text().split()) and self.ticks.exists()

    def pid_list(self) -> list[int]:
        return [int(p) for p in self.pids.read_text().split()]

    def last_tick(self) -> float:
        return float(self.ticks.read_text().split()[-1])


def gone(pid: int) -> bool:
    """Not alive, and reaped: a zombie left to init after lockrun exited would still show here."""
    return not os.path.exists(f"/proc/{pid}")


def start_stamp(path: Path) -> list[str]:
    return [PY, "-c", "import sys, time; open(sys.argv[1], 'w').write(repr(time.time()))", str(path)]


def queue_second_run(env: dict, name: str, stamp: Path) -> subprocess.Popen:
    return spawn_lockrun(env, "-n", name, "--wait", "60", "--", *start_stamp(stamp))


def assert_never_overlapped(escapee: Escapee, second: subprocess.Popen, stamp: Path) -> None:
    assert second.wait(60) == 0
    assert escapee.last_tick() < float(stamp.read_text()), "the next run started while the grandchild still ran"


# --- the command ends by itself -----------------------------------------------------------------


@pytest.mark.parametrize("how", sorted(DETACH))
def test_a_detached_grandchild_is_stopped_before_the_release(any_env, tmp_path, how):
    escapee, stamp = Escapee(tmp_path), tmp_path / "second"
    first = spawn_lockrun(any_env, "-n", "d", "--", *escapee.command(how, then="sleep 0.3"), stderr=subprocess.PIPE)
    wait_until(escapee.started, what="the grandchild to start")
    second = queue_second_run(any_env, "d", stamp)
    _, err = first.communicate(timeout=60)
    assert (first.returncode, err) == (0, "")  # the command's own code, and silent
    assert all(gone(pid) for pid in escapee.pid_list())
    assert_never_overlapped(escapee, second, stamp)
    row = [r for r in history(any_env, "d") if r["note"]][0]
    pid = escapee.pid_list()[0]
    assert row["status"] == "succeeded" and row["exit_code"] == 0
    assert "1 process started by the command outlived it or left its group" in row["note"]
    assert f"{pid} (" in row["note"] and "SIGTERM at " in row["note"] and "SIGKILL" not in row["note"]
    assert "all reaped before the release" in row["note"]


def test_the_issue_case_setsid_sleep(any_env):
    """The issue's own reproduction: the setsid'd sleep used to run on after an exit 0."""
    result = run_lockrun(any_env, "-n", "d", "-v", "--", "sh", "-c", "setsid sleep 30 & echo $!; sleep 0.5")
    assert result.returncode == 0
    assert gone(int(result.stdout.split()[0]))
    assert "the command left 1 process behind; SIGTERM sent" in result.stderr


def test_a_grandchild_that_ignores_sigterm_is_killed_after_kill_after(any_env, tmp_path):
    escapee = Escapee(tmp_path)
    started = time.monotonic()
    result = run_lockrun(any_env, "-n", "d", "--kill-after", "1", "--",
                         *escapee.command("setsid", ignore_term=True))
    took = time.monotonic() - started
    assert result.returncode == 0
    assert all(gone(pid) for pid in escapee.pid_list())
    assert took >= 1.0  # SIGTERM did nothing: the SIGKILL waited for --kill-after
    note = history(any_env, "d")[0]["note"]
    assert "SIGTERM at " in note and "SIGKILL at " in note


def test_grandchildren_that_fork_while_they_are_killed_are_all_gone(any_env, tmp_path):
    """A detached process that keeps forking detached children, all deaf to SIGTERM: the SIGKILL
    sweep loops until a walk of the tree finds nobody left."""
    pids = tmp_path / "pids"
    breeder = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "while True:\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os.setsid()\n"
        "        with open(sys.argv[1], 'a') as f: f.write(f'{os.getpid()}\\n')\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    time.sleep(0.002)\n"
    )
    script = (f'setsid {PY} -c "$B" {pids} &\n'
              f'while [ "$(wc -l < {pids} 2>/dev/null || echo 0)" -lt 20 ]; do sleep 0.01; done')
    result = run_lockrun(any_env, "-n", "d", "--kill-after", "0.3", "--", "env", f"B={breeder}", "sh", "-c", script)
    assert result.returncode == 0
    seen = [int(p) for p in pids.read_text().split()]
    assert len(seen) >= 20
    assert all(gone(pid) for pid in seen)


def test_the_exit_code_stays_the_commands(any_env, tmp_path):
    escapee = Escapee(tmp_path)
    result = run_lockrun(any_env, "-n", "d", "--", *escapee.command("double-fork", then="exit 3"))
    assert result.returncode == 3
    assert all(gone(pid) for pid in escapee.pid_list())
    assert history(any_env, "d")[0]["status"] == "failed"


def test_a_run_that_leaves_nothing_behind_has_no_note(any_env):
    result = run_lockrun(any_env, "-n", "d", "--", "sh", "-c", "sleep 0.01 & wait")
    assert result.returncode == 0
    assert history(any_env, "d")[0]["note"] is None


# --- lockrun stops the command --------------------------------------------------------------------


def test_timeout_stops_the_detached_grandchild_with_the_command(any_env, tmp_path):
    escapee, stamp = Escapee(tmp_path), tmp_path / "second"
    first = spawn_lockrun(any_env, "-n", "d", "--timeout", "1", "--", *escapee.command("setsid", then="sleep 30"))
    wait_until(escapee.started, what="the grandchild to start")
    second = queue_second_run(any_env, "d", stamp)
    assert first.wait(60) == 124
    assert all(gone(pid) for pid in escapee.pid_list())
    assert_never_overlapped(escapee, second, stamp)
    row = [r for r in history(any_env, "d") if r["status"] == "timeout"][0]
    assert "outlived it or left its group" in row["note"]


def test_timeout_kills_a_deaf_grandchild_after_kill_after(any_env, tmp_path):
    escapee = Escapee(tmp_path)
    started = time.monotonic()
    result = run_lockrun(any_env, "-n", "d", "--timeout", "0.5", "--kill-after", "1", "--",
                         *escapee.command("setsid", then="sleep 30", ignore_term=True))
    assert result.returncode == 124
    assert all(gone(pid) for pid in escapee.pid_list())
    assert time.monotonic() - started >= 1.5
    assert "SIGKILL at " in history(any_env, "d")[0]["note"]


def test_a_forwarded_sigterm_reaches_the_detached_grandchild_too(any_env, tmp_path):
    escapee, stamp = Escapee(tmp_path), tmp_path / "second"
    first = spawn_lockrun(any_env, "-n", "d", "--", *escapee.command("setsid", then="exec sleep 30"))
    wait_until(escapee.started, what="the grandchild to start")
    second = queue_second_run(any_env, "d", stamp)
    first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 128 + signal.SIGTERM
    assert all(gone(pid) for pid in escapee.pid_list())
    assert_never_overlapped(escapee, second, stamp)


@pytest.mark.slow
def test_a_lost_lease_stops_the_detached_grandchild_before_the_lease_can_expire(env, redis_server, tmp_path):
    escapee = Escapee(tmp_path)
    first = spawn_lockrun(env, "-n", "d", "--ttl", "2", "--kill-after", "30", "--",
                          *escapee.command("setsid", then="sleep 30", ignore_term=True), stderr=subprocess.PIPE)
    wait_until(escapee.started, what="the grandchild to start")
    redis_server.pause()
    paused_at = time.time()
    try:
        _, err = first.communicate(timeout=60)
    finally:
        redis_server.resume()
    assert first.returncode == 76, err
    assert all(gone(pid) for pid in escapee.pid_list())
    # --kill-after 30 is longer than the lease: the grandchild's SIGKILL came from the lease's deadline.
    assert escapee.last_tick() < paused_at + 2.0
    row = history(env, "d")[0]
    assert row["status"] == "lost" and "SIGKILL at " in row["note"]


def test_a_stolen_lock_stops_the_detached_grandchild(env, redis_server, tmp_path):
    escapee = Escapee(tmp_path)
    first = spawn_lockrun(env, "-n", "d", "--ttl", "3", "--", *escapee.command("double-fork", then="sleep 30"))
    wait_until(escapee.started, what="the grandchild to start")
    redis_server.client().set("lockrun:{d}:lock", "thief", px=60000)
    stolen_at = time.time()
    assert first.wait(60) == 76
    assert all(gone(pid) for pid in escapee.pid_list())
    assert escapee.last_tick() < stolen_at + 3.0


@pytest.mark.parametrize("on_lost", ["terminate", "continue"])
def test_replace_stops_the_holder_and_its_grandchild_first(any_env, tmp_path, on_lost):
    """A preemption always stops the command, --on-lost continue included: never two at once."""
    escapee, stamp = Escapee(tmp_path), tmp_path / "second"
    holder = spawn_lockrun(any_env, "-n", "r", "--ttl", "3", "--on-lost", on_lost, "--",
                           *escapee.command("setsid", then="sleep 30"), stderr=subprocess.PIPE)
    wait_until(escapee.started, what="the grandchild to start")
    replacer = run_lockrun(any_env, "-n", "r", "--replace", "--", *start_stamp(stamp))
    assert replacer.returncode == 0, replacer.stderr
    _, err = holder.communicate(timeout=60)
    assert holder.returncode == 76, err
    assert "asked to replace this one (--replace); stopping the command" in err
    assert "--on-lost continue" not in err
    assert all(gone(pid) for pid in escapee.pid_list())
    assert escapee.last_tick() < float(stamp.read_text())
    statuses = [r["status"] for r in history(any_env, "r")]
    assert statuses == ["succeeded", "preempted"]


def test_replace_against_on_lost_continue_never_overlaps_the_holders_command(any_env, tmp_path):
    """The issue's case, without any grandchild: the holder's own command used to go on."""
    ticks, stamp = tmp_path / "ticks", tmp_path / "second"
    ticker = [PY, "-c", TICKER, str(ticks), str(tmp_path / "pids")]
    holder = spawn_lockrun(any_env, "-n", "r", "--ttl", "2", "--on-lost", "continue", "--", *ticker)
    wait_until(lambda: ticks.exists() and ticks.read_text(), what="the holder's command to tick")
    replacer = run_lockrun(any_env, "-n", "r", "--replace", "--", *start_stamp(stamp))
    assert replacer.returncode == 0
    assert holder.wait(60) == 76
    assert float(ticks.read_text().split()[-1]) < float(stamp.read_text())
    assert history(any_env, "r")[1]["status"] == "preempted"


# --- --keep-detached -----------------------------------------------------------------------------


def test_keep_detached_lets_them_live_on(any_env, tmp_path):
    escapee = Escapee(tmp_path)
    # Not through pipes: the survivor would hold them open, and a reader would wait for it.
    result = subprocess.run(lockrun_argv("-n", "d", "--keep-detached", "--", *escapee.command("setsid")), env=any_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    try:
        assert result.returncode == 0
        pid = escapee.pid_list()[0]
        count = len(escapee.ticks.read_text().split())
        wait_until(lambda: len(escapee.ticks.read_text().split()) > count + 2, what="the grandchild to tick on")
        assert history(any_env, "d")[0]["note"] is None
    finally:
        for pid in escapee.pid_list():
            os.kill(pid, signal.SIGKILL)


def test_keep_detached_still_kills_the_commands_own_group(any_env, tmp_path):
    result = run_lockrun(any_env, "-n", "d", "--keep-detached", "--", "sh", "-c", "sleep 300 & echo $!")
    assert result.returncode == 0
    wait_until(lambda: not os.path.exists(f"/proc/{int(result.stdout)}") or
               Path(f"/proc/{int(result.stdout)}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
               timeout=5, what="the group member to die")


# --- lockrun as PID 1 ----------------------------------------------------------------------------

ORPHANS = (
    "import os, sys, time\n"
    "for _ in range(20):\n"
    "    if os.fork() == 0:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(0.05)\n"
    "            os._exit(0)\n"
    "        os._exit(0)\n"
    "    os.wait()\n"
    "time.sleep(1.0)\n"
    "states = [open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[0]\n"
    "          for p in os.listdir('/proc') if p.isdigit()]\n"
    "print(states.count('Z'), os.getppid())\n"
    "sys.exit(7)\n"
)


def in_pid_namespace(*args: str) -> list[str]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("the PID 1 tests need root and unshare(1) (util-linux)")
    return ["unshare", "--pid", "--fork", "--mount-proc", *lockrun_argv(*args)]


@pytest.mark.parametrize("keep_detached", [False, True])
def test_as_pid_1_every_orphan_is_reaped_while_the_command_runs(any_env, keep_detached):
    flags = ["--keep-detached"] if keep_detached else []
    result = subprocess.run(in_pid_namespace("-n", "pid1", *flags, "--", PY, "-c", ORPHANS), env=any_env,
                            capture_output=True, text=True, timeout=60)
    zombies, parent = result.stdout.split()
    assert parent == "1"  # lockrun is PID 1 of the namespace: the orphans were its own to reap
    assert zombies == "0", "orphans piled up as <defunct> under lockrun as PID 1"
    assert result.returncode == 7  # the command's own exit status, never an orphan's
    row = history(any_env, "pid1")[0]
    assert (row["status"], row["exit_code"]) == ("failed", 7)


def test_as_pid_1_the_commands_status_survives_orphans_dying_with_it(any_env):
    """Orphans exit at the moment the command does: lockrun still reports the command's code."""
    script = "for i in 1 2 3 4 5 6 7 8; do (sleep 0.2 &); done; sleep 0.2; exit 5"
    for _ in range(3):
        result = subprocess.run(in_pid_namespace("-n", "pid1", "--", "sh", "-c", script), env=any_env,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 5, result.stderr


def test_as_pid_1_detached_processes_are_stopped_before_the_release(any_env, tmp_path):
    escapee = Escapee(tmp_path)
    result = subprocess.run(in_pid_namespace("-n", "pid1", "--", *escapee.command("setsid")), env=any_env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "outlived it or left its group" in history(any_env, "pid1")[0]["note"]


# --- the cgroup: lockrun SIGKILLed --------------------------------------------------------------


def cgroup_available() -> bool:
    cgroup = RunCgroup.create()
    if cgroup is None:
        return False
    cgroup.remove()
    return True


def read_only_cgroups(argv: list[str]) -> list[str]:
    """``argv`` in a mount namespace where every cgroup2 mount is read-only: no cgroup to be had."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if " - cgroup2 " in line]
    remount = " && ".join(f"mount -o remount,bind,ro {m}" for m in mounts) or "true"
    return ["unshare", "--mount", "sh", "-c", f'{remount} && exec "$@"', "sh", *argv]


def cgroup_of(pid: int) -> str:
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:]
    except OSError:
        pass
    return ""


def cgroup_dirs(path: str) -> list[Path]:
    """Where the cgroup v2 ``path`` (as /proc/PID/cgroup names it) is, under every cgroup2 mount."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if " - cgroup2 " in line]
    return [Path(m + path) for m in mounts]


def test_a_sigkilled_lockrun_takes_the_detached_grandchild_with_it(any_env, tmp_path):
    if not cgroup_available():
        pytest.fail("this test needs a writable cgroup v2 (root, or a delegated subtree), as CI has")
    escapee = Escapee(tmp_path)
    proc = spawn_lockrun(any_env, "-n", "k", "--", *escapee.command("setsid", then="sleep 30"))
    wait_until(escapee.started, what="the grandchild to start")
    pid = escapee.pid_list()[0]
    # The move into the run's cgroup happens beside the run (cgroup.py): wait until it is in.
    wait_until(lambda: "/lockrun-" in cgroup_of(pid), what="the grandchild to be in the run's cgroup")
    cgroup_dir = [d for d in cgroup_dirs(cgroup_of(pid)) if d.exists()]
    assert cgroup_dir
    proc.kill()
    proc.wait(30)
    wait_until(lambda: not os.path.exists(f"/proc/{pid}") or
               Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
               timeout=10, what="the watchdog to kill the run's cgroup")
    wait_until(lambda: not any(d.exists() for d in cgroup_dir), timeout=10, what="the watchdog to remove it")


def test_without_a_cgroup_lockrun_runs_all_the_same(any_env, tmp_path):
    """A read-only /sys/fs/cgroup (most containers): silently no cgroup; the subreaper still
    stops the grandchild. A SIGKILLed lockrun then leaves it behind: README "Known limits"."""
    escapee = Escapee(tmp_path)
    result = subprocess.run(read_only_cgroups(lockrun_argv("-n", "ro", "--", *escapee.command("setsid"))),
                            env=any_env, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (0, "")
    assert all(gone(pid) for pid in escapee.pid_list())
    late = Escapee(tmp_path, "late")
    proc = subprocess.Popen(read_only_cgroups(lockrun_argv("-n", "ro", "--", *late.command("setsid", then="sleep 30"))),
                            env=any_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(late.started, what="the grandchild to start")
        pid = late.pid_list()[0]
        assert "/lockrun-" not in cgroup_of(pid)
        os.kill(proc.pid, signal.SIGKILL)  # unshare exec'd sh, which exec'd lockrun: this is lockrun
        proc.wait(30)
        count = len(late.ticks.read_text().split())
        wait_until(lambda: len(late.ticks.read_text().split()) > count + 2, what="the survivor to tick on")
    finally:
        for pid in late.pid_list():
            os.kill(pid, signal.SIGKILL)


def test_the_runs_cgroup_is_removed_after_the_run(any_env, tmp_path):
    if not cgroup_available():
        pytest.fail("this test needs a writable cgroup v2 (root, or a delegated subtree), as CI has")
    seen = tmp_path / "cgroup"
    result = run_lockrun(any_env, "-n", "c", "--", "sh", "-c", f"sleep 0.2; cat /proc/self/cgroup > {seen}")
    assert result.returncode == 0
    path = [line[3:] for line in seen.read_text().splitlines() if line.startswith("0::")][0]
    assert "/lockrun-" in path  # the command ran in a cgroup of its own
    assert cgroup_dirs(path) and not any(d.exists() for d in cgroup_dirs(path))



def children_of(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def run_cgroup_of_child(lockrun_pid: int, command: str) -> Path | None:
    """The run's cgroup directory of lockrun ``lockrun_pid``'s child running ``command``, once it is in one."""
    for child in children_of(lockrun_pid):
        try:
            if Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0] != command.encode():
                continue
        except OSError:
            continue
        if "/lockrun-" in cgroup_of(child):
            return next((d for d in cgroup_dirs(cgroup_of(child)) if d.exists()), None)
    return None


def test_a_later_run_sweeps_the_empty_cgroups_dead_lockruns_left(any_env, tmp_path):
    """lockrun as PID 1 of a PID namespace, SIGKILLed: the kernel kills its watchdog with it, and
    its emptied cgroup stays. The next run that makes a cgroup removes it (cgroup.sweep), and leaves
    a live lockrun's cgroup and one that still has a process alone."""
    from lockrun.run import cgroup as cgroups

    if not cgroup_available():
        pytest.fail("this test needs a writable cgroup v2 (root, or a delegated subtree), as CI has")
    if shutil.which("unshare") is None:
        pytest.fail("this test needs unshare (util-linux)")
    container = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", *lockrun_argv("-n", "pid1", "--",
                                  "sleep", "60")], env=any_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
    live = spawn_lockrun(any_env, "-n", "alive", "--", "sleep", "60")
    stray = None
    try:
        wait_until(lambda: children_of(container.pid), what="unshare to fork")
        (pid1,) = children_of(container.pid)  # lockrun, PID 1 of the namespace
        wait_until(lambda: run_cgroup_of_child(pid1, "sleep"), what="the PID 1 lockrun's cgroup")
        dead = run_cgroup_of_child(pid1, "sleep")
        wait_until(lambda: run_cgroup_of_child(live.pid, "sleep"), what="the live lockrun's cgroup")
        alive = run_cgroup_of_child(live.pid, "sleep")
        assert dead is not None and alive is not None and dead.name.startswith("lockrun-1-")
        # A lockrun-* cgroup nobody holds that still has a process in it: never removed.
        populated = dead.parent / f"lockrun-999999-{os.urandom(4).hex()}"
        populated.mkdir()
        stray = subprocess.Popen(["sleep", "60"])
        (populated / "cgroup.procs").write_text(str(stray.pid))
        os.kill(pid1, signal.SIGKILL)
        container.wait(30)
        wait_until(lambda: "populated 0" in (dead / "cgroup.events").read_text(), what="the dead run's cgroup to empty")
        time.sleep(0.5)
        assert dead.exists()  # the leftover: nobody is there to remove it
        time.sleep(max(0.0, dead.stat().st_ctime + cgroups.SWEEP_AFTER + 0.2 - time.time()))
        second = run_lockrun(any_env, "-n", "second", "--", "sleep", "1")
        assert (second.returncode, second.stderr) == (0, "")
        assert not dead.exists()
        assert alive.exists() and live.poll() is None and run_cgroup_of_child(live.pid, "sleep") == alive
        assert populated.exists() and stray.poll() is None
    finally:
        for proc in (container, live, stray):
            if proc is not None and proc.poll() is None:
                proc.terminate() if proc is live else proc.kill()
                proc.wait(30)
        if stray is not None:
            wait_until(lambda: "populated 0" in (populated / "cgroup.events").read_text(), what="the stray to go")
            populated.rmdir()


# --- what the kernel may refuse ------------------------------------------------------------------


def injected(code: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    """lockrun in a real process whose Python first runs ``code`` (a refusal the kernel rarely gives)."""
    argv = [PY, "-c", f"{code}\nfrom lockrun.cli.main import main\nmain()", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


NO_SUBREAPER = """
import ctypes, lockrun.run.supervisor as supervisor
_load = supervisor.load_prctl
def load():
    prctl = _load()
    def refusing(option, *args):
        if option == supervisor.PR_SET_CHILD_SUBREAPER:
            ctypes.set_errno(22)
            return -1
        return prctl(option, *args)
    return refusing
supervisor.load_prctl = load
"""

NO_CGROUP_THREAD = """
import threading
_start = threading.Thread.start
def start(self):
    if self.name == "lockrun-cgroup":
        raise RuntimeError("can't start new thread")
    return _start(self)
threading.Thread.start = start
"""


def test_a_refused_subreaper_still_kills_the_group_and_says_what_it_could_not(any_env, tmp_path):
    escapee = Escapee(tmp_path)
    script = escapee.command("setsid", then="sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
    out = tmp_path / "out"
    with out.open("w") as stdout:  # not a pipe: the survivor would hold it open, and a reader would wait for it
        proc = subprocess.run([PY, "-c", f"{NO_SUBREAPER}\nfrom lockrun.cli.main import main\nmain()", "-n", "s", "--",
                               *script], env=any_env, stdout=stdout, stderr=subprocess.DEVNULL, timeout=60)
    try:
        assert proc.returncode == 0
        group_member = int(out.read_text().split()[-1])
        wait_until(lambda: not os.path.exists(f"/proc/{group_member}") or
                   Path(f"/proc/{group_member}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
                   timeout=5, what="the group member to die")
        note = history(any_env, "s")[0]["note"]
        assert note == "only the command's process group was stopped: PR_SET_CHILD_SUBREAPER was refused"
    finally:
        for pid in escapee.pid_list():
            os.kill(pid, signal.SIGKILL)


def test_no_thread_to_move_the_command_into_its_cgroup_is_no_cgroup(any_env, tmp_path):
    escapee = Escapee(tmp_path)
    result = injected(NO_CGROUP_THREAD, any_env, "-n", "t", "--", *escapee.command("setsid"))
    assert (result.returncode, result.stderr) == (0, "")
    assert all(gone(pid) for pid in escapee.pid_list())
    assert "outlived it or left its group" in history(any_env, "t")[0]["note"]
