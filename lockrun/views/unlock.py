"""Clearing a lock safely: inspect, judge liveness, then compare-and-delete exactly the token inspected.

A lock re-acquired between the inspection and the delete holds a new token, so
the delete leaves it alone. Every clear is recorded in the ledger.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from lockrun.backends.protocol import Backend
from lockrun.backends.values import FleetRecord, Holder
from lockrun.core.clock import age_s, human_duration, reading_clock, utc_now_iso
from lockrun.core.errors import LedgerError
from lockrun.core.printable import command_line
from lockrun.core.record import Status
from lockrun.core.run_ids import new_run_id
from lockrun.ledger.store import Ledger, RunRecord
from lockrun.system import host
from lockrun.views.status import proven_dead_reason, stale_heartbeat_reason

if TYPE_CHECKING:
    from lockrun.config.settings import Settings


class Inspection(NamedTuple):
    """One holder of a lock, as ``unlock`` judged it."""

    name: str
    holder: Holder
    heartbeat_age_s: float | None = None
    zombie_reason: str | None = None
    proven: bool = False  # the zombie reason proves that nothing runs under it (not a stale heartbeat alone)

    @property
    def zombie(self) -> bool:
        return self.zombie_reason is not None

    @property
    def cooling(self) -> bool:
        return bool(self.holder.cooling_until)

    @property
    def clearable(self) -> bool:
        """Nothing runs under it: a holder proven dead, or a finished run's --min-hold. A stale
        heartbeat alone is not enough: a holder cut off from Redis still runs its command until
        its own deadline, and its lease expires by itself then (docs/internals.md "Is the holder alive?")."""
        return (self.zombie and self.proven) or self.cooling

    def refusal(self) -> str:
        """Why ``unlock`` without --force keeps this holder (one clause of the refusal line)."""
        if self.holder.problem:
            return "it is malformed, and nothing shows that its holder is gone"
        if self.zombie:
            return (f"{self.zombie_reason}, which does not prove it dead: a holder cut off from Redis runs its"
                    " command until its own lease runs out, and this lease expires by itself in"
                    f" {human_duration(self.holder.ttl_remaining_s)}")
        return "its holder looks alive"

    def describe(self) -> list[str]:
        """Lines for the operator: who holds it, since when, and whether it looks alive."""
        h = self.holder
        token = (h.token or "")[:8]
        started = age_s(h.started_at, reading_clock(h.heartbeat_at, h.heartbeat_age_s))  # by the heartbeat's clock
        lines = [
            f"{self.name!r} is held by {h.host or '?'}:{h.pid or '?'} (run {(h.run_id or '?')[:8]}, token {token}…)",
            *([f"  malformed: {h.problem}"] if h.problem else []),
            f"  command:   {command_line(h.command) if h.command else '?'}",
            f"  started:   {h.started_at or '?'} ({human_duration(started)} ago)",
            f"  heartbeat: {human_duration(self.heartbeat_age_s)} ago;"
            f" lease expires in {human_duration(h.ttl_remaining_s)}",
            *([f"  note:      {h.note}"] if h.note else []),
        ]
        return [*lines, f"  state:     {self._state()}"]

    def _state(self) -> str:
        h = self.holder
        if h.foreign:
            return "malformed: not a lockrun lease, nothing lockrun started runs under it"
        if self.cooling:
            return f"cooling: the run is over, --min-hold keeps it until {h.cooling_until}"
        if self.zombie:
            return f"zombie: {self.zombie_reason}"
        if h.problem:
            return "malformed, and nothing shows that its holder is gone: it may still run"
        if h.kernel_held:
            return "live: a process holds its kernel lock"
        return "live: its heartbeat is recent and its process is not known to be gone"


def inspect_all(backend: Backend, name: str) -> list[Inspection]:
    """Every holder of ``name`` (several under --slots), judged one by one."""
    found = []
    for holder in backend.holders([name]):  # with its heartbeat's age by the server's clock
        proof = None if holder.cooling_until else proven_dead_reason(holder)
        reason = proof or (None if holder.cooling_until else stale_heartbeat_reason(holder))
        found.append(Inspection(name=name, holder=holder, heartbeat_age_s=holder.heartbeat_age_s,
                                zombie_reason=reason, proven=proof is not None))
    return found


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user}@{host.hostname()} pid {os.getpid()}"


def clear(backend: Backend, inspection: Inspection, ledger_path: Path, argv: list[str]) -> tuple[bool, str | None]:
    """Delete the lock if it still holds the inspected token; record it.

    Returns (cleared, warning about the ledger or None).
    """
    holder = inspection.holder
    note = _note(inspection)
    record = RunRecord(
        run_id=new_run_id(),
        name=inspection.name,
        command=argv,
        backend=backend.name,
        started_at=utc_now_iso(),
        pid_start=host.own_start(),
    )
    # The same row the ledger keeps, for every host to see in the fleet record (Redis).
    shared = FleetRecord({
        "run_id": record.run_id, "status": Status.UNLOCKED, "host": host.hostname(), "pid": os.getpid(),
        "command": argv, "started_at": record.started_at, "ended_at": record.started_at, "duration_s": 0.0,
        "note": note,  # no exit_status: nothing ran (the ledger keeps it null too)
    }, at_once=True)
    if holder.foreign:
        cleared = backend.clear_foreign(inspection.name)
    else:
        # "": a holder whose description names no usable token (the local backend finds it again).
        cleared = backend.clear(inspection.name, holder.token or "", record=shared)
    if not cleared:
        return False, None
    return True, _recorded(ledger_path, record, note)


def _note(inspection: Inspection) -> str:
    """What the ledger row says: which holder was cleared, and by whom."""
    holder = inspection.holder
    kind = ("malformed" if holder.foreign else "cooling" if inspection.cooling else "zombie" if inspection.zombie
            else "live (forced)")
    return (
        f"cleared {kind} holder {holder.host}:{holder.pid} run {holder.run_id} token {(holder.token or '')[:8]}"
        f" by {_who()}" + (f"; {inspection.zombie_reason}" if inspection.zombie_reason else "")
    )


def _recorded(ledger_path: Path, record: RunRecord, note: str) -> str | None:
    """The unlock's row in the ledger; a warning if it could not be written."""
    try:
        ledger = Ledger(ledger_path).open()
        try:
            ledger.record_event(record, status=Status.UNLOCKED, note=note)
        finally:
            ledger.close()
    except LedgerError as exc:
        return f"the lock was cleared but the ledger could not record it ({exc})"
    return None


class Choice(NamedTuple):
    """Which holders ``unlock`` judges, or why it picks none."""

    chosen: list[Inspection]
    refusal: str | None = None  # a line for stderr: exit 1, nothing cleared
    show_all: bool = False  # describe every holder before the refusal (the operator picks one)
    not_held: str | None = None  # a line for stdout: nothing to clear, exit 0


def choose(holders: list[Inspection], name: str, token_prefix: str | None, every_holder: bool) -> Choice:
    """``--token PREFIX`` picks one holder of a --slots lock, ``--all`` every one; with several
    holders and neither, nothing is guessed."""
    if token_prefix is not None:
        holders = _with_token(holders, token_prefix)
        if len(holders) > 1:
            return Choice([], refusal=f"--token {token_prefix!r} matches {len(holders)} holders of {name!r}:"
                                      " give more of it")
    if not holders:
        by = f" by a token starting {token_prefix!r}" if token_prefix else ""
        return Choice([], not_held=f"{name!r} is not held{by}")
    if len(holders) > 1 and not every_holder:
        return Choice(holders, show_all=True,
                      refusal=f"refusing to guess: {name!r} has {len(holders)} holders (--slots); pick one with"
                              " --token PREFIX, or clear every clearable one with --all")
    return Choice(holders)


def _with_token(holders: list[Inspection], token_prefix: str) -> list[Inspection]:
    return [h for h in holders if (h.holder.token or "").startswith(token_prefix)]


def refusal(inspection: Inspection, force: bool) -> str | None:
    """The line ``unlock`` refuses with before it asks anything, or None when it may go on."""
    if inspection.clearable or force:
        return None
    return (f"refusing to clear {inspection.name!r}: {inspection.refusal()}, and clearing it could run the job"
            f" twice; if you are sure, run: lockrun unlock --force {inspection.name}")


def question(inspection: Inspection) -> str:
    """What ``unlock`` asks on a terminal before it clears."""
    return "Clear it?" if inspection.clearable else "Clear this live lock? Its command will be stopped"


class Verdict(NamedTuple):
    """How a clear ended: the line to print, where, and the exit code."""

    message: str
    exit_code: int  # 0: the lock is gone afterwards; 1: it is not (it changed hands)
    warning: str | None = None  # the ledger could not record the clear

    @property
    def to_stderr(self) -> bool:
        return self.exit_code != 0


def clear_inspected(backend: Backend, inspection: Inspection, ledger_path: Path, argv: list[str]) -> Verdict:
    """Clear exactly the inspected token; when the delete finds another, look again to tell
    "released meanwhile" (the lock is gone: fine) from "changed hands" (a new holder: left alone)."""
    name = inspection.name
    cleared, warning = clear(backend, inspection, ledger_path, argv)
    if cleared:
        return Verdict(f"cleared {name!r}", 0, warning)
    tokens = {h.holder.token for h in inspect_all(backend, name)}
    if inspection.holder.token not in tokens and (inspection.holder.slotted or not tokens):
        return Verdict(f"{name!r} was released meanwhile; nothing left to clear", 0, warning)
    return Verdict(f"{name!r} changed hands after it was inspected; nothing was cleared", 1, warning)


def backend_hint_for(resolved: Settings, name: str) -> str | None:
    """The other-backend hint for ``unlock``: "not held" may only mean "not held *here*". A
    courtesy: a ledger that cannot be read says nothing here."""
    from lockrun.views.reading import backend_hint, open_ledger_for_reading

    try:
        book = open_ledger_for_reading(resolved.ledger_path)
    except LedgerError:
        book = None
    try:
        return backend_hint(book, resolved, [name])
    finally:
        if book is not None:
            book.close()
