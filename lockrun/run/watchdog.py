"""The watchdog: kills the command's whole process group, and its cgroup, if lockrun dies.

``PR_SET_PDEATHSIG`` kills only the command's direct child when lockrun dies, even by
SIGKILL; what it started (a ``sh -c`` and its jobs) would run on, unlocked. The watchdog
is a tiny shell started just before the command, holding the read end of a pipe from
lockrun. Lines on the pipe tell it what to kill: ``group PGID`` (the command's process
group), ``cgroup DIR`` (the run's own cgroup, cgroup.py, when there is one); ``disarm`` (a
normal end) lets it go. EOF without ``disarm`` means lockrun died: it SIGKILLs the group and,
through ``cgroup.kill``, everything in the cgroup (which covers the processes that left the
group, ``setsid`` and double forks), then removes the emptied cgroup. It runs in a session of
its own, so that what hits lockrun's process group (a group SIGKILL or SIGSTOP) does not hit it,
and ignores the catchable signals besides: only the pipe ends it. A shell spawned with vfork costs a
fraction of forking the Python process, and ~1 MiB of memory instead of a copy of lockrun's.
"""

from __future__ import annotations

import contextlib
import subprocess

WATCHDOG_SCRIPT = (
    'trap "" INT TERM HUP TSTP TTIN TTOU; pgid=; cg=; '
    'while read -r word arg; do case "$word" in '
    'group) pgid=$arg;; cgroup) cg=$arg;; disarm) exit 0;; esac; done; '
    '[ -n "$pgid" ] && kill -s KILL -- "-$pgid" 2>/dev/null; '
    'if [ -n "$cg" ]; then echo 1 > "$cg/cgroup.kill"; i=0; '
    'while ! rmdir "$cg" && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done; fi 2>/dev/null; '
    "exit 0"
)


class Watchdog:
    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The watchdog's process, which is lockrun's child but not the command's."""
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the shell, unless it runs already; without /bin/sh there is none."""
        if self._process is not None:
            return
        try:
            # A session of its own: a signal to lockrun's process group (``timeout -s KILL``,
            # ``kill -9 -- -PGID``, a group SIGSTOP) must not take the watchdog with lockrun, or
            # nobody would be left to kill the command's group and cgroup.
            self._process = subprocess.Popen(
                ["/bin/sh", "-c", WATCHDOG_SCRIPT],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )
        except OSError:  # PR_SET_PDEATHSIG still covers the direct child
            self._process = None

    def arm(self, pgid: int) -> None:
        """Kill the group ``pgid`` if lockrun dies from now on."""
        self._write(f"group {pgid}\n".encode())

    def arm_cgroup(self, path: str) -> None:
        """Kill everything in the cgroup at ``path`` if lockrun dies from now on."""
        if "\n" not in path:
            self._write(f"cgroup {path}\n".encode())

    def reap(self) -> None:
        """Reap the watchdog, which has exited (somebody killed it): lockrun runs on without it."""
        if self._process is not None:
            self._process.wait()
            self._process = None

    def disarm(self) -> None:
        """Let the watchdog go without killing anything, and reap it."""
        if self._process is None:
            return
        self._write(b"disarm\n")
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        self._process.wait()
        self._process = None

    def _write(self, data: bytes) -> None:
        process = self._process  # read once: the cgroup's thread (cgroup.Adopter) writes here too
        if process is None or process.stdin is None:
            return
        try:
            process.stdin.write(data)
            process.stdin.flush()
        except (OSError, ValueError):
            pass  # a dead watchdog only costs the grandchildren's protection
