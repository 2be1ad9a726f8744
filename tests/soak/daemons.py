"""The fault soak's daemonizing commands: nothing a command started outlives its lease.

A share of the soak's commands (``Soak.DAEMON_SHARE``) leave a daemon behind as soon as they
start: a double fork and a session of its own (``setsid``), out of the command's process group,
re-parented to lockrun when its parent exits. It writes a wall-clock tick to
``RUN_ID.daemon`` every 20 ms until it dies; lockrun must have stopped and reaped it before the
lease ends:

* a run that released its lock: the daemon's last tick comes before the release, as the server's
  MONITOR stream dates it (lockrun reaps every descendant before it releases);
* a lease that ended otherwise (expired, stolen, the server died): before the lease's deadline,
  as for the command itself (invariant 2);
* a lockrun that was SIGKILLed (by the injector, or by its own backstop timer when it was
  SIGSTOPped): no lockrun is left to stop it, so the watchdog kills the run's cgroup, and the
  daemon must be gone within ``PROMPT`` of the deadline or the kill. Without a writable cgroup v2
  nothing can (README "Known limits"): those daemons are counted, not held against the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lockrun.run.cgroup import RunCgroup

if TYPE_CHECKING:
    from tests.soak.harness import Soak
    from tests.soak.oracle import ServerLease

#: Inserted into the soak's command right after it logs its start ("daemon" is its third argument).
DAEMONIZE = r"""
if sys.argv[3:] == ["daemon"] and os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(os.path.join(logdir, run_id + ".daemon"), "a", buffering=1) as ticks:
            while True:
                ticks.write(f"{time.time()!r}\n")
                time.sleep(0.02)
    os._exit(0)
"""


def cgroups_available() -> bool:
    """Whether lockrun gets a cgroup of its run's own here (as it would: the same probe)."""
    cgroup = RunCgroup.create()
    if cgroup is None:
        return False
    cgroup.remove()
    return True


def daemon_last_ticks(logdir: Path) -> dict[str, float]:
    """run id -> the last tick its daemon wrote."""
    found = {}
    for path in logdir.glob("*.daemon"):
        ticks = [float(line) for line in path.read_text().split()]
        if ticks:
            found[path.stem] = ticks[-1]
    return found


def check_daemons(soak: Soak, leases: dict[str, ServerLease], prompt: float) -> list[str]:
    """Invariant 8: every daemon died before its run's lease ended (see the module's docstring)."""
    problems = []
    with_cgroups = cgroups_available()
    killed = {inv.pid: inv for inv in soak.invocations if inv.rc == -9}
    owners = {cmd.run_id: cmd for cmd in soak.command_logs()}
    for run_id, last in sorted(daemon_last_ticks(soak.logdir).items()):
        lease, cmd = leases.get(run_id), owners.get(run_id)
        if lease is None or cmd is None:
            continue  # no lease, no command: invariant 2 says so already
        soak.daemons_checked += 1
        inv = killed.get(cmd.ppid)
        if inv is not None and inv.started - 0.01 <= cmd.started <= (inv.ended or float("inf")):
            if not with_cgroups:
                soak.excused_daemons += 1
                continue
            limit, why = min(inv.killed_at or lease.deadline, lease.deadline) + prompt, "its lockrun was SIGKILLed"
        elif lease.end == "released" and lease.ended_at is not None:
            limit, why = lease.ended_at, "its run released the lock"
        else:
            limit, why = lease.deadline, f"its lease's deadline (lease end: {lease.end})"
        if last > limit:
            problems.append(f"run {run_id} ({cmd.name}): its daemon was still running {last - limit:.3f}s after {why}")
    return problems
