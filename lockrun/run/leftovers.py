"""What the command leaves behind, or what leaves its process group: found, stopped and reaped
before the lock is released (docs/guarantees.md "What the command starts").

lockrun is a child subreaper, so a process the command started and left (``setsid``, a double
fork, ``nohup ... &``) is re-parented to lockrun and stays within reach (strays.py); where lockrun
may, the command also gets a cgroup of its own once it has run for ADOPT_AFTER (cgroup.py), which
covers a SIGKILLed lockrun too. Orphans re-parented to lockrun (also as PID 1 of a container) are
reaped as they exit, never the command itself: its exit status is the run's. The supervisor owns
the kill schedule; this owns what the schedule applies to besides the command's group.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from lockrun.core.secret_names import BUILT_IN, Masking
from lockrun.run import descendants

if TYPE_CHECKING:  # imported when first needed: most runs leave nothing behind and end within ADOPT_AFTER
    from lockrun.run.cgroup import Adopter, RunCgroup
    from lockrun.run.strays import Strays
    from lockrun.run.watchdog import Watchdog

#: How long a command runs before it gets a cgroup of its own (cgroup.py): one that ends sooner
#: (most of a busy crontab's) never pays for the cgroup or the grace period a move waits for.
ADOPT_AFTER = 0.01


class Leftovers:
    """The command's descendants outside its group, and lockrun's orphans, for one run."""

    def __init__(self, watchdog: Watchdog, clock: Callable[[], float], masking: Masking = BUILT_IN) -> None:
        self._masking = masking  # how the note shows their command lines (core/masking.py)
        self._watchdog = watchdog  # lockrun's child, not the command's: never a stray
        self._clock = clock
        # Whether lockrun sees what leaves the command's group: not under --keep-detached, without a
        # subreaper or with a /proc of another PID namespace; then only the group is killed.
        self.tracks = False
        self.untracked: str | None = None  # why what leaves the command's group is out of reach, if it is
        self.reaps_orphans = False  # lockrun's children other than the command are reaped as they exit
        self.adopt_at: float | None = None  # when the command gets its cgroup (the main loop starts it)
        self._strays: Strays | None = None  # what the command left behind or that left its group, once there is any
        self._adopter: Adopter | None = None  # the run's cgroup, made and filled beside the run

    def skip(self) -> tuple[int | None, ...]:
        return (self._watchdog.pid,)

    def cgroup(self) -> RunCgroup | None:
        return self._adopter.cgroup if self._adopter is not None else None

    def strays(self) -> Strays:
        if self._strays is None:
            from lockrun.run.strays import Strays

            self._strays = Strays(os.getpid(), skip=self.skip, cgroup=self.cgroup, masking=self._masking)
        return self._strays

    def command_launched(self) -> None:
        if self.tracks:
            self.adopt_at = self._clock() + ADOPT_AFTER

    def adopt_if_due(self, command_pid: int | None, command_reaped: bool) -> None:
        """Give the command a cgroup of its own once it has run for ADOPT_AFTER, in a thread."""
        if self.adopt_at is None or self._clock() < self.adopt_at:
            return
        self.adopt_at = None
        if command_pid is None or command_reaped:
            return
        from lockrun.run.cgroup import Adopter

        self._adopter = Adopter(os.getpid(), command_pid, skip=self.skip, on_created=self._watchdog.arm_cgroup)
        self._adopter.start()

    def stop_adopting(self) -> None:
        """The command is being reaped: once it is, its pid may be reused, so no more moves."""
        if self._adopter is not None:
            self._adopter.stop()

    def remove_cgroup(self) -> None:
        if self._adopter is not None:
            self._adopter.close()

    def terminate(self, outside_pgid: int | None) -> None:
        """SIGTERM the descendants that have not had it: those outside ``outside_pgid`` (the
        command's group, which gets its own signal), or all of them when it is None."""
        if self.tracks:
            self.strays().terminate(outside_pgid=outside_pgid)

    def kill(self) -> None:
        if self.tracks:
            self.strays().kill()

    def reap_orphans(self, command_pid: int | None, command_reaped: bool) -> None:
        """Reap lockrun's children that have exited, except the command: orphans re-parented to
        lockrun, the subreaper or PID 1, would otherwise pile up as zombies while it runs."""
        if not self.reaps_orphans:
            return
        while (pid := _exited_child(command_pid, command_reaped)) is not None:
            if pid == self._watchdog.pid:
                self._watchdog.reap()  # somebody killed it: reaped through its Popen
                continue
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def after_command(self, killed: bool) -> int:
        """The command was reaped: SIGTERM (or, past the kill, SIGKILL) whatever it left behind,
        in its group or not. Returns how many processes are left to wait for."""
        if self._strays is not None:
            left = self._strays.alive()
        else:  # the usual case, nothing was ever found: one walk, and nothing more to import
            left = [p for p in descendants.snapshot(os.getpid(), self.skip()) if p.state != "Z"]
        if left:
            strays = self.strays()
            strays.record(left)
            if killed:
                strays.kill()
            else:
                self.terminate(outside_pgid=None)
        return len(left)

    def gone(self, killed: bool, command_pid: int | None, command_reaped: bool) -> bool:
        """True once nothing the command started is left (lockrun's own zombies reaped first)."""
        if not self.tracks:
            return True
        self.reap_orphans(command_pid, command_reaped)
        if self._strays is None:
            cgroup = self.cgroup()
            return descendants.none_left(os.getpid(), self.skip()) and (cgroup is None or not cgroup.populated())
        if killed:
            self._strays.kill()  # anything forked while the last sweep went out
        return self._strays.gone()

    def note(self, launched: bool) -> str | None:
        """The ledger note about what the command left behind, if it left anything (or why lockrun
        could not look: then only the command's process group was stopped)."""
        if self._strays is not None:
            return self._strays.note()
        if self.untracked and launched:
            return f"only the command's process group was stopped: {self.untracked}"
        return None


def _exited_child(command_pid: int | None, command_reaped: bool) -> int | None:
    """A child of lockrun's that has exited and is not reaped yet, but the command (left for its
    own reaping, whatever else is waiting behind it); None: none."""
    try:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None or info.si_pid == 0:
        return None
    if info.si_pid == command_pid and not command_reaped:
        return None
    return info.si_pid
