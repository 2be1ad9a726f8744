"""``unlock`` on the local backend (docs/operating.md): a finished run's ``--min-hold`` ended,
a held lock's file removed (``--force``; its holder's keeper notices at its next renewal), or
something at a lock's path that is not a lock file removed without following it."""

from __future__ import annotations

import os
import stat

from lockrun.backends.local.files import LockFiles, mode_of
from lockrun.backends.local.holders import LocalInspection
from lockrun.backends.local.records import LockRecords
from lockrun.core.errors import BackendUnavailable


def clear(files: LockFiles, records: LockRecords, inspection: LocalInspection, name: str, token: str) -> bool:
    """End the inspected holder's --min-hold, or (``--force``) remove the lock file if that holder
    still holds it. The holder is found again the way ``status`` found it, so an empty ``token``
    stands for one whose description names no usable token (a malformed one)."""
    for slot in [None, *files.held_slots(name)]:
        path = files.lock_path(name, slot)
        holder = inspection.holder_at(path, name, slot)
        if holder is None or (holder.token or "") != (token or ""):
            continue
        if holder.cooling_until:  # a finished run's --min-hold: nothing holds the kernel lock
            _end_min_hold(files, records, name)
            return True
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True
    return False


def _end_min_hold(files: LockFiles, records: LockRecords, name: str) -> None:
    info = records.read(name)
    info.pop("cooling_until", None)
    info.pop("cooling_until_epoch", None)
    try:
        records.write(name, info)
    except OSError as exc:
        raise files.cannot_write(exc) from None


def clear_foreign(files: LockFiles, name: str) -> bool:
    """Something that is not a lock file (a link, a FIFO, a directory) at the lock's path: no
    lockrun run can hold it. Removed without following it."""
    path = files.lock_path(name)
    mode = mode_of(path)
    if mode is None:
        return False
    if stat.S_ISREG(mode):
        return False  # a lock file after all: cleared the ordinary way, never here
    try:
        os.rmdir(path) if stat.S_ISDIR(mode) else os.unlink(path)
    except OSError as exc:
        raise BackendUnavailable(f"cannot remove {path}: {exc.strerror}") from None
    return True
