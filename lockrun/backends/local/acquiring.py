"""The local acquire: a name's kernel lock taken (or, under ``--slots N``, the first free one of
its N), and what is judged under it before it is a lease: the last run's ``--min-hold``, a pause,
the name's zone and the ``--once`` key's mark, ``--once-every`` (docs/guarantees.md)."""

from __future__ import annotations

import contextlib
import os
import time

from lockrun.backends.local.files import LockFiles, locked_by_other, open_and_try_lock, same_file
from lockrun.backends.local.holders import holder_of
from lockrun.backends.local.pauses import LocalPauses
from lockrun.backends.local.records import (
    SUCCESS_FIELD,
    Description,
    LockRecords,
    cooling,
    last_success_at,
    stored_fence,
)
from lockrun.backends.pause import Paused
from lockrun.backends.values import Duplicate, Holder, Lease, OnceKey, TooSoon
from lockrun.core.errors import BackendUnavailable, ForeignData, SlotsMismatch, ZoneMismatch
from lockrun.core.printable import printable
from lockrun.core.zones import MAX_ZONE_NAME
from lockrun.system.safefs import UnsafePath, write_atomically

ACQUIRE_ATTEMPTS = 20  # retries when an unlock --force swaps the file under us


class Acquirer:
    """Takes the kernel locks of a state directory; each one taken goes into ``held`` (owner
    token -> the descriptor that holds it) and, under --slots, ``slot_of`` (token -> slot)."""

    def __init__(self, files: LockFiles, records: LockRecords, pauses: LocalPauses, held: dict[str, int],
                 slot_of: dict[str, int]) -> None:
        self.files, self.records, self._pauses = files, records, pauses
        self._held, self._slot_of = held, slot_of

    def lock(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None, once_every: float | None,
    ) -> Lease | Holder | Duplicate | TooSoon | Paused:
        """The one lock file of ``name``."""
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
            return self._under_the_lock(fd, name, token, ttl, info, once, once_every, sent_at)
        raise BackendUnavailable(f"the lock file {path} kept changing under us; is something deleting it?")

    def _under_the_lock(
        self, fd: int, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None,
        once_every: float | None, sent_at: float,
    ) -> Lease | Holder | Duplicate | TooSoon | Paused:
        """The lock file ``fd`` is locked: the lease, unless the last run's --min-hold, a pause, the
        --once key or --once-every says otherwise (then ``fd`` is closed)."""
        previous = self.records.read(name)
        still_cooling = cooling(name, previous)
        if still_cooling is not None:
            os.close(fd)  # the last run's --min-hold is not over: busy, like in Redis
            return self._paused(name) or still_cooling
        pause = self._pauses.of(name)  # under the lock, as the Redis acquire reads it
        refused = self._paused_or_done(fd, name, pause, once, ttl) or _too_soon(fd, name, previous, once_every)
        if refused is not None:
            return refused
        fence = self._describe(fd, name, info, previous)
        self._held[token] = fd
        return Lease(name=name, token=token, fencing_token=fence, ttl=ttl, sent_at=sent_at, once=once,
                     pause_problem=_problem(pause))

    def _describe(self, fd: int, name: str, info: dict[str, str], previous: Description) -> int:
        """The new holder's description, with the next fence: its number."""
        with contextlib.suppress(FileNotFoundError):
            self.files.preempt_path(name).unlink()  # a request meant for the previous holder
        fence = stored_fence(previous) + 1
        # No cooling_until: a fresh description. The name, for status when the file name is a hash.
        record: Description = {**info, "name": name, "fencing_token": fence}
        success_at = last_success_at(previous)
        if success_at is not None:  # --once-every's memory goes on from description to description
            record[SUCCESS_FIELD] = success_at
        try:
            self.records.write(name, record, durable=True)  # after a crash the fence must not go back
        except OSError as exc:
            os.close(fd)
            raise self.files.cannot_write(exc) from None
        return fence

    def slot(
        self, name: str, token: str, ttl: float, info: dict[str, str], once: OnceKey | None, slots: int
    ) -> Lease | Holder | Duplicate | Paused:
        """--slots N: N lock files, one kernel lock each; the first free one is ours."""
        self._check_slots(name, slots)
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
            refused = self._paused_or_done(fd, name, pause, once, ttl)
            if refused is not None:
                return refused
            fence = self._describe_slot(fd, name, info, slots, slot)
            self._held[token] = fd
            self._slot_of[token] = slot
            return Lease(name=name, token=token, fencing_token=fence, ttl=ttl, sent_at=sent_at, once=once,
                         slots=slots, pause_problem=_problem(pause))
        return self._paused(name) or busy or Holder(name=name, slotted=True)

    def _check_slots(self, name: str, slots: int) -> None:
        """A name is taken with one N of slots at a time (SlotsMismatch)."""
        if locked_by_other(self.files.lock_path(name)):
            raise SlotsMismatch(name, 1, slots)
        stored = self.files.slots_meta(name)
        if stored is not None and stored != slots and self.files.held_slots(name):
            raise SlotsMismatch(name, stored, slots)

    def _describe_slot(self, fd: int, name: str, info: dict[str, str], slots: int, slot: int) -> int:
        """The N of slots, and the slot's holder's description with the name's next fence: its number."""
        try:
            write_atomically(self.files.slots_meta_path(name), str(slots).encode(), in_state_dir=True)
            fence = self.records.next_fence(name)
            self.records.write(name, {**info, "name": name, "fencing_token": fence}, slot)
        except UnsafePath as exc:
            os.close(fd)
            raise ForeignData(f"cannot use the local lock files of {name!r}: {exc}") from None
        except OSError as exc:
            os.close(fd)
            raise self.files.cannot_write(exc) from None
        return fence

    def _paused(self, name: str) -> Paused | None:
        """The pause of a busy name (a run of a paused name neither waits nor asks a holder to stop,
        as in Redis); None when it is not paused, or its pause is malformed (then: busy)."""
        pause = self._pauses.of(name)
        return pause if pause is not None and pause.problem is None else None

    def _paused_or_done(
        self, fd: int, name: str, pause: Paused | None, once: OnceKey | None, ttl: float,
    ) -> Paused | Duplicate | None:
        """Under the lock just taken: the name's pause (a malformed one is not honoured), then the
        zone and the --once key's mark (:meth:`_once_checks`). Either ends the acquire, ``fd`` closed."""
        if pause is not None and pause.problem is None:
            os.close(fd)
            return pause
        return self._once_checks(fd, name, once, ttl)

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


def _too_soon(fd: int, name: str, previous: Description, once_every: float | None) -> TooSoon | None:
    """--once-every, judged under the lock: no other run of the name is between the two (then
    ``fd`` is closed)."""
    success_at = last_success_at(previous)
    if once_every and success_at is not None and time.time() - success_at < once_every:
        os.close(fd)
        return TooSoon(name=name, success_at=success_at, now=time.time())
    return None


def _problem(pause: Paused | None) -> str | None:
    """What is wrong with a malformed pause the lease ignores."""
    return pause.problem if pause is not None else None
