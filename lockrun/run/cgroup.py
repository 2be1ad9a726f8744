"""A cgroup v2 of the run's own: the command and everything it starts, killable as one.

Where lockrun may create a cgroup (root, or a user given a delegated cgroup v2 subtree), the
command is moved into ``lockrun-PID-XXXXXXXX`` below lockrun's own cgroup. Everything it forks
is born there, wherever it goes in the process tree, so ``cgroup.kill`` (Linux 5.14) kills all
of it at once, forks in flight included. That is what covers a lockrun that is SIGKILLed (the
OOM killer, ``kill -9``, its own backstop timer): lockrun's descendants are then beyond its reach,
but the watchdog (watchdog.py), which outlives it, writes ``cgroup.kill``.

Anything that does not allow it (cgroup v1 only, a read-only ``/sys/fs/cgroup`` as in most
containers, no permission, a threaded cgroup, a kernel without ``cgroup.kill``) makes
:meth:`RunCgroup.create` return None and lockrun go on without one: the subreaper
(supervisor.py) still stops every descendant while lockrun lives.

Moving a process between cgroups waits for an RCU grace period (one to two milliseconds on
this project's machines, more on large ones, and it holds up every fork on the host meanwhile),
so the move happens beside the run, not in front of the exec: an :class:`Adopter` thread, which
the supervisor starts once the command has run for ``leftovers.ADOPT_AFTER`` (10 ms: a command
that ends sooner never pays for it), makes the cgroup, moves the command's process, and then
whatever it forked before its move landed, until a walk of lockrun's tree finds nobody outside
(what is forked after a process' move is born inside). A lockrun SIGKILLed within that first
moment (about ten milliseconds and a grace period) can leave behind what its command forked
outside its process group in it.

A lockrun that dies with its watchdog (both SIGKILLed; a container whose PID 1 was lockrun, where
the kernel kills the whole PID namespace at once) leaves its emptied cgroup behind. So each run's
cgroup is held with a shared flock on its directory for as long as lockrun lives, and a run that
makes its own cgroup then sweeps its siblings (:func:`sweep`, beside the run, after the moves):
a ``lockrun-*`` cgroup is removed, with rmdir only, when nobody holds its flock (its lockrun is
gone, in whatever PID namespace it ran), it has no process (``populated 0``) and no cgroup below
it (rmdir refuses otherwise), and it was made more than SWEEP_AFTER ago (a lockrun takes its flock
only just after making its cgroup: a new one may not hold it yet). The listing is bounded.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterable

from lockrun.run import descendants

#: A bound on the adopter's walks: each one moves every process it finds outside the cgroup.
ADOPT_ROUNDS = 100

CGROUP_PREFIX = "lockrun-"
#: A sibling's cgroup younger than this is never swept: its lockrun may be about to fill it.
SWEEP_AFTER = 5.0
#: How many entries of lockrun's own cgroup one sweep looks at, and how many it may remove.
SWEEP_LISTING = 512
SWEEP_REMOVALS = 16
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _unescape(field: str) -> str:
    """A path from /proc/self/mountinfo, where space, tab, newline and backslash are octal escapes."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def own_cgroup() -> tuple[str, str] | None:
    """lockrun's own cgroup v2: its directory and its path as /proc/PID/cgroup names it, or None
    where it cannot be found."""
    try:
        relative = _own_relative()
        if relative is None or not relative.startswith("/") or relative.endswith(" (deleted)"):
            return None
        return _under_its_mount(relative)
    except OSError:
        return None


def _own_relative() -> str | None:
    """lockrun's cgroup v2 path, as /proc/self/cgroup names it (its ``0::`` line)."""
    relative = None
    with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("0::"):
                relative = line[3:].rstrip("\n")
    return relative


def _under_its_mount(relative: str) -> tuple[str, str] | None:
    """The directory of the cgroup ``relative`` under the cgroup2 mount that holds it, and ``relative``."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            mount = _cgroup2_mount(line.split())
            if mount is None:
                continue
            root, mount_point = mount
            if relative == root or relative.startswith(root + "/") or not root:
                return mount_point.rstrip("/") + relative[len(root):], relative
    return None


def _cgroup2_mount(fields: list[str]) -> tuple[str, str] | None:
    """A mountinfo line's root and mount point if it mounts cgroup2 (the type follows the "-")."""
    try:
        fstype = fields[fields.index("-") + 1]
    except (ValueError, IndexError):
        return None
    if fstype != "cgroup2" or len(fields) < 5:
        return None
    return _unescape(fields[3]).rstrip("/"), _unescape(fields[4])


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class RunCgroup:
    def __init__(self, path: str, relative: str, held: int | None = None) -> None:
        self.path = path
        self.relative = relative  # how /proc/PID/cgroup names it
        self._held = held  # the directory, flocked (shared) while lockrun lives: see sweep()

    @classmethod
    def create(cls) -> RunCgroup | None:
        """A new, empty cgroup below lockrun's own, or None where lockrun may not make one."""
        own = own_cgroup()
        if own is None or not os.path.isfile(os.path.join(own[0], "cgroup.procs")):
            return None
        name = f"{CGROUP_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
        path = os.path.join(own[0], name)
        try:
            os.mkdir(path, 0o700)
        except OSError:  # EACCES, EROFS, EPERM, ENOSPC (cgroup.max.descendants): no cgroup, silently
            return None
        cgroup = cls(path, own[1].rstrip("/") + "/" + name, _hold(path))
        if not os.path.exists(os.path.join(path, "cgroup.kill")):  # before Linux 5.14: nothing to kill it whole
            cgroup.remove()
            return None
        return cgroup

    def adopt(self, pid: int) -> bool:
        """Move ``pid`` into this cgroup; False if the kernel refused (or it is gone)."""
        try:
            _write(os.path.join(self.path, "cgroup.procs"), str(pid))
        except OSError:
            return False
        return True

    def holds(self, pid: int) -> bool:
        """True if ``pid`` is in this cgroup (or a cgroup below it)."""
        try:
            with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("0::"):
                        path = line[3:].rstrip("\n")
                        return path == self.relative or path.startswith(self.relative + "/")
        except OSError:
            return False
        return False

    def kill(self) -> bool:
        """SIGKILL every process in the cgroup, atomically with respect to forks."""
        try:
            _write(os.path.join(self.path, "cgroup.kill"), "1")
        except OSError:
            return False
        return True

    def populated(self) -> bool:
        """True while a live process is in the cgroup or below it."""
        try:
            with open(os.path.join(self.path, "cgroup.events"), encoding="ascii", errors="replace") as f:
                return any(line.strip() == "populated 1" for line in f)
        except OSError:
            return False

    def remove(self, wait: float = 1.0) -> bool:
        """Remove the (empty) cgroup, and any the command made below it (a lockrun run by the
        command makes its own there); the kernel may take a moment after the last process exited."""
        deadline = time.monotonic() + wait
        delay = 0.001
        try:
            while True:
                try:
                    _remove_children(self.path)
                    os.rmdir(self.path)
                    return True
                except FileNotFoundError:
                    return True
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                        return False
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        finally:
            held, self._held = self._held, None
            if held is not None:
                os.close(held)

    def sweep(self) -> list[str]:
        """Remove the empty cgroups that dead lockruns left beside this one (see the module's
        docstring); the names removed."""
        return sweep(os.path.dirname(self.path), os.path.basename(self.path))


def _hold(path: str) -> int | None:
    """The cgroup directory at ``path``, open and flocked (shared): None where it cannot be."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def sweep(parent: str, own: str, now: float | None = None) -> list[str]:
    """rmdir the ``lockrun-*`` cgroups in ``parent`` (but ``own``) whose lockrun is gone: nobody
    holds their flock, no process is in them, none is below them, made more than SWEEP_AFTER ago."""
    removed: list[str] = []
    now = time.time() if now is None else now
    for name in _sweep_candidates(parent, own):
        if len(removed) >= SWEEP_REMOVALS:
            break
        if _is_leftover(os.path.join(parent, name), now) and _rmdir(os.path.join(parent, name)):
            removed.append(name)
    return removed


def _sweep_candidates(parent: str, own: str) -> list[str]:
    """The first SWEEP_LISTING ``lockrun-*`` directories in ``parent``, ``own`` aside."""
    try:
        with os.scandir(parent) as entries:
            return [entry.name for _, entry in zip(range(SWEEP_LISTING), entries, strict=False)
                    if entry.name.startswith(CGROUP_PREFIX) and entry.name != own
                    and entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _rmdir(path: str) -> bool:
    try:
        os.rmdir(path)  # refused (EBUSY) if a process came meanwhile
    except OSError:
        return False
    return True


def _is_leftover(path: str, now: float) -> bool:
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return False
    try:
        if now - os.fstat(fd).st_ctime < SWEEP_AFTER:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held shared by a live lockrun
        except OSError:
            return False
        events = os.open("cgroup.events", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        try:
            text = os.read(events, 4096).decode("ascii", "replace")
        finally:
            os.close(events)
        return "populated 0" in text.splitlines()
    except OSError:
        return False
    finally:
        os.close(fd)


def _remove_children(path: str) -> None:
    """rmdir the cgroups below ``path``, deepest first (a cgroup directory holds only files otherwise)."""
    with os.scandir(path) as entries:
        below = [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
    for child in below:
        _remove_children(child)
        os.rmdir(child)


class Adopter:
    """The run's cgroup, made and filled beside the run, in a thread of its own.

    It makes the cgroup, tells ``on_created`` (the watchdog), moves the command's process
    ``first``, then walks lockrun's tree (``root``, the subreaper: every descendant is in it,
    leaving out ``skip``, the watchdog) and moves what it finds outside, until a walk finds
    nobody. Each process is checked to be the one seen (its start time) right before it is moved,
    so that a pid reused meanwhile is left alone. :meth:`stop` ends the moves (the command is
    being reaped); :meth:`close` also removes the cgroup.
    """

    def __init__(self, root: int, first: int, skip: Callable[[], Iterable[int | None]],
                 on_created: Callable[[str], None] = lambda path: None) -> None:
        self._root = root
        self._first = first
        self._skip = skip
        self._on_created = on_created
        self.cgroup: RunCgroup | None = None
        self._lock = threading.Lock()  # the cgroup is made, or removed, under it: never both
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lockrun-cgroup", daemon=True)

    def current(self) -> RunCgroup | None:
        return self.cgroup

    def start(self) -> None:
        try:
            self._thread.start()
        except RuntimeError:  # no thread to be had: the run goes on without a cgroup, as where there is none
            self._stop.set()

    def stop(self) -> None:
        """No more moves from now on (the command is being reaped: its pid may be reused)."""
        self._stop.set()

    def close(self) -> None:
        """Stop, and remove the cgroup if it was made (everything in it is gone by now)."""
        with self._lock:
            self._stop.set()
            cgroup, self.cgroup = self.cgroup, None
        if cgroup is not None:
            cgroup.remove()

    def _move(self, cgroup: RunCgroup, proc: descendants.Proc) -> bool:
        now = descendants.stat(proc.pid)
        if self._stop.is_set() or now is None or now.start != proc.start:
            return False
        return cgroup.adopt(proc.pid)

    def _run(self) -> None:
        first = descendants.stat(self._first)
        with self._lock:
            if self._stop.is_set() or first is None:
                return
            cgroup = RunCgroup.create()
            if cgroup is None:
                return
            self.cgroup = cgroup
            self._on_created(cgroup.path)
        if self._move(cgroup, first):  # else refused (or already over): an empty cgroup, removed at the end
            self._adopt_the_rest(cgroup)
        if not self._stop.is_set():
            cgroup.sweep()  # what dead lockruns left beside it (their cgroups are no use to anyone)

    def _adopt_the_rest(self, cgroup: RunCgroup) -> None:
        for _ in range(ADOPT_ROUNDS):
            outside = [p for p in descendants.snapshot(self._root, self._skip())
                       if p.state != "Z" and not cgroup.holds(p.pid)]
            if not outside or self._stop.is_set():
                return
            for proc in outside:
                self._move(cgroup, proc)
