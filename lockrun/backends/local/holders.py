"""Who holds a local lock, for ``status``, ``unlock`` and a busy acquire.

The kernel says which process holds a lock file (``F_GETLK``); the description says
who that is, if it is that process's own. A lock file of a long name is named by a hash,
and its description names the lock. Whatever is not a lock file (a link, a FIFO) comes
back as a holder with a ``problem``: one bad file must not hide every other lock.

``F_GETLK`` gives the holder's pid as our PID namespace sees it: the same number as the
description's when both are in one namespace, another number for a holder in a namespace
below ours (a container, ``unshare --pid``: /proc says which namespace and which pid there),
and 0 for one we cannot see at all (in a namespace beside or above ours). Whatever the
namespace, a process holds the kernel lock: the holder is alive.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote

from lockrun.backends.local.files import HASHED, LOCK_SUFFIX, SLOT_MARK, LockFiles, file_name, lock_holder_pid
from lockrun.backends.local.records import LockRecords, cooling, read_description
from lockrun.backends.values import Holder
from lockrun.core.errors import BackendUnavailable
from lockrun.core.readers import written_by_others
from lockrun.system import host
from lockrun.system.safefs import UnsafePath, open_regular


class Unit(NamedTuple):
    """One lock file: a plain lock, or one slot of a --slots lock."""

    name: str  # the lock's name, or the hashed stem when its description does not name it
    slot: int | None
    problem: str | None = None


def holder_of(records: LockRecords, name: str, fd: int, slot: int | None = None) -> Holder | None:
    """Who holds the lock file open at ``fd`` (or whose --min-hold still runs); None if free.

    Never call this for a lock this process holds: closing any descriptor of a file
    drops the process's POSIX lock on it.
    """
    pid = lock_holder_pid(fd)
    info = records.read(name, slot)
    if pid is None:
        holder = cooling(name, info) if slot is None else None
        return holder.with_age(datetime.now(timezone.utc)) if holder is not None else None
    # A kernel lock does not expire (no TTL left), and cooling_until means nothing while it is held.
    info = {key: value for key, value in info.items() if key != "cooling_until"}
    described = Holder.from_fields(name, info, slotted=slot is not None)
    note = _other_namespace(pid, described)
    if note is not None:  # its description, and its pid as it recorded it (it means nothing here)
        holder = described._replace(note=note)
    elif pid > 0 and str(info.get("pid")) == str(pid):
        holder = Holder.from_fields(name, info, pid=pid, slotted=slot is not None)
    else:  # the description is the previous holder's: the new one has not written yet
        holder = Holder.from_fields(name, {}, pid=pid or None, slotted=slot is not None)
    # One kernel, one clock: the heartbeat's age is read on this host's.
    return holder._replace(kernel_held=True).with_age(datetime.now(timezone.utc))


def _other_namespace(pid: int, described: Holder) -> str | None:
    """A note when the lock's holder (``pid``, as ``F_GETLK`` reports it to us: 0 for a process
    we cannot see) is the writer of ``described`` and runs in another PID namespace; else None."""
    if described.pid_ns is None or described.pid_ns == host.pid_ns() or described.pid is None:
        return None
    where = f"it runs in another PID namespace (pid:[{described.pid_ns}])"
    if pid == 0:
        # The kernel shows us a holder it will not name: one in a namespace we cannot see into,
        # as the description says of its writer. (Nothing more can be checked from here.)
        return f"{where}, which this one cannot see into"
    if host.pid_there(pid) == (described.pid_ns, described.pid):
        return f"{where}; here it is pid {pid}"
    return None


class LocalInspection:
    """The read side of the lock files of one state directory."""

    def __init__(self, files: LockFiles, records: LockRecords) -> None:
        self._files = files
        self._records = records

    def holder_at(self, path: Path, name: str, slot: int | None = None) -> Holder | None:
        """The holder of the lock file at ``path``; None when it is free or not there (or not a file)."""
        try:
            fd = open_regular(path, os.O_RDONLY)
        except (OSError, UnsafePath):
            return None
        try:
            return holder_of(self._records, name, fd, slot)
        finally:
            os.close(fd)

    def units_on_disk(self) -> list[Unit]:
        """Every lock file in the locks directory."""
        locks_dir = self._files.locks_dir
        try:
            files = sorted(entry.name for entry in os.scandir(locks_dir) if entry.name.endswith(LOCK_SUFFIX))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise BackendUnavailable(f"cannot read the local lock directory {locks_dir}: {exc.strerror}") from None
        units = []
        for file in files:
            stem = file[: -len(LOCK_SUFFIX)]
            base, _, slot_text = stem.partition(SLOT_MARK)
            slot = int(slot_text) if slot_text.isdigit() else None
            if not base.startswith(HASHED):
                units.append(Unit(unquote(base), slot))
                continue
            # A long name's file is named by its hash; the description says which name it is.
            described = read_description(locks_dir / (stem + ".json")).get("name")
            if isinstance(described, str) and file_name(described) == base:
                units.append(Unit(described, slot))
            else:
                units.append(Unit(base, slot, f"{file}: its description does not name its lock"))
        return units

    def holders(self, names: list[str] | None = None) -> list[Holder]:
        """Every holder (or those of ``names``): one per held lock file, and cooling locks."""
        if names is None:
            units = self.units_on_disk()
        else:
            units = [Unit(name, None) for name in names]
            units += [Unit(name, slot) for name in names for slot in self._files.held_slots(name)]
        found = []
        for name, slot, problem in units:
            path = self._files.lock_path(name, slot) if not name.startswith(HASHED) else (
                self._files.locks_dir / (LockFiles.stem(name, slot) + LOCK_SUFFIX))
            try:
                fd = open_regular(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            except UnsafePath as exc:  # a link, a FIFO...: not a lock file, and nothing lockrun runs holds it
                found.append(Holder.from_fields(name, {}, slotted=slot is not None, foreign=True,
                                                problem=written_by_others(str(exc))))
                continue
            except OSError as exc:
                raise BackendUnavailable(f"cannot read {path}: {exc.strerror}") from None
            try:
                holder = holder_of(self._records, name, fd, slot)
            finally:
                os.close(fd)
            if holder is not None:
                found.append(holder.with_problem(problem) if problem else holder)
        return found
