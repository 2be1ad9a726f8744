"""The watchdog: kills the command's whole process group if lockrun dies.

``PR_SET_PDEATHSIG`` kills only the command's direct child when lockrun dies, even by
SIGKILL; what it started (a ``sh -c`` and its jobs) would run on, unlocked. The watchdog
is a tiny shell started just before the command, holding the read end of a pipe from
lockrun. "PGID\\n" arms it; "disarm\\n" (a normal end) lets it go; EOF without "disarm"
means lockrun died, and it SIGKILLs the group. It ignores the signals that may hit
lockrun's own group: only the pipe ends it. A shell spawned with vfork costs a fraction
of forking the Python process, and ~1 MiB of memory instead of a copy of lockrun's.
"""

from __future__ import annotations

import contextlib
import subprocess

WATCHDOG_SCRIPT = (
    'trap "" INT TERM HUP TSTP TTIN TTOU; '
    'read pgid && read word; '
    '[ -n "$pgid" ] && [ "$word" != disarm ] && kill -s KILL -- "-$pgid" 2>/dev/null; '
    "exit 0"
)


class Watchdog:
    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the shell, unless it runs already; without /bin/sh there is none."""
        if self._process is not None:
            return
        try:
            self._process = subprocess.Popen(
                ["/bin/sh", "-c", WATCHDOG_SCRIPT],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        except OSError:  # PR_SET_PDEATHSIG still covers the direct child
            self._process = None

    def arm(self, pgid: int) -> None:
        """Kill the group ``pgid`` if lockrun dies from now on."""
        self._write(f"{pgid}\n".encode())

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
        if self._process is None or self._process.stdin is None:
            return
        try:
            self._process.stdin.write(data)
            self._process.stdin.flush()
        except OSError:
            pass  # a dead watchdog only costs the grandchildren's protection
