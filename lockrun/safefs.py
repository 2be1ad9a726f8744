"""Files and directories opened safely: owned by us, written by nobody else, no links followed.

lockrun often runs as root, in directories named by an environment variable. If another
user can write to such a directory, they can plant a symbolic link (``locks/job.lock ->
/etc/shadow``) and have root create or truncate its target. The rules here are the ones
ssh's StrictModes and sudo apply:

- a directory or file lockrun trusts is owned by the user lockrun runs as, or by root,
  and is writable by nobody else (no group or other write bit);
- files in the state directory are opened with ``O_NOFOLLOW`` and must be regular files
  (``O_NONBLOCK`` on open, so a FIFO planted there cannot hang us);
- what lockrun creates is private: directories 0700, files 0600 (the ledger holds the
  commands' output tails).

Every check costs one ``stat`` or ``fstat``; nothing here walks a tree.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

# Group or other may write: the mode bits StrictModes refuses.
WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


class UnsafePath(Exception):
    """A path lockrun will not use: one line saying what is wrong and how to fix it."""


def trusted_owner(uid: int) -> bool:
    """The user lockrun runs as, or root: nobody else may own what lockrun trusts."""
    return uid in (0, os.geteuid())


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def check_owner_and_mode(path: Path | str, st: os.stat_result, what: str) -> None:
    """Refuse ``path`` unless it is owned by us or root and nobody else may write to it."""
    if not trusted_owner(st.st_uid):
        risk = "plant links in it" if stat.S_ISDIR(st.st_mode) else "change it"
        raise UnsafePath(
            f"{what} {path} is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}) or root; refusing it"
            f" (its owner could {risk})"
        )
    if st.st_mode & WRITABLE_BY_OTHERS:
        raise UnsafePath(
            f"{what} {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); refusing it:"
            f" chmod go-w {path}"
        )


def _missing_target(path: Path) -> str | None:
    """Where a dangling symbolic link at ``path`` points, or None if it is not one."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode) and not path.exists():
            return os.readlink(path)
    except OSError:
        return None
    return None


def private_dir(path: Path | str, what: str, create: bool = True) -> Path:
    """``path`` as a directory lockrun may write in: created 0700 if missing, then checked.

    Raises UnsafePath naming the real cause: a file in the way, a dangling link, no
    permission, a full disk, another owner, a group- or world-writable mode.
    """
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        target = _missing_target(path)
        if target is not None:
            raise UnsafePath(f"{what} {path} is a symbolic link to {target}, which does not exist") from None
        if not create:
            raise UnsafePath(f"{what} {path} does not exist") from None
        try:
            path.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            pass  # created meanwhile by another lockrun: checked below
        except OSError as exc:
            blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
            if blocker is not None:
                raise UnsafePath(f"cannot create {what} {path}: {blocker} is a file, not a directory") from None
            raise UnsafePath(f"cannot create {what} {path}: {exc.strerror or exc}") from None
        try:
            st = os.stat(path)
        except OSError as exc:
            raise UnsafePath(f"cannot use {what} {path}: {exc.strerror or exc}") from None
    except NotADirectoryError:
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
        raise UnsafePath(f"cannot use {what} {path}: {blocker} is a file, not a directory") from None
    except OSError as exc:
        raise UnsafePath(f"cannot use {what} {path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{what} {path} is {_kind(st.st_mode)}, not a directory")
    check_owner_and_mode(path, st, what)
    if create and not os.access(path, os.W_OK | os.X_OK):
        if _read_only_fs(path):
            raise UnsafePath(f"{what} {path} is on a read-only file system")
        raise UnsafePath(f"{what} {path} is not writable by uid {os.geteuid()}")
    return path


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def open_regular(path: Path | str, flags: int, mode: int = 0o600) -> int:
    """Open a file in a checked directory without following a link; it must be a regular file.

    ``O_NONBLOCK`` keeps a FIFO from blocking the open; it is cleared again once the
    file is known to be regular. Raises FileNotFoundError as ``os.open`` does, and
    UnsafePath for a link or anything that is not a regular file.
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(f"{path} is a symbolic link; lockrun does not follow links here") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR, errno.ENODEV):
            raise UnsafePath(f"{path} is not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{path} is {_kind(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_small(path: Path | str, limit: int = 1 << 20) -> bytes | None:
    """The first ``limit`` bytes of a regular file, or None if there is none (or it is unsafe)."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except (OSError, UnsafePath):
        return None
    try:
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, min(left, 65536))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def write_atomically(path: Path | str, data: bytes, durable: bool = False, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` in one rename; readers never see half a file.

    The temporary file is created afresh (``O_EXCL``, never through a link) and removed
    again on any failure, so nothing is left behind; the rename replaces a link at
    ``path`` itself rather than writing through it.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a leftover of a crashed process that had our pid
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if mode & ~0o600:
                os.fchmod(fd, mode)  # the umask must not narrow a mode asked for on purpose
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
