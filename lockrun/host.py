"""Facts about this host and its processes: who we are, and whether a pid is still the same process."""

from __future__ import annotations

import functools
import os
from typing import TypeGuard


@functools.cache
def hostname() -> str:
    # The same value as socket.gethostname(), without importing socket (read commands
    # that never touch the network should not pay for it).
    return os.uname().nodename


@functools.cache
def boot_id() -> str:
    """Changes at every boot: a pid from another boot means nothing here."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT: no process id is larger


def valid_pid(pid: object) -> TypeGuard[int]:
    """Could ``pid`` be a process id at all? (Records read back may hold anything.)"""
    return isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid <= PID_MAX


def process_start(pid: int) -> int | None:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    if not valid_pid(pid):
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


@functools.cache
def own_start() -> int | None:
    """This process's start time (it never changes; reading /proc once is enough)."""
    return process_start(os.getpid())


def same_process_alive(pid: int | None, start: int | None) -> bool:
    """Is ``pid`` alive and still the process that started at ``start``?

    Without a recorded start time only existence is checked.
    """
    if not valid_pid(pid):
        return False
    if start is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return process_start(pid) == start


def known_dead(host: str | None, boot: str | None, pid: int | None, start: int | None) -> bool:
    """True only when we can tell for sure that a recorded process is gone.

    That needs the record to come from this host: either from an earlier boot
    (every process of it is gone), or from this boot with a pid that no longer
    runs the process that started at ``start``. A record from another host is
    never judged here, nor one whose pid is missing or could not be a process id
    (someone else wrote it: when unsure, the holder is presumed alive).
    """
    if not host or host != hostname():
        return False
    if boot and boot_id() and boot != boot_id():
        return True
    if not valid_pid(pid):
        return False
    return not same_process_alive(pid, start)
