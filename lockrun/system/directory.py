"""Facts about a directory lockrun keeps state in, for ``lockrun doctor`` (docs/operating.md
"Checking the setup: lockrun doctor"): who owns it, its mode, the file system it lives on, and
whether someone else could replace it from above. Facts only: ``views/doctor_host.py`` judges them.

One ``stat`` of the directory, one walk up to ``/`` (safefs.check_ancestors, as every run makes
it) and one read of ``/proc/self/mountinfo``; nothing is created or changed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import NamedTuple

from lockrun.system.safefs import UnsafePath, check_ancestors


class DirectoryFacts(NamedTuple):
    """One directory as it is now (``exists`` False: not yet; the first run creates it 0700)."""

    path: str
    what: str  # "the state directory", "the local lock directory"
    exists: bool
    is_dir: bool = False
    uid: int | None = None
    mode: int | None = None  # the permission bits (stat.S_IMODE)
    fs_type: str | None = None  # the file system of the directory (or of its nearest existing parent)
    mount_point: str | None = None
    read_only: bool = False
    above: str | None = None  # why a directory above it is unsafe (safefs.check_ancestors' words)
    unreadable: str | None = None  # why it could not be looked at
    our_uid: int = 0  # the user lockrun runs as


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces, tabs, newlines and backslashes come octal-escaped."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mount_of(path: str, mountinfo: str | None = None) -> tuple[str, str] | None:
    """(mount point, file system type) of the mount that holds ``path`` (already resolved): the
    longest mount point above it in ``/proc/self/mountinfo``; None when that cannot be read."""
    if mountinfo is None:
        mountinfo = _read_mountinfo()
        if mountinfo is None:
            return None
    best: tuple[str, str] | None = None
    for mount in map(_mount, mountinfo.splitlines()):
        if mount is None:
            continue
        point = mount[0]
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        # Later lines are mounted over earlier ones at the same point: the last one wins.
        if inside and (best is None or len(point) >= len(best[0])):
            best = mount
    return best


def _read_mountinfo() -> str | None:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _mount(line: str) -> tuple[str, str] | None:
    """A mountinfo line's mount point and file system type; None for a line that has none."""
    head, sep, tail = line.partition(" - ")
    fields = head.split()
    if not sep or len(fields) < 5 or not tail.split():
        return None
    return _unescape(fields[4]), tail.split()[0]


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def _above(path: Path, what: str) -> str | None:
    """What is wrong with the directories above ``path`` (safefs.check_ancestors), if anything."""
    try:
        check_ancestors(path, what)
    except UnsafePath as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot look at the directories above {os.fspath(path)}: {exc.strerror or exc}"
    return None


def _read_only(where: Path) -> bool:
    try:
        return bool(os.statvfs(where).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def directory_facts(path: Path | str, what: str) -> DirectoryFacts:
    """What ``path`` is now; never raises, never creates it."""
    path = Path(path)
    text = os.fspath(path)
    our = os.geteuid()
    above = _above(path, what)
    where = _nearest_existing(path.absolute())
    mount = mount_of(os.path.realpath(where))
    fs_type, point = (mount[1], mount[0]) if mount else (None, None)
    base = DirectoryFacts(path=text, what=what, exists=False, fs_type=fs_type, mount_point=point,
                          read_only=_read_only(where), above=above, our_uid=our)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return base
    except OSError as exc:
        return base._replace(exists=os.path.lexists(path), unreadable=exc.strerror or str(exc))
    return base._replace(exists=True, is_dir=stat.S_ISDIR(st.st_mode), uid=st.st_uid, mode=stat.S_IMODE(st.st_mode))
