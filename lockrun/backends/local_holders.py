"""Who holds a local lock, for ``status``, ``unlock`` and a busy acquire.

The kernel says which process holds a lock file (``F_GETLK``); the description says
who that is, if it is that process's own. A lock file of a long name is named by a hash,
and its description names the lock. Whatever is not a lock file (a link, a FIFO) comes
back as a holder with a ``problem``: one bad file must not hide every other lock.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote

from lockrun.backends import Holder, written_by_others
from lockrun.backends.local_files import HASHED, LOCK_SUFFIX, SLOT_MARK, LockFiles, file_name, lock_holder_pid
from lockrun.backends.local_records import LockRecords, cooling, read_description
from lockrun.errors import BackendUnavailable
from lockrun.safefs import UnsafePath, open_regular


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
        return cooling(name, info) if slot is None else None
    if str(info.get("pid")) != str(pid):
        info = {}  # the description is the previous holder's: the new one has not written yet
    # A kernel lock does not expire (no TTL left), and cooling_until means nothing while it is held.
    info = {key: value for key, value in info.items() if key != "cooling_until"}
    return Holder.from_fields(name, info, pid=pid, slotted=slot is not None)


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
