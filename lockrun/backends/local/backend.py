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
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from lockrun.backends.local.acquiring import Acquirer
from lockrun.backends.local.files import LockFiles, locked_by_other, same_file
from lockrun.backends.local.holders import LocalInspection
from lockrun.backends.local.pauses import LocalPauses
from lockrun.backends.local.records import SUCCESS_FIELD, LockRecords, cooling
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
from lockrun.core.errors import BackendUnavailable
from lockrun.system.safefs import write_atomically

if TYPE_CHECKING:  # what doctor reads: not imported by a run
    from lockrun.backends.audit import BackendAudit


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
        self._acquirer = Acquirer(self.files, self.records, self._pauses, self._held, self._slot_of)

    # -- lease operations -------------------------------------------------------------------

    def acquire(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None = None,
        slots: int = 1, last_try: bool = True, once_every: float | None = None,
    ) -> Lease | Holder | Duplicate | TooSoon | Paused:
        self.files.ready()
        self._slots_of_name[name] = slots
        if slots > 1:
            return self._acquirer.slot(name, token, ttl, info, once, slots)
        return self._acquirer.lock(name, token, ttl, info, once, once_every)

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
                raise self.files.cannot_write(exc, "record --min-hold in") from None
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
            raise self.files.cannot_write(exc) from None
        return True

    def clear(self, name: str, token: str, record: FleetRecord | None = None) -> bool:
        """``unlock``: end the inspected holder's --min-hold, or (``--force``) remove its lock file
        (unlocking.py)."""
        from lockrun.backends.local import unlocking  # unlock's, not a run's

        return unlocking.clear(self.files, self.records, self.inspection, name, token)

    def clear_foreign(self, name: str) -> bool:
        """``unlock`` of something that is not a lock file at the lock's path (unlocking.py)."""
        from lockrun.backends.local import unlocking

        return unlocking.clear_foreign(self.files, name)

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
