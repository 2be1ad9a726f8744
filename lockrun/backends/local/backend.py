"""The local backend: locks across the processes of this host, in the state directory.

Each lock is a POSIX record lock on ``locks/<name>.lock`` (local_files.py). The kernel
drops it when its holder dies, however it dies, so a crashed holder cannot leave a stuck
lock and there are no zombies. POSIX locks (unlike ``flock``) are not inherited across
fork or exec: the command never holds the lock, and ``F_GETLK`` tells ``status`` who
holds it without taking it (local_holders.py).

Beside it, ``locks/<name>.json`` (replaced atomically) keeps the holder's description
and the fencing counter, which survives the holder (local_records.py). ``unlock
--force`` unlinks the ``.lock`` file; the holder's keeper notices at its next renewal
that the file at the path is no longer the one it locked.

Everything here is one process's view of one file system: NFS and other network file
systems are not supported for the state directory.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from lockrun.backends.local.files import LockFiles, locked_by_other, open_and_try_lock, same_file
from lockrun.backends.local.holders import LocalInspection, holder_of
from lockrun.backends.local.pauses import LocalPauses
from lockrun.backends.local.records import (
    SUCCESS_FIELD,
    Description,
    LockRecords,
    cooling,
    last_success_at,
    stored_fence,
)
from lockrun.backends.local.waiting import MAX_WATCHED, KernelWaits
from lockrun.backends.pause import Paused, PauseRequest
from lockrun.backends.values import (
    LOST,
    PREEMPTED,
    RENEWED,
    Duplicate,
    FleetRecord,
    Holder,
    Lease,
    OnceKey,
    TooSoon,
)
from lockrun.core.clock import parse_iso, utc_now_iso
from lockrun.core.errors import BackendUnavailable, ForeignData, SlotsMismatch, ZoneMismatch
from lockrun.core.printable import printable
from lockrun.core.zones import MAX_ZONE_NAME
from lockrun.system.safefs import UnsafePath, write_atomically

if TYPE_CHECKING:  # what doctor reads: not imported by a run
    from lockrun.backends.audit import BackendAudit

ACQUIRE_ATTEMPTS = 20  # retries when an unlock --force swaps the file under us


class LocalBackend:
    name = "local"

    def __init__(self, state_dir: str | Path | None) -> None:
        if state_dir is None:
            raise BackendUnavailable("the local backend needs a state directory")
        self.state_dir = Path(state_dir)
        self.files = LockFiles(self.state_dir)
        self.records = LockRecords(self.files)
        self.inspection = LocalInspection(self.files, self.records)
        self._pauses = LocalPauses(self.files)
        self._held: dict[str, int] = {}  # token -> locked descriptor
        self._slot_of: dict[str, int] = {}  # token -> slot index, for --slots leases
        self._slots_of_name: dict[str, int] = {}  # name -> the --slots N of its last acquire, for waiting
        self._waits: KernelWaits | None = None  # made by the first wait

    def _cannot_write(self, exc: OSError, what: str = "write to") -> BackendUnavailable:
        return BackendUnavailable(f"cannot {what} {self.files.locks_dir}: {exc.strerror}")

    # -- lease operations -------------------------------------------------------------------

    def acquire(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None = None,
        slots: int = 1, last_try: bool = True, once_every: float | None = None,
    ) -> Lease | Holder | Duplicate | TooSoon | Paused:
        self.files.ready()
        self._slots_of_name[name] = slots
        if slots > 1:
            return self._acquire_slot(name, token, ttl, info, once, slots)
        held_slots = self.files.held_slots(name)
        if held_slots:
            raise SlotsMismatch(name, self.files.slots_meta(name) or len(held_slots), 1)
        path = self.files.lock_path(name)
        sent_at = time.monotonic()
        for _ in range(ACQUIRE_ATTEMPTS):
            fd, locked = open_and_try_lock(path, name)
            if not locked:
                holder = holder_of(self.records, name, fd)
                os.close(fd)
                if holder is None:
                    continue  # released between our try and our look: try again
                return self._paused(name) or holder
            if not same_file(fd, path):
                os.close(fd)  # unlinked by unlock --force after we opened it: not the lock any more
                continue
            previous = self.records.read(name)
            still_cooling = cooling(name, previous)
            if still_cooling is not None:
                os.close(fd)  # the last run's --min-hold is not over: busy, like in Redis
                return self._paused(name) or still_cooling
            pause = self._pauses.of(name)  # under the lock, as the Redis acquire reads it
            if pause is not None and pause.problem is None:
                os.close(fd)
                return pause
            duplicate = self._once_checks(fd, name, once, ttl)
            if duplicate is not None:
                return duplicate
            success_at = last_success_at(previous)
            if once_every and success_at is not None and time.time() - success_at < once_every:
                os.close(fd)  # judged under the lock: no other run of the name is between the two
                return TooSoon(name=name, success_at=success_at, now=time.time())
            with contextlib.suppress(FileNotFoundError):
                self.files.preempt_path(name).unlink()  # a request meant for the previous holder
            fence = stored_fence(previous) + 1
            # No cooling_until: a fresh description. The name, for status when the file name is a hash.
            record: Description = {**info, "name": name, "fencing_token": fence}
            if success_at is not None:  # --once-every's memory goes on from description to description
                record[SUCCESS_FIELD] = success_at
            try:
                self.records.write(name, record, durable=True)  # after a crash the fence must not go back
            except OSError as exc:
                os.close(fd)
                raise self._cannot_write(exc) from None
            self._held[token] = fd
            return Lease(name=name, token=token, fencing_token=fence, ttl=ttl, sent_at=sent_at, once=once,
                         pause_problem=pause.problem if pause is not None else None)
        raise BackendUnavailable(f"the lock file {path} kept changing under us; is something deleting it?")

    def _acquire_slot(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None, slots: int
    ) -> Lease | Holder | Duplicate | Paused:
        """--slots N: N lock files, one kernel lock each; the first free one is ours."""
        if locked_by_other(self.files.lock_path(name)):
            raise SlotsMismatch(name, 1, slots)
        stored = self.files.slots_meta(name)
        if stored is not None and stored != slots and self.files.held_slots(name):
            raise SlotsMismatch(name, stored, slots)
        sent_at = time.monotonic()
        busy: Holder | None = None
        for slot in range(slots):
            path = self.files.lock_path(name, slot)
            fd, locked = open_and_try_lock(path, name)
            if not locked:
                busy = busy or holder_of(self.records, name, fd, slot)
                os.close(fd)
                continue
            if not same_file(fd, path):
                os.close(fd)
                continue
            pause = self._pauses.of(name)
            if pause is not None and pause.problem is None:
                os.close(fd)
                return pause
            duplicate = self._once_checks(fd, name, once, ttl)
            if duplicate is not None:
                return duplicate
            try:
                write_atomically(self.files.slots_meta_path(name), str(slots).encode(), in_state_dir=True)
                fence = self.records.next_fence(name)
                self.records.write(name, {**info, "name": name, "fencing_token": fence}, slot)
            except UnsafePath as exc:
                os.close(fd)
                raise ForeignData(f"cannot use the local lock files of {name!r}: {exc}") from None
            except OSError as exc:
                os.close(fd)
                raise self._cannot_write(exc) from None
            self._held[token] = fd
            self._slot_of[token] = slot
            return Lease(name=name, token=token, fencing_token=fence, ttl=ttl, sent_at=sent_at, once=once,
                         slots=slots, pause_problem=pause.problem if pause is not None else None)
        return self._paused(name) or busy or Holder(name=name, slotted=True)

    def _paused(self, name: str) -> Paused | None:
        """The pause of a busy name (a run of a paused name neither waits nor asks a holder to stop,
        as in Redis); None when it is not paused, or its pause is malformed (then: busy)."""
        pause = self._pauses.of(name)
        return pause if pause is not None and pause.problem is None else None

    def _once_checks(self, fd: int, name: str, once: OnceKey | None, ttl: float) -> Duplicate | None:
        """Under the lock just taken: the name's zone (a mismatch raises) and the --once key's mark
        (done: a Duplicate). Either ends the acquire, and then the lock file ``fd`` is closed."""
        try:
            self._agree_on_zone(name, once, ttl)
        except BaseException:
            os.close(fd)
            raise
        if once is not None and self.records.is_done(name, once.key):
            os.close(fd)
            return Duplicate(name=name, key=once.key)
        return None

    def _agree_on_zone(self, name: str, once: OnceKey | None, ttl: float) -> None:
        """docs/guarantees.md "One zone per name": a time-derived --once key computed in another zone than the
        one recorded for the name is refused (ZoneMismatch); else the zone is recorded."""
        if once is None or not once.zone:
            return
        recorded = self.records.agree_on_zone(name, once, once.remember_s + ttl)
        if recorded is not None:
            raise ZoneMismatch(name, printable(recorded)[:MAX_ZONE_NAME], once.zone, once.zone_from or "this host")

    def renew(self, lease: Lease, heartbeat_at: str, child_pid: int | None) -> str:
        return self._renew(lease, {"heartbeat_at": heartbeat_at, "child_pid": str(child_pid or "")})

    def attempt_over(self, lease: Lease, holder: dict[str, str], record: FleetRecord) -> str:
        # ``record`` is for a shared backend: here the ledger is this host's whole memory.
        return self._renew(lease, {"heartbeat_at": utc_now_iso(), "child_pid": "", **holder})

    def attempt_begins(self, lease: Lease, holder: dict[str, str], start: dict[str, str]) -> str:
        return self._renew(lease, {"heartbeat_at": utc_now_iso(), **holder})

    def _renew(self, lease: Lease, fields: dict[str, str]) -> str:
        """The kernel lock holds as long as we do: a renewal checks it is still ours and updates
        its description with ``fields`` (the heartbeat, and what a --retry pause says)."""
        fd = self._held.get(lease.token)
        slot = self._slot_of.get(lease.token)
        if fd is None or not same_file(fd, self.files.lock_path(lease.name, slot)):
            return LOST  # unlock --force removed our file: the lock is no longer ours
        record = self.records.read(lease.name, slot)
        if record.get("token") == lease.token:
            record.update(fields)
            with contextlib.suppress(OSError):  # the heartbeat is for people; the kernel lock is what holds
                self.records.write(lease.name, record, slot)
        return PREEMPTED if slot is None and self.files.preempt_path(lease.name).exists() else RENEWED

    def release(
        self, lease: Lease, succeeded: bool = False, hold_s: float = 0.0, hold_until: str = "",
        record: FleetRecord | None = None,
    ) -> bool:
        # ``record`` is for a shared backend: here the ledger is this host's whole memory.
        if succeeded and lease.once is not None:
            self.records.mark_done(lease.name, lease.once)  # before the lock goes: no rerun can slip in between
            if lease.once.zone:
                self.records.keep_zone(lease.name, lease.once)
        if succeeded and lease.slots == 1:
            self._note_success(lease)
        return self._let_go(lease.name, lease.token, hold_s, hold_until)

    def _note_success(self, lease: Lease) -> None:
        """For --once-every: when this success started, in the lock's description, before the lock
        goes (the ledger's row is completed after the release: a run in between would not see it)."""
        described = self.records.read(lease.name)
        if described.get("token") != lease.token:
            return  # no longer ours (unlock --force): its description is another run's
        started = parse_iso(described.get("started_at"))
        described[SUCCESS_FIELD] = started.timestamp() if started else time.time()
        with contextlib.suppress(OSError):  # the lock still holds; --once-every then runs once more
            self.records.write(lease.name, described, durable=True)

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
        ours = same_file(fd, self.files.lock_path(name, slot))
        if ours and hold_s > 0:
            # A kernel lock cannot outlive us: --min-hold is a deadline in the description,
            # which every acquire honours, written while we still hold the lock.
            described = self.records.read(name)
            described.update(cooling_until=hold_until, cooling_until_epoch=time.time() + hold_s, child_pid="")
            try:
                self.records.write(name, described, durable=True)
            except OSError as exc:
                raise self._cannot_write(exc, "record --min-hold in") from None
        del self._held[token]
        os.close(fd)  # closing drops the POSIX lock
        return ours

    def preempt(self, name: str, requester: str, ttl: float) -> bool:
        self.files.ready()
        if not locked_by_other(self.files.lock_path(name)):
            return False
        try:
            write_atomically(self.files.preempt_path(name), requester.encode(), in_state_dir=True)
        except OSError as exc:
            raise self._cannot_write(exc) from None
        return True

    def clear(self, name: str, token: str, record: FleetRecord | None = None) -> bool:
        """``unlock``: end the inspected holder's --min-hold, or (``--force``) remove the
        lock file if that holder still holds it. The holder is found again the way
        ``status`` found it, so an empty ``token`` stands for one whose description names
        no usable token (a malformed one)."""
        for slot in [None, *self.files.held_slots(name)]:
            path = self.files.lock_path(name, slot)
            holder = self.inspection.holder_at(path, name, slot)
            if holder is None or (holder.token or "") != (token or ""):
                continue
            if holder.cooling_until:  # a finished run's --min-hold: nothing holds the kernel lock
                info = self.records.read(name)
                info.pop("cooling_until", None)
                info.pop("cooling_until_epoch", None)
                try:
                    self.records.write(name, info)
                except OSError as exc:
                    raise self._cannot_write(exc) from None
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
        path = self.files.lock_path(name)
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

    def wait_for_release(
        self, name: str, timeout: float,
        interruptible: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        """Sleep in the kernel until the holder of ``name`` (under --slots, of one of its first
        slots) lets go, a signal comes or ``timeout`` passes (waiting.py): no polling. A finished
        run's --min-hold holds no kernel lock; its end is a time, slept until. ``interruptible``
        (the Redis backend's way to let a signal end a blocking read) is not needed here: the
        kernel wait already ends on the signal relay's wake-up."""
        if timeout <= 0:
            return
        if self._waits is None:
            self._waits = KernelWaits()
        self._waits.forget(self._held_files())
        slots = self._slots_of_name.get(name, 1)
        if slots == 1 and cooling(name, self.records.read(name)) is not None:
            self._waits.sleep(timeout)  # the caller's timeout ends with the --min-hold
            return
        paths = ([self.files.lock_path(name)] if slots == 1
                 else [self.files.lock_path(name, slot) for slot in range(min(slots, MAX_WATCHED))])
        self._waits.wait(paths, timeout)

    def _held_files(self) -> set[tuple[int, int]]:
        """(device, inode) of every lock file this backend holds: no descriptor of them may be closed."""
        held = set()
        for fd in self._held.values():
            with contextlib.suppress(OSError):
                st = os.fstat(fd)
                held.add((st.st_dev, st.st_ino))
        return held

    # -- pauses (docs/operating.md "Pausing a job") --------------------------------------------------

    def pause(self, name: str, request: PauseRequest) -> Paused:
        return self._pauses.pause(name, request)

    def resume(self, name: str) -> bool:
        return self._pauses.resume(name)

    def pauses(self, names: list[str] | None = None) -> dict[str, Paused]:
        return self._pauses.read(names)

    def cadences(self, names: list[str]) -> dict[str, object]:
        """Nothing: on this host-only backend the ledger keeps each name's cadence."""
        return {}

    def known_names(self) -> list[str]:
        """The names with a lock file or a pause here (the ledger knows the rest)."""
        names = {holder.name for holder in self.holders()}
        return sorted(names | set(self.pauses()))

    # -- inspection -------------------------------------------------------------------------------

    def fleet_record(self) -> None:
        """No fleet record on this host-only backend: the ledger is its whole memory."""
        return None

    def lock_names(self) -> list[str]:
        return [h.name for h in self.holders()]

    def holders(self, names: list[str] | None = None) -> list[Holder]:
        return self.inspection.holders(names)

    def eviction_warnings(self) -> list[str]:
        return []  # kernel locks are never evicted

    def audit(self, probe_ttl: float | None = None) -> BackendAudit:
        """The state directory and its lock directory as they are (docs/operating.md "Checking the
        setup: lockrun doctor"): kernel locks on this host have nothing else to audit, nor to probe."""
        from lockrun.backends.audit import BackendAudit
        from lockrun.system.directory import directory_facts

        return BackendAudit("local", str(self.state_dir), directories=(
            directory_facts(self.state_dir, "the state directory"),
            directory_facts(self.files.locks_dir, "the local lock directory"),
        ))

    def close(self) -> None:
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()
        if self._waits is not None:
            self._waits.forget(set())  # nothing held any more: every finished helper's descriptor may go
            if self._waits.close():  # and the pipe, unless a helper still sleeps
                self._waits = None

    @property
    def waiting(self) -> bool:
        """Whether a helper of an earlier wait still sleeps on a lock file after :meth:`close`: its
        descriptor and pipe stay open until it wakes, and only this backend may close them."""
        return self._waits is not None
