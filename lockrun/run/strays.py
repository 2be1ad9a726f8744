"""The processes a command started that are not the command: stopped on its kill schedule, and
gone before the lock is released.

lockrun is a child subreaper (supervisor.py): whatever the command starts stays in lockrun's
process tree, however it detaches (``setsid``, ``setpgid``, a double fork, ``nohup ... &``), so
walking the tree finds it (descendants.py). Whenever lockrun stops the command (``--timeout``, a
lost lease, ``--replace``, a forwarded signal) the processes that left its process group get
SIGTERM at the moment the group does, and SIGKILL at the moment the group does; when the command
has exited, whatever it left behind, in its group or not, gets SIGTERM then, and SIGKILL at the
kill schedule's moment (the main loop, watch.py, says when). Each one is signalled by pidfd,
after checking it is still the process seen (descendants.send).

What it found is kept for the run's ledger note: how many, which pids and commands, and when
SIGTERM and SIGKILL went out.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable

from lockrun.core.clock import utc_now_iso
from lockrun.core.secret_names import BUILT_IN, Masking
from lockrun.run import descendants
from lockrun.run.cgroup import RunCgroup
from lockrun.run.descendants import Proc

#: How many of the processes found a ledger note names one by one.
NOTE_NAMES = 5
#: A bound on one SIGKILL sweep's rounds (each round kills every process seen alive): a fork bomb
#: could otherwise keep one sweep busy for ever. The main loop sweeps again at its next wake-up.
KILL_ROUNDS = 1000


class Strays:
    def __init__(self, root: int, skip: Callable[[], Iterable[int | None]],
                 cgroup: Callable[[], RunCgroup | None] = lambda: None, masking: Masking = BUILT_IN) -> None:
        self._masking = masking  # the note shows their command lines as the run's own is recorded
        self.root = root  # lockrun itself: the subreaper whose tree holds them all
        self._skip = skip  # lockrun's own children that are not the command's (the watchdog)
        self._cgroup = cgroup  # the run's cgroup, once it has one (cgroup.Adopter)
        self.found: dict[tuple[int, int], str] = {}  # (pid, start) -> command line, in the order found
        self._termed: set[tuple[int, int]] = set()
        self._killed: set[tuple[int, int]] = set()
        self.term_sent_at: str | None = None  # wall-clock times for the note
        self.kill_sent_at: str | None = None

    def snapshot(self) -> list[Proc]:
        return descendants.snapshot(self.root, self._skip())

    def alive(self, outside_pgid: int | None = None) -> list[Proc]:
        """The descendants that still run (not zombies), only those outside ``outside_pgid`` if given."""
        return [p for p in self.snapshot() if p.state != "Z" and (outside_pgid is None or p.pgid != outside_pgid)]

    def _note(self, proc: Proc) -> None:
        key = (proc.pid, proc.start)
        if key not in self.found:  # (only the ones the note names are worth reading /proc for)
            named = len(self.found) < NOTE_NAMES
            self.found[key] = descendants.command_line(proc.pid, masking=self._masking) if named else ""

    def terminate(self, outside_pgid: int | None = None) -> int:
        """SIGTERM (then SIGCONT, so that a stopped one sees it) every live descendant that has not
        had it yet, only those outside the process group ``outside_pgid`` if given (the group gets
        its own). Returns how many were signalled."""
        sent = 0
        for proc in self.alive(outside_pgid):
            key = (proc.pid, proc.start)
            if key in self._termed:
                continue
            self._note(proc)
            if descendants.send(proc, signal.SIGTERM):
                descendants.send(proc, signal.SIGCONT)
                self._termed.add(key)
                sent += 1
        if sent and self.term_sent_at is None:
            self.term_sent_at = utc_now_iso()
        return sent

    def kill(self) -> int:
        """SIGKILL every live descendant, again and again until a walk finds none that was not sent
        it (a process may fork while the others die). Returns how many were signalled."""
        alive = self.alive()
        if not alive:
            return 0
        if self.kill_sent_at is None:
            self.kill_sent_at = utc_now_iso()
        cgroup = self._cgroup()
        if cgroup is not None:
            cgroup.kill()  # all at once, forks in flight included; the walk below gets the rest
        return self._kill_rounds(alive)

    def _kill_rounds(self, alive: list[Proc]) -> int:
        """SIGKILL each of ``alive`` not sent it yet, then walk again: how many were signalled."""
        sent = 0
        for _ in range(KILL_ROUNDS):
            fresh = [p for p in alive if (p.pid, p.start) not in self._killed]
            if not fresh:
                break
            for proc in fresh:
                self._note(proc)
                if descendants.send(proc, signal.SIGKILL):
                    sent += 1
                self._killed.add((proc.pid, proc.start))
            alive = self.alive()
        return sent

    def record(self, procs: Iterable[Proc]) -> None:
        """Remember ``procs`` for the note (the ones left behind when the command exited)."""
        for proc in procs:
            if proc.state != "Z":
                self._note(proc)

    def gone(self) -> bool:
        """True once no descendant is left, zombies included (lockrun's own are reaped by the caller)."""
        if not descendants.none_left(self.root, self._skip()):
            return False
        cgroup = self._cgroup()
        return cgroup is None or not cgroup.populated()

    def note(self) -> str | None:
        """What the ledger row says about them, or None when the command left nothing behind."""
        if not self.found:
            return None
        count = len(self.found)
        what = f"{count} process{'es' if count != 1 else ''} started by the command outlived it or left its group"
        return f"{what}: {self._listed()}; {self._stopped()}; all reaped before the release"

    def _listed(self) -> str:
        """The first NOTE_NAMES of them, each its pid and command line, and how many more."""
        names = [f"{pid} ({cmd})" if cmd else str(pid) for (pid, _), cmd in list(self.found.items())[:NOTE_NAMES]]
        more = len(self.found) - len(names)
        return ", ".join(names) + (f" and {more} more" if more > 0 else "")

    def _stopped(self) -> str:
        """When they were sent SIGTERM and SIGKILL, if they were."""
        when = []
        if self.term_sent_at:
            when.append(f"SIGTERM at {self.term_sent_at}")
        if self.kill_sent_at:
            when.append(f"SIGKILL at {self.kill_sent_at}")
        return "; ".join(when) if when else "gone by themselves"
