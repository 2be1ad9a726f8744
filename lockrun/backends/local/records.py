"""What lies beside a local kernel lock: the holder's description, the fence, --once marks.

``locks/<name>.json`` (replaced atomically) describes the holder and carries the
fencing counter, which survives the holder; a --slots lock keeps one counter for all
its slots in ``<name>~fence``, advanced under a short flock of its own. A finished
run's --min-hold is a deadline in the description (a kernel lock cannot outlive its
holder). ``once/<name>/<key>`` marks a --once key done until it expires. Everything
read here may have been written by someone else: it is parsed defensively.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from lockrun.backends.local.files import LockFiles
from lockrun.backends.values import Holder, OnceKey
from lockrun.core.clock import EPOCH_S_LIMIT, utc_now_iso
from lockrun.core.errors import BackendUnavailable, ForeignData
from lockrun.core.zones import MAX_ZONE_NAME, recorded_zone, shown_record
from lockrun.system.safefs import UnsafePath, open_regular, private_dir, read_small, write_atomically

#: A holder's description as stored: a JSON object (whoever wrote it).
Description = dict[str, Any]


def finite(value: object) -> float | None:
    """A finite number from a description's field (which may hold anything), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def read_description(path: Path) -> Description:
    """The JSON object at ``path``; {} when there is none or it is not a JSON object."""
    raw = read_small(path)
    try:
        data = json.loads(raw) if raw else {}
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def stored_fence(record: Description) -> int:
    """The fence counter a description carries, or 0 when it carries none that makes sense."""
    fence = record.get("fencing_token")
    return fence if isinstance(fence, int) and not isinstance(fence, bool) and 0 <= fence < 1 << 62 else 0


#: The lock description's field that holds when the name's last success started (epoch seconds):
#: --once-every's memory, carried from each description to the next (backend.py).
SUCCESS_FIELD = "last_success_epoch"


def last_success_at(record: Description) -> float | None:
    """When the name's last success started, or None when the description carries no time a
    clock could give there (read back defensively: any JSON may be in the file; a number past
    EPOCH_S_LIMIT is foreign, as the Redis acquire script judges it)."""
    at = finite(record.get(SUCCESS_FIELD))
    return at if at is not None and 0 <= at < EPOCH_S_LIMIT else None


def cooling(name: str, info: Description) -> Holder | None:
    """The finished holder whose --min-hold still runs, or None."""
    left = (finite(info.get("cooling_until_epoch")) or 0.0) - time.time()
    if left <= 0:
        return None
    return Holder.from_fields(name, info, ttl_remaining_s=round(left, 3))


#: ``EXPIRES ZONE\n`` as lockrun writes it: a float's repr, a space, a zone name, a newline.
MAX_ZONE_RECORD = 32 + 1 + MAX_ZONE_NAME + 1


def _zone_record(raw: bytes) -> tuple[float, str] | None:
    """``(expires, zone)`` from a ``~zone`` file lockrun could have written, else None."""
    words = raw.split(b" ")
    if len(words) != 2 or not raw.endswith(b"\n"):
        return None
    expires = finite(words[0].decode("ascii", "replace")) if words[0].isascii() else None
    zone = recorded_zone(words[1][:-1])
    return (expires, zone) if expires is not None and zone is not None else None


def _foreign_zone(name: str, path: Path, what: str) -> ForeignData:
    """A ``~zone`` record lockrun cannot have written (docs/guarantees.md "One zone per name"): exit 69, as Redis."""
    return ForeignData(f"{path} holds data for lock {name!r} that lockrun did not write ({what}); it records the time"
                       f" zone of the name's --once periods: delete it by hand (rm -r '{path}')")


class LockRecords:
    """The descriptions, fence counters and --once marks of the locks in one state directory."""

    def __init__(self, files: LockFiles) -> None:
        self._files = files

    def read(self, name: str, slot: int | None = None) -> Description:
        """The holder's description; {} when there is none or it is not a JSON object."""
        return read_description(self._files.info_path(name, slot))

    def write(self, name: str, record: Description, slot: int | None = None, durable: bool = False) -> None:
        """Replace the description atomically (``durable``: on disk before this returns). Raises OSError."""
        write_atomically(self._files.info_path(name, slot), json.dumps(record).encode(), durable=durable,
                         in_state_dir=True)

    def next_fence(self, name: str) -> int:
        """One fence counter for all slots of a name, incremented under its own short flock."""
        fd = open_regular(self._files.fence_path(name), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            current = int(raw) if raw.isdigit() and len(raw) < 19 else 0
            fence = max(current, stored_fence(self.read(name))) + 1
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(fence).encode(), 0)
            os.fsync(fd)  # after a crash the fence must not go back and repeat
            return fence
        finally:
            os.close(fd)

    def is_done(self, name: str, key: str) -> bool:
        """Whether the --once ``key`` of ``name`` succeeded and is still remembered."""
        path = self._files.done_path(name, key)
        words = (read_small(path, 256) or b"").split()
        expires = finite(words[0].decode("ascii", "replace")) if words else None
        if expires is None:
            return False
        if expires > time.time():
            return True
        with contextlib.suppress(OSError):
            path.unlink()
        return False

    def agree_on_zone(self, name: str, once: OnceKey, keep_s: float) -> str | None:
        """The zone recorded for the --once periods of ``name`` when it is not ``once.zone`` (the run
        is refused); else None, and ``once.zone`` is recorded (or kept) for at least ``keep_s``.

        ``once/<name>/~zone`` holds ``EXPIRES ZONE``, read and written under a flock of its own, so
        that two --slots holders, which hold different kernel locks, cannot both record a zone."""
        return self._zone(name, once, keep_s, check=True)

    def keep_zone(self, name: str, once: OnceKey) -> None:
        """After a --once mark: keep the name's zone (if it is ``once.zone``) at least as long."""
        self._zone(name, once, once.remember_s, check=False)

    def _zone(self, name: str, once: OnceKey, keep_s: float, check: bool) -> str | None:
        path = self._files.zone_path(name)
        try:
            private_dir(self._files.once_dir, "the --once directory")
            private_dir(path.parent, "the --once directory")
        except (OSError, UnsafePath) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise BackendUnavailable(f"cannot record the time zone of {name!r} in {path.parent}: {reason}") from None
        try:
            fd = open_regular(path, os.O_RDWR | os.O_CREAT)
        except UnsafePath as exc:  # a link, a directory, a FIFO: nothing lockrun made
            raise _foreign_zone(name, path, str(exc).replace(f"{path} ", "it ", 1)) from None
        except OSError as exc:
            raise BackendUnavailable(f"cannot record the time zone of {name!r} in {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            raw = os.pread(fd, MAX_ZONE_RECORD + 1, 0)
            expires: float | None = None
            recorded = None
            if size:  # empty: just created (here, or by a run that stopped before it wrote)
                parsed = _zone_record(raw) if size <= MAX_ZONE_RECORD else None
                if parsed is None:
                    if not check:
                        return None  # after the run: leave it for the next acquire to refuse
                    raise _foreign_zone(name, path, f"it holds {shown_record(raw, size)}, not 'EXPIRES ZONE'")
                expires, zone = parsed
                recorded = zone if expires > time.time() else None
            if recorded is not None and recorded != once.zone:
                return recorded if check else None
            if recorded is None and not check:
                return None  # nothing recorded (or another zone's record ran out): nothing to keep
            until = max(expires or 0.0, time.time() + keep_s)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{until!r} {once.zone}\n".encode(), 0)
            os.fsync(fd)
            return None
        except OSError as exc:
            raise BackendUnavailable(f"cannot record the time zone of {name!r} in {path}: {exc.strerror}") from None
        finally:
            os.close(fd)

    def mark_done(self, name: str, once: OnceKey) -> None:
        """Remember that ``once`` succeeded (until its time runs out), durably."""
        path = self._files.done_path(name, once.key)
        try:
            private_dir(self._files.once_dir, "the --once directory")
            private_dir(path.parent, "the --once directory")
            expires = time.time() + once.remember_s
            write_atomically(path, f"{expires!r} {utc_now_iso()}\n".encode(), durable=True, in_state_dir=True)
        except (OSError, UnsafePath) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise BackendUnavailable(f"cannot mark --once key {once.key!r} done in {path.parent}: {reason}") from None
