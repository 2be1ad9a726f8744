"""lockrun's descendants, as /proc shows them, and signals that reach exactly the process seen.

lockrun is a child subreaper (supervisor.py), so a process the command started and then left
(``setsid``, a double fork, ``nohup ... &``) is re-parented to lockrun when its parent exits:
walking the tree from lockrun's own pid down finds every process the command started, in its
process group or not. The tree is read from ``/proc/PID/task/TID/children`` (every thread's:
an orphan goes to whichever thread of the subreaper the kernel picks), or, on a kernel built
without that file, from the parent pid of every process in ``/proc``.

The tree changes while it is read (processes fork and exit): a walk is a snapshot, and callers
loop until a walk finds nobody left. A pid read from /proc may have been reused by the time it
is signalled, so :func:`send` opens a pidfd and checks the process' start time before signalling
through it: a signal never reaches a process that was not the one seen.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable, Iterator

from lockrun.core.masking import mask_command
from lockrun.core.os_text import escaped_all
from lockrun.core.secret_names import BUILT_IN, Masking

_children_files: bool | None = None  # whether this kernel has /proc/PID/task/TID/children


class Proc:
    """One process of a snapshot: enough to signal it safely and to describe it.

    A plain class, not a NamedTuple: that costs a millisecond of every run's start-up to define.
    """

    __slots__ = ("pid", "ppid", "pgid", "state", "start")

    def __init__(self, pid: int, ppid: int, pgid: int, state: str, start: int) -> None:
        self.pid = pid
        self.ppid = ppid
        self.pgid = pgid
        self.state = state  # "Z" for a zombie (dead, not yet reaped), "T" stopped, ...
        self.start = start  # start time in clock ticks after boot: with the pid, the process' identity

    def __repr__(self) -> str:
        return f"Proc(pid={self.pid}, ppid={self.ppid}, pgid={self.pgid}, state={self.state!r}, start={self.start})"


def proc_usable() -> bool:
    """True when /proc shows lockrun's own PID namespace (it may not: ``unshare --pid`` without
    ``--mount-proc``), so that the pids read there are the ones ``kill`` takes."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def stat(pid: int) -> Proc | None:
    """``pid`` as /proc/PID/stat describes it, or None once it is gone (or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
        # The command name is in parentheses and may hold anything, ")" included: split after the last.
        fields = text[text.rindex(b")") + 2:].split()
        return Proc(pid, int(fields[1]), int(fields[2]), fields[0].decode("ascii", "replace"), int(fields[19]))
    except (OSError, ValueError, IndexError):
        return None


def _children_via_tasks(pid: int) -> list[int] | None:
    """The children of every thread of ``pid``, or None without the kernel's children files."""
    global _children_files
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            if os.path.isdir(f"/proc/{pid}/task/{tid}"):
                _children_files = False  # the thread is there, its children file is not
                return None
        except (OSError, ValueError):
            continue
        else:
            _children_files = True
    return found


def _parents() -> dict[int, list[int]]:
    """Every process' children, from the parent pid of each one in /proc (the slow way)."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (proc := stat(int(entry))) is not None:
            tree.setdefault(proc.ppid, []).append(proc.pid)
    return tree


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s children right now."""
    if _children_files is not False:
        found = _children_via_tasks(pid)
        if found is not None:
            return found
    return _parents().get(pid, [])


def snapshot(root: int, skip: Iterable[int | None] = ()) -> list[Proc]:
    """Every descendant of ``root`` (not ``root`` itself) at about this moment, zombies included,
    leaving out the processes in ``skip`` (None: none) and what they started."""
    skipped = {pid for pid in skip if pid is not None}
    tree = _parents() if _children_files is False else None
    found: list[Proc] = []
    todo = [root]
    seen = {root}
    while todo:
        parent = todo.pop()
        kids = tree.get(parent, []) if tree is not None else children(parent)
        for proc in _first_seen(kids, seen, skipped):
            found.append(proc)
            todo.append(proc.pid)
    return found


def _first_seen(kids: list[int], seen: set[int], skipped: set[int]) -> Iterator[Proc]:
    """The processes among ``kids`` not seen before (now seen) nor skipped, that still exist."""
    for pid in kids:
        if pid in seen or pid in skipped:
            continue
        seen.add(pid)
        proc = stat(pid)
        if proc is not None:
            yield proc


def none_left(root: int, skip: Iterable[int | None] = ()) -> bool:
    """True when ``root`` has no descendant left (``skip`` aside), by two walks in a row: the
    kernel's children lists may miss an entry that changes while it is read."""
    return not snapshot(root, skip) and not snapshot(root, skip)


def send(proc: Proc, signum: int) -> bool:
    """Send ``signum`` to ``proc`` if it is still the process that was seen; True if sent."""
    sent = _send_by_pidfd(proc, signum)
    if sent is not None:
        return sent
    if not _still(proc):
        return False
    try:
        os.kill(proc.pid, signum)
    except OSError:
        return False
    return True


def _send_by_pidfd(proc: Proc, signum: int) -> bool | None:
    """:func:`send` through a pidfd, which holds the process while it is checked; None where there
    are no pidfds (a kernel before 5.3, or a seccomp filter): the plain way."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd = opener(proc.pid)
    except ProcessLookupError:
        return False
    except OSError:
        return None
    try:
        if not _still(proc):  # the pidfd holds this process: is it the one we saw?
            return False
        signal.pidfd_send_signal(fd, signum)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _still(proc: Proc) -> bool:
    """Whether ``proc`` is still the process that was seen (its pid not reused since)."""
    now = stat(proc.pid)
    return now is not None and now.start == proc.start


def command_line(pid: int, limit: int = 60, masking: Masking = BUILT_IN) -> str:
    """What ``pid`` runs, for a ledger note: its argv, masked as the run's command is (the note goes
    where the command line goes: core/masking.py), joined by spaces, cut to ``limit`` characters."""
    text = ""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = [os.fsdecode(arg) for arg in f.read(4096).rstrip(b"\0").split(b"\0")]
        text = " ".join(mask_command(escaped_all(argv), masking)) if any(argv) else ""
    if not text:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/comm", "rb") as f:
            text = "[" + f.read().strip().decode("utf-8", "replace") + "]"
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
