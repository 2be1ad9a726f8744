"""The local backend: locks across the processes of this host, in the state directory.

Each lock is a POSIX record lock (``fcntl(F_SETLK)``) on ``locks/<name>.lock``.
The kernel drops it when its holder dies, however it dies, so a crashed holder
cannot leave a stuck lock and there are no zombies. POSIX locks (unlike
``flock``) are not inherited across fork or exec: the command never holds the
lock, and ``F_GETLK`` tells ``status`` who holds it without taking it.

Beside it, ``locks/<name>.json`` (replaced atomically) keeps the holder's
description and the fencing counter, which survives the holder. ``unlock
--force`` unlinks the ``.lock`` file; the holder's keeper notices at its next
renewal that the file at the path is no longer the one it locked.

Everything here is one process's view of one file system: NFS and other
network file systems are not supported for the state directory.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import stat
import struct
import time
from pathlib import Path
from urllib.parse import quote, unquote

from lockrun.backends import LOST, PREEMPTED, RENEWED, Duplicate, FleetRecord, Holder, Lease, OnceKey
from lockrun.clock import utc_now_iso
from lockrun.errors import BackendUnavailable, ForeignData, SlotsMismatch
from lockrun.safefs import UnsafePath, open_regular, private_dir, read_small, write_atomically

_FLOCK = "hhqqi4x"  # struct flock on 64-bit Linux: type, whence, start, len, pid (+ padding)
LOCK_SUFFIX = ".lock"
ACQUIRE_ATTEMPTS = 20  # retries when an unlock --force swaps the file under us
# The longest file-name stem: with "~slot9999", ".preempt" and a ".NAME.PID.tmp" around it, a
# file name stays well under the 255 bytes a Linux file system allows.
MAX_STEM = 200
HASHED = "~h"  # a stem that is a hash of a long name ("~" is never part of a name or its quoted form)


def _file_name(name: str) -> str:
    """A name (or --once key) as one file name: quoted, so "/" and ":" never become path
    separators, or, when quoting makes it too long for a file name, a hash of it (the
    holder's description then carries the name, for ``status``)."""
    quoted = quote(name, safe="")
    if len(quoted) <= MAX_STEM:
        return quoted
    return HASHED + hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()


def _lock_holder_pid(fd: int) -> int | None:
    """The pid holding a write lock on ``fd``'s file, or None when it is free."""
    request = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    reply = fcntl.fcntl(fd, fcntl.F_GETLK, request)
    lock_type, _, _, _, pid = struct.unpack(_FLOCK, reply)
    return None if lock_type == fcntl.F_UNLCK else pid


def _open_and_try_lock(path: Path, name: str) -> tuple[int, bool]:
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


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.lstat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _write_atomically(path: Path, data: bytes, durable: bool = False) -> None:
    write_atomically(path, data, durable=durable)


def _finite(value) -> float | None:
    """A finite number from a description's field (which may hold anything), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


class LocalBackend:
    name = "local"

    def __init__(self, state_dir) -> None:
        if state_dir is None:
            raise BackendUnavailable("the local backend needs a state directory")
        self.state_dir = Path(state_dir)
        self.locks_dir = self.state_dir / "locks"
        self.once_dir = self.state_dir / "once"
        self._held: dict[str, int] = {}  # token -> locked descriptor
        self._slot_of: dict[str, int] = {}  # token -> slot index, for --slots leases

    # -- paths ----------------------------------------------------------------------------

    def _ready(self) -> None:
        """The state directory and its locks directory exist, are ours and are private."""
        try:
            private_dir(self.state_dir, "the state directory")
            private_dir(self.locks_dir, "the local lock directory")
        except UnsafePath as exc:
            raise BackendUnavailable(f"{exc} (set LOCKRUN_STATE_DIR, or configure a Redis URL)") from None

    def _stem(self, name: str, slot: int | None) -> str:
        # "~" never occurs in a name (nor in its quoted form), so slot files cannot collide.
        return _file_name(name) + (f"~slot{slot}" if slot is not None else "")

    def _lock_path(self, name: str, slot: int | None = None) -> Path:
        return self.locks_dir / (self._stem(name, slot) + LOCK_SUFFIX)

    def _info_path(self, name: str, slot: int | None = None) -> Path:
        return self.locks_dir / (self._stem(name, slot) + ".json")

    def _slots_meta_path(self, name: str) -> Path:
        return self.locks_dir / (_file_name(name) + "~slots")

    def _preempt_path(self, name: str) -> Path:
        return self.locks_dir / (_file_name(name) + ".preempt")

    def _done_path(self, name: str, key: str) -> Path:
        return self.once_dir / _file_name(name) / _file_name(key)

    def _read_info(self, name: str, slot: int | None = None) -> dict:
        """The holder's description; {} when there is none or it is not a JSON object."""
        return self._read_info_at(self._info_path(name, slot))

    # -- lease operations -------------------------------------------------------------------

    def acquire(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None = None,
        slots: int = 1, last_try: bool = True,
    ) -> Lease | Holder | Duplicate:
        self._ready()
        if slots > 1:
            return self._acquire_slot(name, token, ttl, info, once, slots)
        held_slots = self._held_slots(name)
        if held_slots:
            raise SlotsMismatch(name, self._slots_meta(name) or len(held_slots), 1)
        path = self._lock_path(name)
        sent_at = time.monotonic()
        for _ in range(ACQUIRE_ATTEMPTS):
            fd, locked = _open_and_try_lock(path, name)
            if not locked:
                holder = self._holder(name, fd)
                os.close(fd)
                if holder is None:
                    continue  # released between our try and our look: try again
                return holder
            if not _same_file(fd, path):
                os.close(fd)  # unlinked by unlock --force after we opened it: not the lock any more
                continue
            previous = self._read_info(name)
            cooling = self._cooling(name, previous)
            if cooling is not None:
                os.close(fd)  # the last run's --min-hold is not over: busy, like in Redis
                return cooling
            if once is not None and self._is_done(name, once.key):
                os.close(fd)
                return Duplicate(name=name, key=once.key)
            try:
                self._preempt_path(name).unlink()  # a request meant for the previous holder
            except FileNotFoundError:
                pass
            fence = self._stored_fence(previous) + 1
            # No cooling_until: a fresh description. The name, for status when the file name is a hash.
            record = {**info, "name": name, "fencing_token": fence}
            try:
                # Durable: after a crash the fence must not go back and repeat.
                _write_atomically(self._info_path(name), json.dumps(record).encode(), durable=True)
            except OSError as exc:
                os.close(fd)
                raise BackendUnavailable(f"cannot write to {self.locks_dir}: {exc.strerror}") from None
            self._held[token] = fd
            return Lease(name=name, token=token, fencing_token=fence, ttl=ttl, sent_at=sent_at, once=once)
        raise BackendUnavailable(f"the lock file {path} kept changing under us; is something deleting it?")

    # -- --slots N: N lock files, one kernel lock each ------------------------------------------

    @staticmethod
    def _stored_fence(record: dict) -> int:
        """The fence counter a description carries, or 0 when it carries none that makes sense."""
        fence = record.get("fencing_token")
        return fence if isinstance(fence, int) and not isinstance(fence, bool) and 0 <= fence < 1 << 62 else 0

    def _slots_meta(self, name: str) -> int | None:
        raw = (read_small(self._slots_meta_path(name), 32) or b"").strip()
        return int(raw) if raw.isdigit() and len(raw) <= 6 else None

    def _held_slots(self, name: str) -> list[int]:
        """Indexes of the slot files of ``name`` that some process holds now."""
        prefix = _file_name(name) + "~slot"
        held = []
        try:
            entries = [p.name for p in self.locks_dir.iterdir()]
        except OSError:
            return []
        for entry in entries:
            if entry.startswith(prefix) and entry.endswith(LOCK_SUFFIX):
                index = entry[len(prefix) : -len(LOCK_SUFFIX)]
                if index.isdigit() and self._locked_by_other(self.locks_dir / entry):
                    held.append(int(index))
        return sorted(held)

    def _locked_by_other(self, path: Path) -> bool:
        try:
            fd = open_regular(path, os.O_RDONLY)
        except (OSError, UnsafePath):
            return False
        try:
            return _lock_holder_pid(fd) is not None
        finally:
            os.close(fd)

    def _next_fence(self, name: str) -> int:
        """One fence counter for all slots of a name, incremented under its own short flock."""
        path = self.locks_dir / (_file_name(name) + "~fence")
        fd = open_regular(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            current = int(raw) if raw.isdigit() and len(raw) < 19 else 0
            fence = max(current, self._stored_fence(self._read_info(name))) + 1
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(fence).encode(), 0)
            os.fsync(fd)  # after a crash the fence must not go back and repeat
            return fence
        finally:
            os.close(fd)

    def _acquire_slot(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None, slots: int
    ) -> Lease | Holder | Duplicate:
        if self._locked_by_other(self._lock_path(name)):
            raise SlotsMismatch(name, 1, slots)
        stored = self._slots_meta(name)
        if stored is not None and stored != slots and self._held_slots(name):
            raise SlotsMismatch(name, stored, slots)
        sent_at = time.monotonic()
        busy: Holder | None = None
        for slot in range(slots):
            path = self._lock_path(name, slot)
            fd, locked = _open_and_try_lock(path, name)
            if not locked:
                busy = busy or self._holder(name, fd, slot)
                os.close(fd)
                continue
            if not _same_file(fd, path):
                os.close(fd)
                continue
            if once is not None and self._is_done(name, once.key):
                os.close(fd)
                return Duplicate(name=name, key=once.key)
            try:
                _write_atomically(self._slots_meta_path(name), str(slots).encode())
                fence = self._next_fence(name)
                record = {**info, "name": name, "fencing_token": fence}
                _write_atomically(self._info_path(name, slot), json.dumps(record).encode())
            except UnsafePath as exc:
                os.close(fd)
                raise ForeignData(f"cannot use the local lock files of {name!r}: {exc}") from None
            except OSError as exc:
                os.close(fd)
                raise BackendUnavailable(f"cannot write to {self.locks_dir}: {exc.strerror}") from None
            self._held[token] = fd
            self._slot_of[token] = slot
            return Lease(name=name, token=token, fencing_token=fence, ttl=ttl, sent_at=sent_at, once=once,
                         slots=slots)
        return busy or Holder(name=name, slotted=True)

    def renew(self, lease: Lease, heartbeat_at: str, child_pid: int | None) -> str:
        fd = self._held.get(lease.token)
        slot = self._slot_of.get(lease.token)
        if fd is None or not _same_file(fd, self._lock_path(lease.name, slot)):
            return LOST  # unlock --force removed our file: the lock is no longer ours
        record = self._read_info(lease.name, slot)
        if record.get("token") == lease.token:
            record.update(heartbeat_at=heartbeat_at, child_pid=str(child_pid or ""))
            try:
                _write_atomically(self._info_path(lease.name, slot), json.dumps(record).encode())
            except OSError:
                pass  # the heartbeat is for people; the kernel lock is what holds
        return PREEMPTED if slot is None and self._preempt_path(lease.name).exists() else RENEWED

    def release(
        self, lease: Lease, succeeded: bool = False, hold_s: float = 0.0, hold_until: str = "",
        record: FleetRecord | None = None,
    ) -> bool:
        # ``record`` is for a shared backend: here the ledger is this host's whole memory.
        if succeeded and lease.once is not None:
            self._mark_done(lease.name, lease.once)  # before the lock goes: no rerun can slip in between
        return self._let_go(lease.name, lease.token, hold_s, hold_until)

    def release_token(self, name: str, token: str, slots: int = 1) -> bool:
        # The slot, if any, is known by the token: ``slots`` is for a backend that must name it.
        return self._let_go(name, token)

    def _let_go(self, name: str, token: str, hold_s: float = 0.0, hold_until: str = "") -> bool:
        """Close the descriptor that holds the kernel lock of ``token`` (after a --min-hold
        deadline is written, with ``hold_s``). False: the lock file is no longer ours."""
        fd = self._held.get(token)
        if fd is None:
            return False
        slot = self._slot_of.pop(token, None)
        ours = _same_file(fd, self._lock_path(name, slot))
        if ours and hold_s > 0:
            # A kernel lock cannot outlive us: --min-hold is a deadline in the description,
            # which every acquire honours, written while we still hold the lock.
            described = self._read_info(name)
            described.update(cooling_until=hold_until, cooling_until_epoch=time.time() + hold_s, child_pid="")
            try:
                _write_atomically(self._info_path(name), json.dumps(described).encode(), durable=True)
            except OSError as exc:
                raise BackendUnavailable(f"cannot record --min-hold in {self.locks_dir}: {exc.strerror}") from None
        del self._held[token]
        os.close(fd)  # closing drops the POSIX lock
        return ours

    def preempt(self, name: str, requester: str, ttl: float) -> bool:
        self._ready()
        if not self._locked_by_other(self._lock_path(name)):
            return False
        try:
            _write_atomically(self._preempt_path(name), requester.encode())
        except OSError as exc:
            raise BackendUnavailable(f"cannot write to {self.locks_dir}: {exc.strerror}") from None
        return True

    def clear(self, name: str, token: str, record: FleetRecord | None = None) -> bool:
        """``unlock``: end the inspected holder's --min-hold, or (``--force``) remove the
        lock file if that holder still holds it. The holder is found again the way
        ``status`` found it, so an empty ``token`` stands for one whose description names
        no usable token (a malformed one)."""
        for slot in [None, *self._held_slots(name)]:
            path = self._lock_path(name, slot)
            try:
                fd = open_regular(path, os.O_RDONLY)
            except (OSError, UnsafePath):
                continue
            try:
                holder = self._holder(name, fd, slot)
            finally:
                os.close(fd)
            if holder is None or (holder.token or "") != (token or ""):
                continue
            if holder.cooling_until:  # a finished run's --min-hold: nothing holds the kernel lock
                info = self._read_info(name)
                info.pop("cooling_until", None)
                info.pop("cooling_until_epoch", None)
                try:
                    _write_atomically(self._info_path(name), json.dumps(info).encode())
                except OSError as exc:
                    raise BackendUnavailable(f"cannot write to {self.locks_dir}: {exc.strerror}") from None
                return True
            try:
                os.unlink(path)
            except FileNotFoundError:
                return False
            return True
        return False

    def clear_foreign(self, name: str) -> bool:
        """``unlock`` of something that is not a lock file (a link, a FIFO, a directory) at the
        lock's path: no lockrun run can hold it. Removed without following it."""
        path = self._lock_path(name)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise BackendUnavailable(f"cannot inspect {path}: {exc.strerror}") from None
        if stat.S_ISREG(mode):
            return False  # a lock file after all: cleared the ordinary way, never here
        try:
            os.rmdir(path) if stat.S_ISDIR(mode) else os.unlink(path)
        except OSError as exc:
            raise BackendUnavailable(f"cannot remove {path}: {exc.strerror}") from None
        return True

    def wait_for_release(self, name: str, timeout: float) -> None:
        """Local waiters poll: a kernel lock has no wake-up call. 5 ms keeps hand-over quick."""
        time.sleep(max(0.0, min(timeout, 0.005)))

    # -- --once -------------------------------------------------------------------------------

    def _is_done(self, name: str, key: str) -> bool:
        path = self._done_path(name, key)
        words = (read_small(path, 256) or b"").split()
        expires = _finite(words[0].decode("ascii", "replace")) if words else None
        if expires is None:
            return False
        if expires > time.time():
            return True
        try:
            path.unlink()
        except OSError:
            pass
        return False

    def _mark_done(self, name: str, once: OnceKey) -> None:
        path = self._done_path(name, once.key)
        try:
            private_dir(self.once_dir, "the --once directory")
            private_dir(path.parent, "the --once directory")
            expires = time.time() + once.remember_s
            _write_atomically(path, f"{expires!r} {utc_now_iso()}\n".encode(), durable=True)
        except (OSError, UnsafePath) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise BackendUnavailable(f"cannot mark --once key {once.key!r} done in {path.parent}: {reason}") from None

    # -- inspection -------------------------------------------------------------------------------

    def _cooling(self, name: str, info: dict) -> Holder | None:
        """The finished holder whose --min-hold still runs, or None."""
        left = (_finite(info.get("cooling_until_epoch")) or 0.0) - time.time()
        if left <= 0:
            return None
        return Holder.from_fields(name, info, ttl_remaining_s=round(left, 3))

    def _holder(self, name: str, fd: int, slot: int | None = None) -> Holder | None:
        # Never call this for a lock this process holds: closing any descriptor of a
        # file drops the process's POSIX lock on it.
        pid = _lock_holder_pid(fd)
        info = self._read_info(name, slot)
        if pid is None:
            return self._cooling(name, info) if slot is None else None
        if str(info.get("pid")) != str(pid):
            info = {}  # the description is the previous holder's: the new one has not written yet
        # A kernel lock does not expire (no TTL left), and cooling_until means nothing while it is held.
        info = {key: value for key, value in info.items() if key != "cooling_until"}
        return Holder.from_fields(name, info, pid=pid, slotted=slot is not None)

    def fleet_record(self) -> None:
        """No fleet record on this host-only backend: the ledger is its whole memory."""
        return None

    def lock_names(self) -> list[str]:
        return [h.name for h in self.holders()]

    def _units_on_disk(self) -> list[tuple[str, int | None, str | None]]:
        """(name, slot, problem) of every lock file in the locks directory."""
        try:
            files = sorted(entry.name for entry in os.scandir(self.locks_dir) if entry.name.endswith(LOCK_SUFFIX))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise BackendUnavailable(f"cannot read the local lock directory {self.locks_dir}: {exc.strerror}") from None
        units = []
        for file in files:
            stem = file[: -len(LOCK_SUFFIX)]
            base, _, slot_text = stem.partition("~slot")
            slot = int(slot_text) if slot_text.isdigit() else None
            if not base.startswith(HASHED):
                units.append((unquote(base), slot, None))
                continue
            # A long name's file is named by its hash; the description says which name it is.
            described = self._read_info_at(self.locks_dir / (stem + ".json")).get("name")
            if isinstance(described, str) and _file_name(described) == base:
                units.append((described, slot, None))
            else:
                units.append((base, slot, f"{file}: its description does not name its lock"))
        return units

    def _read_info_at(self, path: Path) -> dict:
        raw = read_small(path)
        try:
            data = json.loads(raw) if raw else {}
        except (ValueError, RecursionError):
            return {}
        return data if isinstance(data, dict) else {}

    def holders(self, names: list[str] | None = None) -> list[Holder]:
        if names is None:
            units = self._units_on_disk()
        else:
            units = [(name, None, None) for name in names]
            units += [(name, slot, None) for name in names for slot in self._held_slots(name)]
        found = []
        for name, slot, problem in units:
            path = self._lock_path(name, slot) if not name.startswith(HASHED) else (
                self.locks_dir / (name + (f"~slot{slot}" if slot is not None else "") + LOCK_SUFFIX))
            try:
                fd = open_regular(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            except UnsafePath as exc:  # a link, a FIFO...: not a lock file, and nothing lockrun runs holds it
                found.append(Holder.from_fields(name, {}, slotted=slot is not None, foreign=True,
                                                problem=f"{exc}: written by something other than lockrun"))
                continue
            except OSError as exc:
                raise BackendUnavailable(f"cannot read {path}: {exc.strerror}") from None
            try:
                holder = self._holder(name, fd, slot)
            finally:
                os.close(fd)
            if holder is not None:
                if problem:
                    holder = holder._replace(problem="; ".join(filter(None, (problem, holder.problem))))
                found.append(holder)
        return found

    def close(self) -> None:
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()
