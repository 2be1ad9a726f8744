"""Where each local lock lives in the state directory, and its kernel lock.

Each lock is a POSIX record lock (``fcntl(F_SETLK)``) on ``locks/<name>.lock``; a
``--slots N`` lock is N such files, ``<name>~slot<i>.lock``. The kernel drops a lock
when its holder dies, however it dies, and ``F_GETLK`` tells who holds one without
taking it. Names become file names here, quoted (or hashed when too long), so that
"/" and ":" never become path separators.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
from pathlib import Path
from urllib.parse import quote

from lockrun.core.errors import BackendUnavailable, ForeignData
from lockrun.system.safefs import UnsafePath, open_regular, private_dir, read_small

_FLOCK = "hhqqi4x"  # struct flock on 64-bit Linux: type, whence, start, len, pid (+ padding)
LOCK_SUFFIX = ".lock"
SLOT_MARK = "~slot"  # "~" never occurs in a name (nor in its quoted form): slot files cannot collide
# The longest file-name stem: with "~slot9999", ".preempt" and a ".NAME.PID.tmp" around it, a
# file name stays well under the 255 bytes a Linux file system allows.
MAX_STEM = 200
HASHED = "~h"  # a stem that is a hash of a long name ("~" is never part of a name or its quoted form)


def file_name(name: str) -> str:
    """A name (or --once key) as one file name: quoted, so "/" and ":" never become path
    separators, or, when quoting makes it too long for a file name, a hash of it (the
    holder's description then carries the name, for ``status``)."""
    quoted = quote(name, safe="")
    if len(quoted) <= MAX_STEM:
        return quoted
    return HASHED + hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()


def lock_holder_pid(fd: int) -> int | None:
    """The pid holding a write lock on ``fd``'s file, or None when it is free."""
    request = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    reply = fcntl.fcntl(fd, fcntl.F_GETLK, request)
    lock_type, _, _, _, pid = struct.unpack(_FLOCK, reply)
    return None if lock_type == fcntl.F_UNLCK else int(pid)


def open_and_try_lock(path: Path, name: str) -> tuple[int, bool]:
    """Open (creating) ``path`` and try its write lock without waiting: (fd, locked)."""
    try:
        fd = open_regular(path, os.O_RDWR | os.O_CREAT)
    except UnsafePath as exc:
        raise ForeignData(f"cannot use the lock file of {name!r}: {exc}; lockrun unlock {name} removes it") from None
    except OSError as exc:
        raise BackendUnavailable(f"cannot open the local lock file {path}: {exc.strerror}") from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            os.close(fd)
            raise BackendUnavailable(f"cannot lock {path}: {exc.strerror}") from None
        return fd, False
    return fd, True


def same_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (unlock --force unlinks a lock file)."""
    try:
        here, there = os.fstat(fd), os.lstat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def locked_by_other(path: Path) -> bool:
    """Whether some process holds the kernel lock of the lock file at ``path``."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except (OSError, UnsafePath):
        return False
    try:
        return lock_holder_pid(fd) is not None
    finally:
        os.close(fd)


def mode_of(path: Path) -> int | None:
    """The mode of what lies at ``path``, not followed (None: nothing there); BackendUnavailable
    when it cannot be looked at."""
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BackendUnavailable(f"cannot inspect {path}: {exc.strerror}") from None


class LockFiles:
    """The paths of every lock's files in one state directory, and which slots are held."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.locks_dir = state_dir / "locks"
        self.once_dir = state_dir / "once"

    def cannot_write(self, exc: OSError, what: str = "write to") -> BackendUnavailable:
        return BackendUnavailable(f"cannot {what} {self.locks_dir}: {exc.strerror}")

    def ready(self) -> None:
        """The state directory and its locks directory exist, are ours and are private."""
        try:
            private_dir(self.state_dir, "the state directory")
            private_dir(self.locks_dir, "the local lock directory", parent_checked=True)
        except UnsafePath as exc:
            raise BackendUnavailable(f"{exc} (set LOCKRUN_STATE_DIR, or configure a Redis URL)") from None

    @staticmethod
    def stem(base: str, slot: int | None) -> str:
        """The file-name stem of a lock unit: ``base`` (a name's file name) and its slot, if any."""
        return base + (f"{SLOT_MARK}{slot}" if slot is not None else "")

    def lock_path(self, name: str, slot: int | None = None) -> Path:
        return self.locks_dir / (self.stem(file_name(name), slot) + LOCK_SUFFIX)

    def info_path(self, name: str, slot: int | None = None) -> Path:
        return self.locks_dir / (self.stem(file_name(name), slot) + ".json")

    def slots_meta_path(self, name: str) -> Path:
        return self.locks_dir / (file_name(name) + "~slots")

    def fence_path(self, name: str) -> Path:
        return self.locks_dir / (file_name(name) + "~fence")

    def preempt_path(self, name: str) -> Path:
        return self.locks_dir / (file_name(name) + ".preempt")

    def done_path(self, name: str, key: str) -> Path:
        return self.once_dir / file_name(name) / file_name(key)

    def zone_path(self, name: str) -> Path:
        """The zone of the name's time-derived --once keys, beside their marks ("~" is in no key's file name)."""
        return self.once_dir / file_name(name) / "~zone"

    def slots_meta(self, name: str) -> int | None:
        """The N of the --slots lock ``name`` as last taken, if it is recorded."""
        raw = (read_small(self.slots_meta_path(name), 32) or b"").strip()
        return int(raw) if raw.isdigit() and len(raw) <= 6 else None

    def held_slots(self, name: str) -> list[int]:
        """Indexes of the slot files of ``name`` that some process holds now."""
        prefix = file_name(name) + SLOT_MARK
        held = []
        try:
            entries = [p.name for p in self.locks_dir.iterdir()]
        except OSError:
            return []
        for entry in entries:
            if entry.startswith(prefix) and entry.endswith(LOCK_SUFFIX):
                index = entry[len(prefix) : -len(LOCK_SUFFIX)]
                if index.isdigit() and locked_by_other(self.locks_dir / entry):
                    held.append(int(index))
        return sorted(held)
