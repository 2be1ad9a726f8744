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
import json
import os
import struct
import time
from pathlib import Path
from urllib.parse import quote, unquote

from lockrun.backends import LOST, PREEMPTED, RENEWED, Duplicate, FleetRecord, Holder, Lease, OnceKey
from lockrun.clock import utc_now_iso
from lockrun.errors import BackendUnavailable, SlotsMismatch

_FLOCK = "hhqqi4x"  # struct flock on 64-bit Linux: type, whence, start, len, pid (+ padding)
LOCK_SUFFIX = ".lock"
ACQUIRE_ATTEMPTS = 20  # retries when an unlock --force swaps the file under us


def _file_name(name: str) -> str:
    return quote(name, safe="")  # "/" and ":" in names must not become path separators


def _lock_holder_pid(fd: int) -> int | None:
    """The pid holding a write lock on ``fd``'s file, or None when it is free."""
    request = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    reply = fcntl.fcntl(fd, fcntl.F_GETLK, request)
    lock_type, _, _, _, pid = struct.unpack(_FLOCK, reply)
    return None if lock_type == fcntl.F_UNLCK else pid


def _open_and_try_lock(path: Path) -> tuple[int, bool]:
    """Open (creating) ``path`` and try its write lock without waiting: (fd, locked)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
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
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _write_atomically(path: Path, data: bytes, durable: bool = False) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


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
        try:
            self.locks_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not os.access(self.locks_dir, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "not writable", str(self.locks_dir))
        except OSError as exc:
            raise BackendUnavailable(
                f"the local lock directory {self.locks_dir} cannot be used: {exc.strerror or exc}"
                " (set LOCKRUN_STATE_DIR, or configure a Redis URL)"
            ) from None

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
        try:
            data = json.loads(self._info_path(name, slot).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

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
            fd, locked = _open_and_try_lock(path)
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
            fence = int(previous.get("fencing_token") or 0) + 1
            record = {**info, "fencing_token": fence}  # no cooling_until: a fresh description
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

    def _slots_meta(self, name: str) -> int | None:
        try:
            return int(self._slots_meta_path(name).read_text(encoding="ascii"))
        except (OSError, ValueError):
            return None

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
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            return _lock_holder_pid(fd) is not None
        finally:
            os.close(fd)

    def _next_fence(self, name: str) -> int:
        """One fence counter for all slots of a name, incremented under its own short flock."""
        path = self.locks_dir / (_file_name(name) + "~fence")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            current = int(raw) if raw.isdigit() else 0
            fence = max(current, int(self._read_info(name).get("fencing_token") or 0)) + 1
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
            fd, locked = _open_and_try_lock(path)
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
                _write_atomically(self._info_path(name, slot), json.dumps({**info, "fencing_token": fence}).encode())
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
        fd = self._held.get(lease.token)
        if fd is None:
            return False
        slot = self._slot_of.pop(lease.token, None)
        ours = _same_file(fd, self._lock_path(lease.name, slot))
        if ours and hold_s > 0:
            # A kernel lock cannot outlive us: --min-hold is a deadline in the description,
            # which every acquire honours, written while we still hold the lock.
            described = self._read_info(lease.name)
            described.update(cooling_until=hold_until, cooling_until_epoch=time.time() + hold_s, child_pid="")
            try:
                _write_atomically(self._info_path(lease.name), json.dumps(described).encode(), durable=True)
            except OSError as exc:
                raise BackendUnavailable(f"cannot record --min-hold in {self.locks_dir}: {exc.strerror}") from None
        del self._held[lease.token]
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
        lock file if that holder still holds it."""
        slot = next((k for k in self._held_slots(name) if self._read_info(name, k).get("token") == token), None)
        path = self._lock_path(name, slot)
        info = self._read_info(name, slot)
        if info.get("token") != token:
            return False
        if slot is None and self._cooling(name, info) is not None:
            info.pop("cooling_until", None)
            info.pop("cooling_until_epoch", None)
            try:
                _write_atomically(self._info_path(name), json.dumps(info).encode())
            except OSError as exc:
                raise BackendUnavailable(f"cannot write to {self.locks_dir}: {exc.strerror}") from None
            return True
        if not self._locked_by_other(path):
            return False
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True

    def wait_for_release(self, name: str, timeout: float) -> None:
        """Local waiters poll: a kernel lock has no wake-up call. 5 ms keeps hand-over quick."""
        time.sleep(max(0.0, min(timeout, 0.005)))

    # -- --once -------------------------------------------------------------------------------

    def _is_done(self, name: str, key: str) -> bool:
        path = self._done_path(name, key)
        try:
            expires = float(path.read_text(encoding="ascii").split()[0])
        except (OSError, ValueError, IndexError):
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
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            expires = time.time() + once.remember_s
            _write_atomically(path, f"{expires!r} {utc_now_iso()}\n".encode(), durable=True)
        except OSError as exc:
            raise BackendUnavailable(
                f"cannot mark --once key {once.key!r} done in {path.parent}: {exc.strerror}"
            ) from None

    # -- inspection -------------------------------------------------------------------------------

    def _cooling(self, name: str, info: dict) -> Holder | None:
        """The finished holder whose --min-hold still runs, or None."""
        try:
            left = float(info.get("cooling_until_epoch") or 0) - time.time()
        except (TypeError, ValueError):
            return None
        if left <= 0:
            return None
        return self._describe(name, info, pid=_int(info.get("pid")), ttl_remaining_s=round(left, 3))

    def _holder(self, name: str, fd: int, slot: int | None = None) -> Holder | None:
        # Never call this for a lock this process holds: closing any descriptor of a
        # file drops the process's POSIX lock on it.
        pid = _lock_holder_pid(fd)
        info = self._read_info(name, slot)
        if pid is None:
            return self._cooling(name, info) if slot is None else None
        if str(info.get("pid")) != str(pid):
            info = {}  # the description is the previous holder's: the new one has not written yet
        holder = self._describe(name, info, pid=pid, ttl_remaining_s=None)  # a kernel lock does not expire
        return holder._replace(slotted=True) if slot is not None else holder

    @staticmethod
    def _describe(name: str, info: dict, pid: int | None, ttl_remaining_s: float | None) -> Holder:
        return Holder(
            name=name,
            token=info.get("token"),
            run_id=info.get("run_id"),
            host=info.get("host"),
            boot_id=info.get("boot_id"),
            pid=pid,
            pid_start=_int(info.get("pid_start")),
            child_pid=_int(info.get("child_pid")),
            command=_command(info.get("command")),
            started_at=info.get("started_at"),
            heartbeat_at=info.get("heartbeat_at"),
            ttl_ms=_int(info.get("ttl_ms")),
            ttl_remaining_s=ttl_remaining_s,
            fencing_token=_int(info.get("fencing_token")),
            cooling_until=info.get("cooling_until") if ttl_remaining_s is not None else None,
        )

    def fleet_record(self) -> None:
        """No fleet record on this host-only backend: the ledger is its whole memory."""
        return None

    def lock_names(self) -> list[str]:
        return [h.name for h in self.holders()]

    def holders(self, names: list[str] | None = None) -> list[Holder]:
        if names is None:
            try:
                files = sorted(p.name for p in self.locks_dir.iterdir() if p.name.endswith(LOCK_SUFFIX))
            except FileNotFoundError:
                return []
            except OSError as exc:
                raise BackendUnavailable(
                    f"cannot read the local lock directory {self.locks_dir}: {exc.strerror}"
                ) from None
            units = []
            for f in files:
                stem = f[: -len(LOCK_SUFFIX)]
                base, _, slot = stem.partition("~slot")
                units.append((unquote(base), int(slot) if slot.isdigit() else None))
        else:
            units = [(name, None) for name in names]
            units += [(name, slot) for name in names for slot in self._held_slots(name)]
        found = []
        for name, slot in units:
            path = self._lock_path(name, slot)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise BackendUnavailable(f"cannot read {path}: {exc.strerror}") from None
            try:
                holder = self._holder(name, fd, slot)
            finally:
                os.close(fd)
            if holder is not None:
                found.append(holder)
        return found

    def close(self) -> None:
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _command(value) -> list[str]:
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return []
    return parsed if isinstance(parsed, list) else []
