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
  commands' output tails);
- every directory *above* one lockrun keeps state in is owned by root or the user and not
  writable by others (a sticky directory owned by root, like /tmp, only as the parent of
  what is ours), or its owner could rename the state directory away mid-run and a second
  run would take the same lock in another directory (see :func:`check_ancestors`);
- lockrun replaces only regular files: a device, FIFO, socket or directory at a path it
  writes is refused and left alone (``--metrics-file /dev/null`` must not turn the device
  into a file; see :func:`write_atomically`).

Every check costs one ``stat``, ``lstat`` or ``fstat``; nothing here walks a tree, and the
walk up to the root is one ``lstat`` per directory, once per path and process.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

# Group or other may write: the mode bits StrictModes refuses.
WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


class UnsafePath(Exception):
    """A path lockrun will not use: one line saying what is wrong and how to fix it."""


class NotRegularFile(UnsafePath, OSError):
    """What lies at a path lockrun would replace is not a regular file (a device, a FIFO, a
    socket, a directory, a link): it is left alone. An OSError as well, so that every writer's
    ``except OSError`` reports it as the one line it is; its text is the whole message."""

    def __init__(self, message: str) -> None:
        OSError.__init__(self, errno.EEXIST, message)

    def __str__(self) -> str:
        return str(self.strerror)


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


#: Links followed on one walk before lockrun gives up (the kernel's own limit is 40).
MAX_LINKS = 40
#: Paths of directories found safe, with every directory above them, in this process: the
#: state directory is opened by the backend and the ledger alike, and walked once.
_SAFE_DIRECTORIES: set[str] = set()


def _absolute(path: Path | str) -> str:
    """``path`` made absolute without resolving anything (``..`` is resolved by the walk)."""
    text = os.fspath(path)
    return text if text.startswith("/") else os.path.join(os.getcwd(), text)


def _parts(text: str) -> list[str]:
    return [part for part in text.split("/") if part not in ("", ".")]


def _check_above(directory: str, st: os.stat_result, path: Path | str, what: str) -> None:
    """A directory on the way to ``path``: nobody but root and us may rename what is in it."""
    if not trusted_owner(st.st_uid):
        raise UnsafePath(
            f"{what} {path} is inside {directory}, which is owned by uid {st.st_uid}, not by you"
            f" (uid {os.geteuid()}) or root; refusing it (its owner could rename it away and put another in its place)"
        )
    sticky_root = bool(st.st_mode & stat.S_ISVTX) and st.st_uid == 0  # like /tmp: others cannot rename ours
    if st.st_mode & WRITABLE_BY_OTHERS and not sticky_root:
        raise UnsafePath(
            f"{what} {path} is inside {directory}, which is writable by group or others"
            f" (mode {stat.S_IMODE(st.st_mode):04o}); refusing it (they could rename it away and put another in its"
            f" place): chmod go-w {directory}"
        )


def check_ancestors(path: Path | str, what: str) -> None:
    """Refuse ``path`` when someone else could replace it from above, as ssh's StrictModes checks
    the directories above a home directory.

    Every directory on the way from ``/`` to ``path``, links followed as the kernel follows them,
    must be owned by root or by the user lockrun runs as and be writable by nobody else; a link on
    the way must be owned by root or us too. A sticky directory owned by root (``/tmp``) passes as
    the parent of what comes next, because that must be ours or root's, and the sticky bit keeps
    everyone else from renaming it. ``path`` itself, and anything missing on the way (lockrun
    creates it, 0700), are for :func:`private_dir` to judge. One ``lstat`` per component.
    """
    current, pending = _first_steps(path, what)
    links = 0
    while pending:
        name = pending.pop(0)
        if name == "..":
            current = os.path.dirname(current) or "/"  # a real directory's parent: checked on the way down
            continue
        candidate = os.path.join(current, name)
        st = _lstat_on_the_way(candidate, path, what)
        if st is None:
            return  # lockrun creates the rest, or private_dir names what is in the way
        if stat.S_ISLNK(st.st_mode):
            links += 1
            target = _link_on_the_way(candidate, st, links, path, what)
            pending = _parts(target) + pending
            if target.startswith("/"):
                current = "/"
            continue
        if not pending or not stat.S_ISDIR(st.st_mode):
            return  # path itself (private_dir checks it), or a file in the way (private_dir says so)
        _check_above(candidate, st, path, what)
        current = candidate


def _first_steps(path: Path | str, what: str) -> tuple[str, list[str]]:
    """Where the walk to ``path`` begins (``/``, checked, or a parent checked before) and its steps."""
    absolute = _absolute(path)
    parent = os.path.dirname(absolute.rstrip("/")) or "/"
    if parent in _SAFE_DIRECTORIES:  # checked before, with all above it: only the last step is new
        return parent, _parts(absolute)[-1:]
    _check_above("/", os.lstat("/"), path, what)
    return "/", _parts(absolute)


def _lstat_on_the_way(candidate: str, path: Path | str, what: str) -> os.stat_result | None:
    """``candidate``'s lstat; None when it is missing (or a file is in the way)."""
    try:
        return os.lstat(candidate)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise UnsafePath(f"cannot use {what} {path}: cannot look at {candidate}: {exc.strerror or exc}") from None


def _link_on_the_way(candidate: str, st: os.stat_result, links: int, path: Path | str, what: str) -> str:
    """Where the link ``candidate`` (the walk's ``links``-th) points, if it is root's or ours."""
    if not trusted_owner(st.st_uid):
        raise UnsafePath(
            f"{what} {path} goes through {candidate}, a symbolic link owned by uid {st.st_uid}, not by you"
            f" (uid {os.geteuid()}) or root; refusing it (its owner could point it elsewhere)"
        )
    if links > MAX_LINKS:
        raise UnsafePath(f"cannot use {what} {path}: too many levels of symbolic links")
    try:
        return os.readlink(candidate)
    except OSError as exc:
        raise UnsafePath(f"cannot use {what} {path}: cannot read the link {candidate}: {exc.strerror}") from None


def _make_dirs(path: Path) -> None:
    """Create ``path`` and whatever is missing above it, each 0700 (``mkdir(parents=True)``
    would give the parents the umask's mode)."""
    missing = []
    here = path
    while not os.path.lexists(here) and here != here.parent:
        missing.append(here)
        here = here.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # created meanwhile by another lockrun: checked by the caller
            os.mkdir(directory, 0o700)


def _missing_target(path: Path) -> str | None:
    """Where a dangling symbolic link at ``path`` points, or None if it is not one."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode) and not path.exists():
            return os.readlink(path)
    except OSError:
        return None
    return None


def private_dir(path: Path | str, what: str, create: bool = True, parent_checked: bool = False) -> Path:
    """``path`` as a directory lockrun may write in: created 0700 if missing, then checked, with
    every directory above it (:func:`check_ancestors`; ``parent_checked``: the caller has just
    checked the directory it lies in).

    Raises UnsafePath naming the real cause: a file in the way, a dangling link, no
    permission, a full disk, another owner, a group- or world-writable mode, here or above.
    """
    path = Path(path)
    if not parent_checked:
        check_ancestors(path, what)
    st = _stat_or_create(path, what, create)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{what} {path} is {_kind(st.st_mode)}, not a directory")
    check_owner_and_mode(path, st, what)
    if create and not os.access(path, os.W_OK | os.X_OK):
        if _read_only_fs(path):
            raise UnsafePath(f"{what} {path} is on a read-only file system")
        raise UnsafePath(f"{what} {path} is not writable by uid {os.geteuid()}")
    _SAFE_DIRECTORIES.add(_absolute(path).rstrip("/") or "/")  # with all above it
    return path


def _stat_or_create(path: Path, what: str, create: bool) -> os.stat_result:
    """What ``path`` is (links followed); when it is missing, created first if ``create``."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        pass
    except NotADirectoryError:
        raise UnsafePath(f"cannot use {what} {path}: {_file_above(path) or path.parent} is a file, not a"
                         " directory") from None
    except OSError as exc:
        raise UnsafePath(f"cannot use {what} {path}: {exc.strerror or exc}") from None
    return _create(path, what, create)


def _create(path: Path, what: str, create: bool) -> os.stat_result:
    """A missing ``path`` created (0700, with what is missing above it), unless a dangling link
    stands there or the caller only reads."""
    target = _missing_target(path)
    if target is not None:
        raise UnsafePath(f"{what} {path} is a symbolic link to {target}, which does not exist")
    if not create:
        raise UnsafePath(f"{what} {path} does not exist")
    try:
        _make_dirs(path)
    except OSError as exc:
        blocker = _file_above(path)
        if blocker is not None:
            raise UnsafePath(f"cannot create {what} {path}: {blocker} is a file, not a directory") from None
        raise UnsafePath(f"cannot create {what} {path}: {exc.strerror or exc}") from None
    try:
        return os.stat(path)
    except OSError as exc:
        raise UnsafePath(f"cannot use {what} {path}: {exc.strerror or exc}") from None


def _file_above(path: Path) -> Path | None:
    """The first directory above ``path`` that is something else (a file in the way), if any."""
    return next((p for p in path.parents if p.exists() and not p.is_dir()), None)


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


def not_replaceable(path: Path | str) -> str | None:
    """Why lockrun must not replace what lies at ``path`` (``"a FIFO"``), or None when it may:
    nothing is there, or a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be looked at ({exc.strerror or exc})"
    return None if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)


def special_file(path: Path | str, directories: bool = True) -> str | None:
    """What a path someone names for lockrun's output holds when no file may ever be written there,
    checked where it is parsed: a device, a FIFO or a socket, or a link to one (``/dev/stdout``),
    and with ``directories`` a directory. None for nothing, a regular file, or anything else (a
    link to a file is refused when it would be replaced: see :func:`write_atomically`)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None  # nothing there yet, or unreadable: said when it is written
    via_link = ""
    if stat.S_ISLNK(st.st_mode):
        try:
            st, via_link = os.stat(path), "a symbolic link to "
        except OSError:
            return None
    if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) or (stat.S_ISDIR(st.st_mode) and not directories):
        return None
    return via_link + _kind(st.st_mode)


def _refuse_unless_replaceable(path: Path, in_state_dir: bool) -> None:
    kind = None if in_state_dir else not_replaceable(path)
    if kind is not None:
        hint = " (name the file it points to)" if kind == "a symbolic link" else ""
        raise NotRegularFile(f"{path} is {kind}, not a regular file; lockrun replaces only regular files"
                             f" and left it alone{hint}")


def write_atomically(
    path: Path | str, data: bytes, durable: bool = False, mode: int = 0o600, in_state_dir: bool = False
) -> None:
    """Replace ``path`` with ``data`` in one rename; readers never see half a file.

    Only a regular file is replaced: a device, FIFO, socket, directory or link at ``path``
    raises NotRegularFile and stays as it was, so that ``--metrics-file /dev/null`` run as root
    never turns the device into a file. ``in_state_dir``: ``path`` is one of lockrun's own files
    in its private state directory, where whatever was planted (a link, a FIFO) is replaced by
    the rename, never opened. The temporary file is created afresh (``O_EXCL``, never through a
    link) and removed again on any failure, so nothing is left behind; a link is never written
    through.
    """
    path = Path(path)
    _refuse_unless_replaceable(path, in_state_dir)
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
        _refuse_unless_replaceable(path, in_state_dir)  # again: the write took time, the rename is not blind
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class DirectoryBusy(OSError):
    """:func:`directory_locked` waited its bound and the directory's lock was still taken."""


@contextlib.contextmanager
def directory_locked(directory: Path | str, wait_s: float) -> Iterator[None]:
    """An exclusive ``flock`` on ``directory`` itself for the block: the writers of one file in it
    (``--metrics-file``) take turns, whoever they run as, and no lock file is left beside it.
    Waits ``wait_s`` at most, then raises DirectoryBusy; a filesystem without flock: no lock."""
    import fcntl
    import time

    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + wait_s
        delay = 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    break  # ENOLCK, EOPNOTSUPP: nothing to take turns with; write as before
                if time.monotonic() >= deadline:
                    raise DirectoryBusy(errno.EWOULDBLOCK, f"its directory stayed locked for {wait_s:g}s",
                                        str(directory)) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        yield
    finally:
        os.close(fd)  # and with it the lock


def write_like_a_new_file(path: Path | str, data: bytes) -> None:
    """Replace ``path`` whole with the permissions a new file would get under the umask (a
    ``timeline --svg`` image is the user's file, not lockrun's private state)."""
    umask = os.umask(0o022)  # the only way to read the umask is to set it
    os.umask(umask)
    write_atomically(path, data, mode=0o666 & ~umask)
