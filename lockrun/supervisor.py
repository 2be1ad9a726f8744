"""The supervisor: spawn the command in its own process group and keep it on a leash.

- The command gets its own process group, so every signal reaches the whole job
  (a ``sh -c`` wrapper and what it started), not only the direct child.
- ``PR_SET_PDEATHSIG(SIGKILL)`` kills the direct child the moment lockrun dies,
  even by SIGKILL. The death signal follows the *thread* that forked, so the
  command is spawned from the main thread, before the keeper thread exists.
- A watchdog (a tiny shell started just before the command) holds the read end
  of a pipe from lockrun and SIGKILLs the command's whole group when it sees
  EOF without having been disarmed: that covers grandchildren too.
- SIGTERM, SIGINT and SIGHUP sent to lockrun are forwarded to the group.
- Every wake-up (a signal, the child's exit, the keeper) arrives through one
  self-pipe, so the main loop sleeps in ``select`` and costs no CPU while idle.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from typing import NamedTuple

from lockrun.errors import CommandNotRunnable, ExitCode

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PR_SET_PDEATHSIG = 1


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        return None


def check_runnable(argv: list[str]) -> None:
    """Fail early, before taking the lock, for a command that cannot be executed."""
    program = argv[0]
    if shutil.which(program):
        return
    if "/" in program:
        if os.path.isdir(program) or (os.path.exists(program) and not os.access(program, os.X_OK)):
            raise CommandNotRunnable(f"{program}: permission denied (not an executable file)", ExitCode.NOT_EXECUTABLE)
        raise CommandNotRunnable(f"{program}: command not found", ExitCode.NOT_FOUND)
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", program)
        if os.path.isfile(candidate):
            raise CommandNotRunnable(f"{program}: permission denied (not executable)", ExitCode.NOT_EXECUTABLE)
    raise CommandNotRunnable(f"{program}: command not found in PATH", ExitCode.NOT_FOUND)


def _spawn_error(program: str, exc: OSError) -> CommandNotRunnable:
    if isinstance(exc, FileNotFoundError):
        return CommandNotRunnable(f"{program}: command not found", ExitCode.NOT_FOUND)
    return CommandNotRunnable(f"{program}: cannot execute: {exc.strerror or exc}", ExitCode.NOT_EXECUTABLE)


class ChildExit(NamedTuple):
    returncode: int | None  # the command's exit code, None when a signal ended it
    signal: int | None

    @property
    def shell_code(self) -> int:
        """The code a shell would report: the exit code, or 128+N for signal N."""
        return self.returncode if self.signal is None else ExitCode.SIGNAL_BASE + self.signal


# The watchdog: a tiny shell process holding the read end of a pipe from lockrun.
# "PGID\n" arms it; "disarm\n" (a normal end) lets it go; EOF without "disarm"
# means lockrun died, and it SIGKILLs the command's whole group. It ignores the
# signals that may hit lockrun's own group: only the pipe ends it. A shell
# spawned with vfork costs a fraction of forking the Python process, and ~1 MiB
# of memory instead of a copy of lockrun's.
WATCHDOG_SCRIPT = (
    'trap "" INT TERM HUP TSTP TTIN TTOU; '
    'read pgid && read word; '
    '[ -n "$pgid" ] && [ "$word" != disarm ] && kill -s KILL -- "-$pgid" 2>/dev/null; '
    "exit 0"
)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)


def _close_all_but(keep: set[int]) -> None:
    """Close every descriptor from 3 up except ``keep``."""
    start = 3
    for fd in sorted(keep):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, os.sysconf("SC_OPEN_MAX"))


def _launcher(
    argv: list[str], program: str | None, base_env: dict, ctl_r: int, err_w: int, prctl, parent: int,
    tty_fd: int | None, output_fds: tuple[int, int] | None,
) -> None:
    """The command's process between fork and exec. Never returns.

    Only fd 0-2, the control pipe and the error pipe stay open (with
    ``output_fds``, stdout and stderr become those pipes); the signal
    dispositions lockrun changed are reset, as subprocess does.
    """
    try:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # lockrun died before the death signal was armed
                os._exit(ExitCode.SIGNAL_BASE + signal.SIGKILL)
        signal.set_wakeup_fd(-1)
        for sig in (*FORWARDED_SIGNALS, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        if output_fds is not None:
            for target, fd in ((1, output_fds[0]), (2, output_fds[1])):
                if fd is not None:
                    os.dup2(fd, target)
        _close_all_but({ctl_r, err_w})
        message = _read_all(ctl_r)
        if not message:
            os._exit(0)  # lockrun decided not to run the command
        env = {**base_env, **json.loads(message)}
        if tty_fd is not None:
            try:
                os.tcsetpgrp(tty_fd, os.getpid())  # SIGTTOU is still ignored here, as in lockrun
            except OSError:
                pass
        signal.signal(signal.SIGTTOU, signal.SIG_DFL)
        if program:
            os.execve(program, argv, env)
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        _write_all(err_w, f"{exc.errno or 0}:".encode())
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        _write_all(err_w, b"0:")
    os._exit(ExitCode.NOT_FOUND)


PUMP_DRAIN_S = 2.0


class OutputTail:
    """The last ``size`` bytes of the command's combined output, in arrival order."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._chunks: collections.deque[bytes] = collections.deque()
        self._length = 0
        self._lock = threading.Lock()

    def feed(self, data: bytes) -> None:
        with self._lock:
            self._chunks.append(data)
            self._length += len(data)
            while self._length - len(self._chunks[0]) >= self.size:
                self._length -= len(self._chunks.popleft())

    def text(self) -> str:
        with self._lock:
            data = b"".join(self._chunks)[-self.size :]
        return data.decode("utf-8", "replace")


# With two pipes, read at most this much from one before looking at the other: a burst on one
# stream cannot hold back what the other wrote meanwhile. One pipe has no order to keep.
PUMP_READ_SIZE = 1024
PUMP_READ_SIZE_ONE_PIPE = 65536


def inherited(fd: int) -> bool:
    """True when ``fd`` is a descriptor lockrun was started with. Everything lockrun opens
    itself is close-on-exec, so a stdout that was closed at start and then reused by one of
    lockrun's own files is not mistaken for an output to pass the command's writes to."""
    try:
        return not fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    except OSError:
        return False


def same_destination(fd_a: int, fd_b: int) -> bool:
    """True when writes to the two descriptors land in one stream: the same pipe, socket or
    terminal (cron gives a job one pipe for both), or the same file at the same offset
    (``>> log 2>&1``). The command then gets one pipe for both, and its output keeps its exact order."""
    try:
        a, b = os.fstat(fd_a), os.fstat(fd_b)
    except OSError:
        return False
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
        return False
    if stat.S_ISFIFO(a.st_mode) or stat.S_ISSOCK(a.st_mode) or stat.S_ISCHR(a.st_mode):
        return True
    if not stat.S_ISREG(a.st_mode):
        return False
    try:
        return os.lseek(fd_a, 0, os.SEEK_CUR) == os.lseek(fd_b, 0, os.SEEK_CUR)
    except OSError:
        return False


def _write_through(fd: int, data: bytes) -> None:
    """Write everything, waiting (not spinning) when ``fd`` is non-blocking and full; raises
    OSError when the destination is gone."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [], 1.0)


class _Pump:
    """Copies the command's output pipes to lockrun's own descriptors, keeping a tail.

    One thread polls every pipe and reads a little from each that is ready in turn, so the
    tail and two destinations that end up in one place (a terminal, a log) see the writes in the
    order they reached lockrun; within one pipe the order is always exact. When a destination is
    gone (``| head -1`` exited), its pipe is closed, so the command's next write to it fails with
    EPIPE/SIGPIPE exactly as it would without ``--capture-tail``.
    """

    def __init__(self, routes: list[tuple[int, int]], tail: OutputTail) -> None:
        self.routes = dict(routes)  # pipe read end -> lockrun's descriptor
        self.tail = tail
        self._thread = threading.Thread(target=self._run, name="lockrun-pump", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        for source in self.routes:
            poller.register(source, select.POLLIN)
        open_sources = dict(self.routes)
        read_size = PUMP_READ_SIZE_ONE_PIPE if len(open_sources) == 1 else PUMP_READ_SIZE
        try:
            while open_sources:
                for source, _events in poller.poll():
                    target = open_sources.get(source)
                    if target is None:
                        continue
                    try:
                        chunk = os.read(source, read_size)
                    except OSError:
                        chunk = b""
                    if chunk:
                        self.tail.feed(chunk)
                        try:
                            _write_through(target, chunk)
                            continue
                        except OSError:
                            pass  # our own output is gone: let the command find out
                    poller.unregister(source)
                    del open_sources[source]
                    os.close(source)
        finally:
            for source in open_sources:
                os.close(source)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


class Supervisor:
    def __init__(self, argv: list[str], env: dict[str, str], capture_tail: int | None = None) -> None:
        self.argv = argv
        self.env = env
        self.tail = OutputTail(capture_tail) if capture_tail else None
        self._output_routes: list[tuple[int, int]] | None = None  # (pipe read end, lockrun's fd)
        self._pump: _Pump | None = None
        self.pid: int | None = None  # the command's process (forked by prepare, exec'd by spawn)
        self.pgid: int | None = None
        self.launched = False
        self._ctl_w: int | None = None
        self._err_r: int | None = None
        self._tty_candidate: int | None = None
        self._program: str | None = None
        self.received: list[int] = []  # signals sent to lockrun, in order
        self.kill_at: float | None = None  # when SIGKILL follows the SIGTERM already sent
        self.terminated = False
        self.killed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._old_handlers: dict[int, object] = {}
        self._old_wakeup_fd: int | None = None
        self._watchdog: subprocess.Popen | None = None
        self._prctl = None  # libc's prctl once loaded; False where there is none
        self._tty_fd: int | None = None

    # -- signals ----------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """Catch the forwarded signals from now on (also while waiting for the lock)."""
        self._old_wakeup_fd = signal.set_wakeup_fd(self._wake_w)
        for sig in FORWARDED_SIGNALS:
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        self._old_handlers[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, self._on_sigchld)
        # Ignore SIGTTOU so we can hand the terminal to the command and take it back.
        self._old_handlers[signal.SIGTTOU] = signal.signal(signal.SIGTTOU, signal.SIG_IGN)

    def restore_signal_handlers(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()
        if self._old_wakeup_fd is not None:
            signal.set_wakeup_fd(self._old_wakeup_fd)
            self._old_wakeup_fd = None

    def _on_signal(self, signum: int, _frame) -> None:
        self.received.append(signum)
        if self.pgid is not None:
            self._killpg(signum)

    def _on_sigchld(self, _signum: int, _frame) -> None:
        pass  # the wakeup fd has already woken the loop

    def wake(self) -> None:
        """Wake the main loop (thread-safe; called by the keeper)."""
        try:
            os.write(self._wake_w, b"k")
        except BlockingIOError:
            pass  # the pipe is full: the loop is already awake

    def wait(self, until: float | None) -> None:
        """Sleep until something happens or the monotonic time ``until`` (None: 1 s)."""
        timeout = 1.0 if until is None else max(0.0, until - time.monotonic())
        ready, _, _ = select.select([self._wake_r], [], [], timeout)
        if ready:
            try:
                while os.read(self._wake_r, 512):
                    pass
            except BlockingIOError:
                pass

    # -- spawning ---------------------------------------------------------------------

    def _start_watchdog(self) -> None:
        try:
            self._watchdog = subprocess.Popen(
                ["/bin/sh", "-c", WATCHDOG_SCRIPT],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        except OSError:  # no /bin/sh: PR_SET_PDEATHSIG still covers the direct child
            self._watchdog = None

    def _foreground_tty(self) -> int | None:
        """stdin's terminal if lockrun runs in its foreground group, else None."""
        try:
            if os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp():
                return 0
        except OSError:
            pass
        return None

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
        if self._prctl is None:
            self._prctl = _load_prctl() or False
        if self._watchdog is None:
            self._start_watchdog()
        prctl = self._prctl or None
        parent = os.getpid()
        tty_fd = self._foreground_tty()
        # Resolved now, so the exec is one execve and not a walk along PATH.
        self._program = shutil.which(self.argv[0], path=self.env.get("PATH", os.defpath))
        ctl_r, ctl_w = os.pipe()
        err_r, err_w = os.pipe()
        output_fds = None
        routes: list[tuple[int, int]] = []
        if self.tail is not None:
            # A stream lockrun was started without stays closed for the command, as without
            # --capture-tail; two that are one destination share one pipe, which keeps their order.
            if inherited(1) and inherited(2) and same_destination(1, 2):
                read_end, write_end = os.pipe()
                routes.append((read_end, 1))
                output_fds = (write_end, write_end)
            else:
                ends: list[int | None] = [None, None]
                for index, target in enumerate((1, 2)):
                    if inherited(target):
                        read_end, ends[index] = os.pipe()
                        routes.append((read_end, target))
                output_fds = (ends[0], ends[1])
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the launcher process; it never returns
            _launcher(self.argv, self._program, self.env, ctl_r, err_w, prctl, parent, tty_fd, output_fds)
        os.close(ctl_r)
        os.close(err_w)
        if output_fds is not None:
            for fd in set(output_fds) - {None}:
                os.close(fd)
            self._output_routes = routes
        try:
            os.setpgid(pid, pid)  # also from this side: the group exists before we signal it
        except OSError:
            pass
        self.pid = self.pgid = pid
        self._ctl_w, self._err_r, self._tty_candidate = ctl_w, err_r, tty_fd
        self._write_watchdog(f"{pid}\n".encode())

    def spawn(self, extra_env: dict[str, str] | None = None) -> int:
        """Exec the command in the prepared process, its environment being ``env`` plus
        ``extra_env`` (what is only known once the lock is held); raise CommandNotRunnable
        if it cannot be executed."""
        self.prepare()
        message = json.dumps(extra_env or {}).encode()
        try:
            _write_all(self._ctl_w, message)
        except OSError:
            pass  # the launcher died: the error pipe below says so
        os.close(self._ctl_w)
        self._ctl_w = None
        if self._tty_candidate is not None:
            try:
                os.tcsetpgrp(self._tty_candidate, self.pgid)
                self._tty_fd = self._tty_candidate
            except OSError:
                pass
        report = _read_all(self._err_r)  # EOF at a successful exec (the pipe is close-on-exec)
        os.close(self._err_r)
        self._err_r = None
        if report:
            self._reap_unlaunched()
            self._disarm_watchdog()
            code = int(report.split(b":")[0] or 0)
            raise _spawn_error(self.argv[0], OSError(code, os.strerror(code)) if code else OSError("launcher failed"))
        self.launched = True
        if self._output_routes is not None:
            self._pump = _Pump(self._output_routes, self.tail)
            self._output_routes = None  # the pump owns (and closes) the read ends now
        # A signal that arrived before the command existed is forwarded now.
        for signum in self.received:
            self._killpg(signum)
        return self.pid

    def _reap_unlaunched(self) -> None:
        """Let a prepared launcher go without running anything (busy, interrupted, failed)."""
        if self.pid is None or self.launched:
            return
        for fd in (self._ctl_w, self._err_r, *(source for source, _ in self._output_routes or ())):
            if fd is not None:
                os.close(fd)
        self._ctl_w = self._err_r = self._output_routes = None
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.pid = self.pgid = None

    def _write_watchdog(self, data: bytes) -> None:
        if self._watchdog is None or self._watchdog.stdin is None:
            return
        try:
            self._watchdog.stdin.write(data)
            self._watchdog.stdin.flush()
        except OSError:
            pass  # a dead watchdog only costs the grandchildren's protection

    def _disarm_watchdog(self) -> None:
        if self._watchdog is None:
            return
        self._write_watchdog(b"disarm\n")
        try:
            self._watchdog.stdin.close()
        except OSError:
            pass
        self._watchdog.wait()
        self._watchdog = None

    # -- stopping -----------------------------------------------------------------------

    def _killpg(self, signum: int) -> None:
        try:
            os.killpg(self.pgid, signum)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                raise

    def terminate(self, kill_at: float) -> None:
        """SIGTERM the group now and SIGKILL it at ``kill_at`` (monotonic) if still there.

        A second call can only bring the SIGKILL closer, never push it back.
        """
        if not self.terminated:
            self.terminated = True
            self._killpg(signal.SIGTERM)
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
        if self.kill_at is not None and time.monotonic() >= self.kill_at:
            self._killpg(signal.SIGKILL)
            self.killed = True
            self.kill_at = None  # nothing more to schedule: the loop now just waits for the exit

    def child_exit_pending(self) -> bool:
        """True once the direct child has exited (it stays a zombie until :meth:`finish`)."""
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None and info.si_pid != 0

    def finish(self) -> ChildExit:
        """Stop what is left of the group, reap the child, give the terminal back."""
        # The leader is still a zombie here, so the group id cannot have been reused:
        # anything left in the group would run on after the lock is released.
        self._killpg(signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if self._pump is not None:  # the whole group is gone: the pipes are at EOF, unless a
            self._pump.join(PUMP_DRAIN_S)  # process that left the group still holds them
        if self._tty_fd is not None:
            try:
                os.tcsetpgrp(self._tty_fd, os.getpgrp())
            except OSError:
                pass
        self._disarm_watchdog()
        return ChildExit(returncode=code, signal=None) if code >= 0 else ChildExit(returncode=None, signal=-code)

    def close(self) -> None:
        self._reap_unlaunched()
        self._disarm_watchdog()
        self.restore_signal_handlers()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
