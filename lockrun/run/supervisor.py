"""The supervisor: spawn the command in its own process group and keep it on a leash.

- The command gets its own process group, so every signal reaches the whole job
  (a ``sh -c`` wrapper and what it started), not only the direct child.
- ``PR_SET_PDEATHSIG(SIGKILL)`` kills the direct child the moment lockrun dies,
  even by SIGKILL. The death signal follows the *thread* that forked, so the
  command is spawned from the main thread, before the keeper thread exists (and a
  fork with other threads running is unsafe besides).
- The launcher (launcher.py) is forked ahead of time (:meth:`Supervisor.prepare`, while a
  waiter waits): a hand-over then costs the acquire round trip and an exec, not a fork.
- A watchdog (watchdog.py) kills the command's whole group if lockrun dies: that
  covers grandchildren too.
- The signal relay (signals.py) forwards SIGTERM, SIGINT and SIGHUP sent to lockrun
  to the group, and wakes the main loop through one self-pipe.
- With ``--capture-tail`` the output goes through pipes and a pump (capture.py).
- What the command leaves behind, or what leaves its group, is found, stopped and reaped
  before the release (leftovers.py): lockrun is a child subreaper, and where it may the
  command gets a cgroup of its own.
- Stopping: SIGTERM, then SIGKILL at a deadline that can only come closer, for the group and
  for every descendant that left it; when the command exits, whatever it left behind gets the
  same schedule (the main loop, watch.py, runs it) and is reaped before the lock is released.
- ``--keep-detached`` turns the subreaper and the cgroup off: what leaves the command's
  group lives on, and only the group is killed when the command exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, NamedTuple, NoReturn

from lockrun.core.errors import ExitCode
from lockrun.core.masking import mask_command
from lockrun.core.secret_names import BUILT_IN, Masking
from lockrun.run import descendants
from lockrun.run.launcher import launch, load_prctl, read_all, spawn_error, write_all
from lockrun.run.leftovers import Leftovers
from lockrun.run.signals import SignalRelay, signal_group
from lockrun.run.watchdog import Watchdog

if TYPE_CHECKING:  # imported when first needed: only runs whose output goes through a pump use them
    from lockrun.run.capture import OutputSpool, OutputTail, Pump

PR_SET_CHILD_SUBREAPER = 36
#: How long finish() waits between SIGKILL sweeps for what is left to die (it waits until it has).
FINAL_SWEEP_S = 0.01


class ChildExit(NamedTuple):
    returncode: int | None  # the command's exit code, None when a signal ended it
    signal: int | None

    @property
    def shell_code(self) -> int:
        """The code a shell would report: the exit code, or 128+N for signal N."""
        if self.signal is not None:
            return ExitCode.SIGNAL_BASE + self.signal
        return self.returncode or 0


def _foreground_tty() -> int | None:
    """stdin's terminal if lockrun runs in its foreground group, else None."""
    try:
        if os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp():
            return 0
    except OSError:
        pass
    return None


def _send_environment(ctl_w: int, extra_env: dict[str, str] | None) -> None:
    """What the launcher adds to the environment it execs with; the pipe closed."""
    message = json.dumps(extra_env or {}).encode()
    with contextlib.suppress(OSError):  # the launcher died: the error pipe below says so
        write_all(ctl_w, message)
    os.close(ctl_w)


def _give_the_terminal(tty_candidate: int | None, pgid: int) -> int | None:
    """The terminal the command's group now has in its foreground, if lockrun had it."""
    if tty_candidate is not None:
        try:
            os.tcsetpgrp(tty_candidate, pgid)
            return tty_candidate
        except OSError:
            pass
    return None


class Supervisor:
    def __init__(
        self, argv: list[str], env: dict[str, str], capture_tail: int | None = None,
        clock: Callable[[], float] = time.monotonic, keep_detached: bool = False,
        signals: SignalRelay | None = None, spool: OutputSpool | None = None, masking: Masking = BUILT_IN,
    ) -> None:
        self.argv = argv
        self.masking = masking  # how messages and notes show a command line (core/masking.py)
        self.keep_detached = keep_detached  # what leaves the command's group is left alone
        self._clock = clock  # the monotonic clock of the kill schedule; a parameter for the unit tests
        self.env = env
        # A --retry attempt after the first shares the run's relay, which the first one closes.
        self.signals = signals or SignalRelay()
        self._owns_signals = signals is None
        self.watchdog = Watchdog()
        self.tail: OutputTail | None = None
        self.spool = spool  # --output on-failure: the pump keeps the output there (capture.py)
        if capture_tail:
            from lockrun.run.capture import OutputTail  # only runs whose output is piped pay for it

            self.tail = OutputTail(capture_tail)
        self._output_routes: list[tuple[int, int]] | None = None  # (pipe read end, lockrun's fd)
        self._pump: Pump | None = None
        self.pid: int | None = None  # the command's process (forked by prepare, exec'd by spawn)
        self.pgid: int | None = None
        self.launched = False
        self._ctl_w: int | None = None
        self._err_r: int | None = None
        self._tty_candidate: int | None = None
        self._program: str | None = None
        self.kill_at: float | None = None  # when SIGKILL follows the SIGTERM already sent
        self.terminated = False
        self.killed = False
        self._prctl: Callable[..., int] | Literal[False] | None = None  # libc's prctl once loaded; False: none
        self._tty_fd: int | None = None
        self._subreaper = False
        self.leftovers = Leftovers(self.watchdog, clock, masking)  # what leaves the command's group, and orphans
        self._command_exit: ChildExit | None = None  # the command's exit, once it is reaped
        #: When finish() stops waiting for a destination to take the output (monotonic): the end of
        #: --timeout and its grace, when the command would have been killed. None: no bound.
        self.output_until: float | None = None
        #: True once the wait for a slow reader must end before that: a --replace, a lost lease.
        self.output_abandoned: Callable[[], bool] = lambda: False

    # -- spawning ---------------------------------------------------------------------

    def prepare(self) -> None:
        """Fork the command's process and start the watchdog ahead of the exec; idempotent.

        The launcher is a fork of lockrun, already in its own process group with
        the death signal armed, blocked on a pipe until :meth:`spawn` sends it the
        environment to exec with. Waiters prepare while they wait, so a hand-over
        costs the acquire round trip and an exec, not a fork. Must run in the main
        thread before any other thread starts (the death signal follows the forking
        thread, and a fork with threads running is unsafe).
        """
        if self.pid is not None:
            return
        self._become_subreaper()
        self.watchdog.start()
        pid = self._fork_launcher()
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also from this side: the group exists before we signal it
        self.pid = self.pgid = pid
        self.signals.forward_to(pid)
        self.watchdog.arm(pid)
        self._track_descendants()

    def _become_subreaper(self) -> None:
        if self._prctl is None:
            self._prctl = load_prctl() or False
        if self._prctl and not self.keep_detached:
            # Before the fork: orphans of the command come back to lockrun, not to init.
            self._subreaper = self._prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            if not self._subreaper:
                self.leftovers.untracked = "PR_SET_CHILD_SUBREAPER was refused"
        self.leftovers.reaps_orphans = self._subreaper or os.getpid() == 1  # as PID 1, every orphan is ours

    def _fork_launcher(self) -> int:
        """The launcher's pid: a fork blocked on its control pipe until :meth:`spawn` writes to it."""
        prctl = self._prctl or None
        parent = os.getpid()
        tty_fd = _foreground_tty()
        # Resolved now, so the exec is one execve and not a walk along PATH.
        self._program = shutil.which(self.argv[0], path=self.env.get("PATH", os.defpath))
        ctl_r, ctl_w = os.pipe()
        err_r, err_w = os.pipe()
        output_fds = self._output_pipes()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the launcher process; it never returns
            launch(self.argv, self._program, self.env, ctl_r, err_w, prctl, parent, tty_fd, output_fds)
        os.close(ctl_r)
        os.close(err_w)
        for fd in {fd for fd in output_fds or () if fd is not None}:
            os.close(fd)
        self._ctl_w, self._err_r, self._tty_candidate = ctl_w, err_r, tty_fd
        return pid

    def _output_pipes(self) -> tuple[int | None, int | None] | None:
        """With a tail to keep, the pipes the command writes its output to (the launcher's ends)."""
        if self.tail is None:
            return None
        from lockrun.run.capture import output_pipes

        self._output_routes, output_fds = output_pipes()
        return output_fds

    def _track_descendants(self) -> None:
        if self._subreaper and descendants.proc_usable():
            self.leftovers.tracks = True
        elif self._subreaper:
            self.leftovers.untracked = ("/proc shows another PID namespace than lockrun's"
                                        " (unshare --pid without --mount-proc?)")

    def spawn(self, extra_env: dict[str, str] | None = None) -> int:
        """Exec the command in the prepared process, its environment being ``env`` plus
        ``extra_env`` (what is only known once the lock is held); raise CommandNotRunnable
        if it cannot be executed."""
        self.prepare()
        assert self.pid is not None and self.pgid is not None and self._ctl_w is not None and self._err_r is not None
        _send_environment(self._ctl_w, extra_env)
        self._ctl_w = None
        self._tty_fd = _give_the_terminal(self._tty_candidate, self.pgid)
        report = read_all(self._err_r)  # EOF at a successful exec (the pipe is close-on-exec)
        os.close(self._err_r)
        self._err_r = None
        if report:
            self._launch_failed(report)
        self.launched = True
        self.leftovers.command_launched()
        self._start_pump()
        # A signal that arrived before the command existed is forwarded now.
        for signum in self.signals.received:
            signal_group(self.pgid, signum)
        return self.pid

    def _launch_failed(self, report: bytes) -> NoReturn:
        self._reap_unlaunched()
        self.watchdog.disarm()
        code = int(report.split(b":")[0] or 0)
        program = mask_command(self.argv[:1], self.masking)[0]  # named as the run records it
        raise spawn_error(program, OSError(code, os.strerror(code)) if code else OSError("launcher failed"))

    def _start_pump(self) -> None:
        if self._output_routes is not None and self.tail is not None:
            from lockrun.run.capture import Pump

            self._pump = Pump(self._output_routes, self.tail, self.spool)
            self._output_routes = None  # the pump owns (and closes) the read ends now

    def _reap_unlaunched(self) -> None:
        """Let a prepared launcher go without running anything (busy, interrupted, failed)."""
        if self.pid is None or self.launched:
            return
        for fd in (self._ctl_w, self._err_r, *(source for source, _ in self._output_routes or ())):
            if fd is not None:
                os.close(fd)
        self._ctl_w = self._err_r = self._output_routes = None
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self.pid = self.pgid = None
        self.leftovers.tracks = False
        self.signals.forward_to(None)
        self.leftovers.remove_cgroup()

    # -- stopping -----------------------------------------------------------------------

    def _signal_group(self, signum: int) -> None:
        # Once the leader is reaped the group id may be reused: its members are reached one by one.
        if self.pgid is not None and self._command_exit is None:
            signal_group(self.pgid, signum)

    @property
    def tracks_descendants(self) -> bool:
        return self.leftovers.tracks

    @property
    def adopt_at(self) -> float | None:
        return self.leftovers.adopt_at

    def adopt_if_due(self) -> None:
        """Give the command a cgroup of its own once it has run for ADOPT_AFTER (cgroup.py), in a
        thread: called by the main loop, which wakes up for it."""
        self.leftovers.adopt_if_due(self.pid, self._command_exit is not None)

    def terminate_strays(self) -> None:
        """SIGTERM the descendants that have not had it: while the command runs, those that left
        its group (the group gets its own signal); once it has exited, all of them."""
        self.leftovers.terminate(outside_pgid=self.pgid if self._command_exit is None else None)

    def terminate(self, kill_at: float) -> None:
        """SIGTERM the group (and what left it) now and SIGKILL it at ``kill_at`` (monotonic) if still there.

        A second call can only bring the SIGKILL closer, never push it back.
        """
        if not self.terminated:
            self.terminated = True
            self._signal_group(signal.SIGTERM)
            self.terminate_strays()
        if self.killed:
            return
        self.kill_at = kill_at if self.kill_at is None else min(self.kill_at, kill_at)
        self.kill_if_due()

    def kill_later(self, at: float) -> None:
        """SIGKILL the group at ``at`` (monotonic) unless it is gone: the grace after a signal that
        was forwarded to it. Like :meth:`terminate`, it can only bring the SIGKILL closer."""
        if not self.killed:
            self.kill_at = at if self.kill_at is None else min(self.kill_at, at)

    def kill_if_due(self) -> None:
        if self.kill_at is not None and self._clock() >= self.kill_at:
            self._signal_group(signal.SIGKILL)
            self.leftovers.kill()
            self.killed = True
            self.kill_at = None  # nothing more to schedule: the loop now just waits for the exit

    # -- what the command leaves behind (leftovers.py) ------------------------------------

    def reap_orphans(self) -> None:
        """Reap lockrun's exited children other than the command (whose exit status is the run's)."""
        self.leftovers.reap_orphans(self.pid, self._command_exit is not None)

    def command_exited(self) -> int:
        """The command has exited: reap it, and SIGTERM (or, past the kill, SIGKILL) whatever it
        left behind, in its group or not. Returns how many processes are left to wait for."""
        assert self.pid is not None and self.tracks_descendants
        self._command_exit = self._reap_command()
        return self.leftovers.after_command(self.killed)

    def strays_gone(self) -> bool:
        """True once nothing the command started is left (lockrun's own zombies reaped first)."""
        return self.leftovers.gone(self.killed, self.pid, self._command_exit is not None)

    def strays_note(self) -> str | None:
        """The ledger note about what the command left behind (or why lockrun could not look)."""
        return self.leftovers.note(self.launched)

    def _reap_command(self) -> ChildExit:
        assert self.pid is not None
        self.leftovers.stop_adopting()  # once reaped, the command's pid may be reused: no more moves
        _, status = os.waitpid(self.pid, 0)
        # ... and its group id too, once the group is empty: signals to lockrun no longer go there.
        self.signals.forward_to(None)
        code = os.waitstatus_to_exitcode(status)
        return ChildExit(returncode=code, signal=None) if code >= 0 else ChildExit(returncode=None, signal=-code)

    def child_exit_pending(self) -> bool:
        """True once the direct child has exited (it stays a zombie until :meth:`finish`)."""
        if self.pid is None:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None and info.si_pid != 0

    def finish(self) -> ChildExit:
        """Stop what is left of the group and of the command's descendants, reap them and the
        child, give the terminal back. After the main loop's drain nothing is left; after an
        error anything left is SIGKILLed here, and waited for, before the lock can be released."""
        assert self.pid is not None
        if self._command_exit is None:
            # The leader is still a zombie here, so the group id cannot have been reused:
            # anything left in the group would run on after the lock is released.
            self._signal_group(signal.SIGKILL)
            self._command_exit = self._reap_command()
        while not self.strays_gone():
            self.leftovers.kill()
            time.sleep(FINAL_SWEEP_S)
        self.leftovers.remove_cgroup()
        if self._pump is not None:  # the whole group is gone: what it wrote last is on its way
            signals_before = len(self.signals.received)
            self._pump.drain(self.output_until,
                             lambda: len(self.signals.received) > signals_before or self.output_abandoned())
        if self._tty_fd is not None:
            with contextlib.suppress(OSError):
                os.tcsetpgrp(self._tty_fd, os.getpgrp())
        self.watchdog.disarm()
        return self._command_exit

    def close(self) -> None:
        self._reap_unlaunched()
        self.leftovers.remove_cgroup()
        self.watchdog.disarm()
        if self._owns_signals:
            self.signals.close()
