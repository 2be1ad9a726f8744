"""Facts about this host and its processes: who we are, and whether a recorded process is certainly gone.

A record (a Redis holder, a local lock's description, a ledger row) names the lockrun process
that wrote it: its pid, that pid's start time, the boot, the machine and the PID namespace it
ran in. Only the kernel can say whether that process still runs, and only about processes it
shows us. So a pid is evidence only when the boot id, the machine id and the PID namespace all
match ours (and /proc is the one of our namespace): the same pid elsewhere is another process.
A host name is a label that containers and cloned machines share: it proves nothing.
"""

from __future__ import annotations

import functools
import math
import os
import re
import time
from typing import NamedTuple, TypeGuard


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
    except (OSError, ValueError):
        return ""


MACHINE_ID_RE = re.compile(r"[0-9a-f]{32}")
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


@functools.cache
def machine_id() -> str:
    """This machine's id (machine-id(5)), or "" when none is readable.

    Unlike the host name it is meant to be unique; unlike the boot id it survives reboots, so
    it is what says that a record from another boot came from *this* machine. A file that
    holds no id (systemd's "uninitialized" on a first boot, an empty one) does not count.
    """
    for path in MACHINE_ID_FILES:
        try:
            with open(path, "rb") as f:
                text = f.read(64).decode("ascii", "replace").strip()
        except OSError:
            continue
        if MACHINE_ID_RE.fullmatch(text):
            return text
    return ""


#: The inode of the initial PID namespace (the kernel's PROC_PID_INIT_INO): the same on every
#: machine, so a namespace inode tells namespaces of one kernel apart, never machines.
INIT_PID_NS = 0xEFFFFFFC
NS_INODE_MAX = (1 << 32) - 1  # namespace inodes are 32-bit


def _ns_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


@functools.cache
def pid_ns() -> int | None:
    """The inode of this process's PID namespace (``/proc/self/ns/pid`` -> ``pid:[4026531836]``),
    or None when /proc cannot say (not mounted, or a /proc in which this process is not visible)."""
    return _ns_inode("/proc/self/ns/pid")


def proc_is_ours() -> bool:
    """Whether /proc shows the processes of our own PID namespace, so that /proc/PID is the
    process that ``PID`` means to us. (In ``unshare --pid --fork`` without ``--mount-proc``
    it shows the parent namespace's.)"""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def uptime_s() -> float:
    """How long ago this machine booted (CLOCK_BOOTTIME: a suspended host counts too)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT: no process id is larger


def valid_pid(pid: object) -> TypeGuard[int]:
    """Could ``pid`` be a process id at all? (Records read back may hold anything.)"""
    return isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid <= PID_MAX


def _start_of(stat_path: str) -> int | None:
    try:
        with open(stat_path, "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def process_start(pid: int) -> int | None:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    if not valid_pid(pid):
        return None
    return _start_of(f"/proc/{pid}/stat")


@functools.cache
def own_start() -> int | None:
    """This process's start time (it never changes; reading /proc once is enough). Read through
    /proc/self: where /proc is another namespace's, /proc/<our pid> is someone else."""
    return _start_of("/proc/self/stat")


def _same_time_namespace(pid: int) -> bool:
    """Start times are shifted by a time namespace's boot-time offset: compare them only within
    one. False when it cannot be told (the kernel does not let us look)."""
    ours = _ns_inode("/proc/self/ns/time")
    if ours is None:
        return not os.path.lexists("/proc/self/ns/time")  # a kernel without time namespaces: one clock
    return _ns_inode(f"/proc/{pid}/ns/time") == ours


def same_process_alive(pid: int | None, start: int | None) -> bool:
    """Is ``pid`` alive and still the process that started at ``start``?

    Without a recorded start time only existence is checked. A pid that runs a process whose
    start time cannot be compared with ours (another time namespace) counts as alive.
    """
    if not valid_pid(pid):
        return False
    if start is None:
        return _exists(pid)
    found = process_start(pid)
    if found is None:
        # Its stat could not be read: gone, or hidden from us (/proc mounted hidepid=invisible
        # hides other users' processes, files and all). The kernel's word is kill(pid, 0).
        return _exists(pid)
    return found == start or not _same_time_namespace(pid)


def _exists(pid: int) -> bool:
    """Whether a process ``pid`` exists in our PID namespace, by the kernel (``kill(pid, 0)``):
    EPERM means it exists and is another user's; /proc may hide it, the kernel does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- every process of this kernel, seen from the initial PID namespace -------------------------------


def _hidepid() -> bool:
    """Whether /proc hides other users' processes (``hidepid=``), from its mount options."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if left.split()[4:5] == ["/proc"] and right.startswith("proc "):
                    options = right.split()[-1].split(",")
                    return any(o.startswith("hidepid=") and o not in ("hidepid=0", "hidepid=off") for o in options)
    except OSError:
        return True
    return False


@functools.cache
def _every_process() -> dict[int, list[tuple[int, bool]]] | None:
    """Every process of this kernel, by its pid in its own (innermost) PID namespace: {pid there:
    [(pid here, whether "there" is our namespace)]}. None unless we can see them all: from the
    initial PID namespace, through its own /proc, with nothing hidden from us."""
    if pid_ns() != INIT_PID_NS or not proc_is_ours() or (os.geteuid() != 0 and _hidepid()):
        return None
    found: dict[int, list[tuple[int, bool]]] = {}
    try:
        entries = [entry.name for entry in os.scandir("/proc") if entry.name.isdigit()]
    except OSError:
        return None
    for entry in entries:
        try:
            with open(f"/proc/{entry}/status", "rb") as f:
                status = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue  # it exited meanwhile
        except OSError:
            return None  # a process we may not look at: we do not see them all
        for line in status.splitlines():
            if line.startswith(b"NSpid:"):
                pids = line.split()[1:]  # its pid in our namespace, then in each one below, down to its own
                if pids and pids[-1].isdigit():
                    found.setdefault(int(pids[-1]), []).append((int(entry), len(pids) == 1))
                break
        else:
            return None  # a kernel without NSpid (before 4.1) cannot say
    return found


def alive_in_any_namespace(pid: int, start: int | None, namespace: int) -> bool:
    """Is there, anywhere on this kernel, a process that is ``pid`` in its own PID namespace (the
    one whose inode is ``namespace``) and started at ``start``? True whenever we cannot see every
    process, or cannot tell one of the candidates apart."""
    everyone = _every_process()
    if everyone is None:
        return True
    for here, in_ours in everyone.get(pid, []):
        its_namespace = pid_ns() if in_ours else _ns_inode(f"/proc/{here}/ns/pid")
        if its_namespace not in (namespace, None):
            continue
        if start is None or process_start(here) in (start, None) or not _same_time_namespace(here):
            return True
    return False


# --- judging a record ----------------------------------------------------------------------------------


def _text(value: object) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else ""


def _number(value: object, low: int, high: int) -> int | None:
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) < 20:
        value = int(value.strip())
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return None


class Origin(NamedTuple):
    """Where a recorded lockrun process ran, as its record says (not its host name: a label, which
    proves nothing). Build it with :meth:`of`: records may hold anything, and whatever is unusable
    is unknown."""

    boot_id: str
    machine_id: str
    pid_ns: int | None
    pid: int | None
    pid_start: int | None
    doubtful: bool = False  # the record names its boot, machine or namespace in a way lockrun never writes

    @classmethod
    def of(cls, boot: object, pid: object, start: object, namespace: object = None, machine: object = None,
           doubtful: bool = False) -> Origin:
        machine_text, namespace_number = _text(machine), _number(namespace, 1, NS_INODE_MAX)
        unusable = (machine not in (None, "", b"") and not MACHINE_ID_RE.fullmatch(machine_text)) or (
            namespace_number is None and namespace not in (None, "", b""))
        return cls(boot_id=_text(boot), machine_id="" if unusable else machine_text,
                   pid_ns=namespace_number, pid=_number(pid, 1, PID_MAX), pid_start=_number(start, 0, (1 << 63) - 1),
                   doubtful=doubtful or unusable or not isinstance(boot, (str, bytes, type(None))))

    def this_machine(self) -> bool:
        """The record names our machine id (or, where neither side has one, nothing else)."""
        return self.machine_id == machine_id()

    def earlier_boot(self) -> bool:
        """It names this machine and another boot: every process of that boot is gone. Needs a
        machine id on both sides: a boot id alone cannot tell an earlier boot of this machine
        from another machine."""
        return (not self.doubtful and bool(self.machine_id) and self.this_machine() and bool(self.boot_id)
                and bool(boot_id()) and self.boot_id != boot_id())

    def pid_is_ours(self) -> bool:
        """Whether the recorded pid means the same process to us: this machine, this boot, this
        PID namespace, and a /proc that shows it."""
        return (self.pid_ns is not None and self.pid_ns == pid_ns() and self.this_machine()
                and bool(self.boot_id) and self.boot_id == boot_id() and proc_is_ours())

    def process_gone(self, search_every_namespace: bool = False) -> bool:
        """The recorded process certainly no longer runs: its pid here runs another process, or
        none. With ``search_every_namespace``, a record of this machine and boot from another
        namespace is gone when no process of this kernel is that pid in that namespace, when we
        can see every process. A record that does not say its namespace (written where /proc could
        not say it) proves nothing by its pid."""
        if self.doubtful or not valid_pid(self.pid):
            return False
        if self.pid_is_ours():
            return not same_process_alive(self.pid, self.pid_start)
        if (search_every_namespace and self.pid_ns is not None and self.this_machine() and self.boot_id
                and self.boot_id == boot_id()):
            return not alive_in_any_namespace(self.pid, self.pid_start, self.pid_ns)
        return False


def known_dead(boot: object, pid: object, start: object, namespace: object = None, machine: object = None) -> bool:
    """The ledger's question: is the lockrun process of a ``running`` row certainly gone, so that
    the row will never finish (``abandoned``)? Values as stored: any type.

    Yes when the row names this machine and another boot, or when its pid no longer runs its
    process (see :meth:`Origin.process_gone`; a row of another PID namespace of this machine is
    looked for in it, when we can see every process). Anything else is presumed alive.
    (``status`` and ``unlock`` judge a holder more strictly: clearing a live lock is a double run,
    a wrong word here is not.)
    """
    origin = Origin.of(boot, pid, start, namespace, machine)
    if origin.earlier_boot():
        return True
    return origin.process_gone(search_every_namespace=True)


# --- a process in another PID namespace, seen from ours ---------------------------------------------------


def pid_there(here: int) -> tuple[int | None, int | None]:
    """The PID namespace of the process that is ``here`` to us, and its pid in it (the last of
    /proc/PID/status's NSpid): (None, None) when the kernel does not tell."""
    if not valid_pid(here) or not proc_is_ours():
        return None, None
    namespace = _ns_inode(f"/proc/{here}/ns/pid")
    try:
        with open(f"/proc/{here}/status", "rb") as f:
            status = f.read()
    except OSError:
        return namespace, None
    for line in status.splitlines():
        if line.startswith(b"NSpid:"):
            innermost = line.split()[-1]
            return namespace, int(innermost) if innermost.isdigit() else None
    return namespace, None
