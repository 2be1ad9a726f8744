"""What ``lockrun status`` knows about each lock: the holder, its liveness, the last run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, TypedDict

from lockrun import fleet, host
from lockrun.backends import Backend, Holder
from lockrun.clock import seconds_since
from lockrun.errors import BackendUnavailable, LedgerError
from lockrun.ledger import Ledger
from lockrun.record import Status


class LockEntry(TypedDict):
    """One lock (one holder of it, under --slots) as ``status --json`` lists it (README, "Operating it")."""

    name: str
    state: str  # free, held, zombie, cooling, malformed; unknown when the backend could not be asked
    token: str | None
    run_id: str | None
    host: str | None
    pid: int | None
    child_pid: int | None
    command: Sequence[str] | None
    started_at: str | None
    heartbeat_at: str | None
    heartbeat_age_s: float | None
    ttl_remaining_s: float | None
    problem: str | None
    last_run: dict[str, Any] | None  # the newest finished run, as history --json shows it


def zombie_reason(holder: Holder, age: float | None) -> str | None:
    """Why a holder is certainly dead, or has missed two renewals and a margin; None if it looks alive.

    When in doubt the answer is None: a live lock cleared by mistake is a double run.
    """
    if holder.foreign:
        return f"no lockrun run can hold it ({holder.problem})"
    if host.known_dead(holder.host, holder.boot_id, holder.pid, holder.pid_start):
        which = f"process {holder.pid}" if holder.pid is not None else "process (its pid is not valid)"
        return f"its lockrun {which} no longer runs on this host"
    if age is None or not holder.ttl_ms:
        return None
    ttl = holder.ttl_ms / 1000.0
    if age > 2 * ttl / 3 + max(0.5, 0.1 * ttl):
        return f"its last heartbeat was {age:.1f}s ago (renewals are due every {ttl / 3:.1f}s)"
    return None


def lock_state(holder: Holder, age: float | None) -> str:
    """``malformed`` (data lockrun did not write), ``cooling``, ``zombie`` or ``held``."""
    if holder.problem:
        return "malformed"
    if holder.cooling_until:
        return "cooling"  # the run is over; --min-hold keeps the lock taken a while longer
    return "zombie" if zombie_reason(holder, age) else "held"


def lock_entry(name: str, holder: Holder | None, last_run: dict[str, Any] | None) -> LockEntry:
    """One lock as ``status --json`` lists it (README, "Operating it")."""
    if holder is None:
        return {
            "name": name, "state": "free", "token": None, "run_id": None, "host": None, "pid": None,
            "child_pid": None, "command": None, "started_at": None, "heartbeat_at": None,
            "heartbeat_age_s": None, "ttl_remaining_s": None, "problem": None, "last_run": last_run,
        }
    age = seconds_since(holder.heartbeat_at)
    state = lock_state(holder, age)
    return {
        "name": name,
        "state": state,
        "token": holder.token,
        "run_id": holder.run_id,
        "host": holder.host,
        "pid": holder.pid,
        "child_pid": holder.child_pid,
        "command": holder.command,
        "started_at": holder.started_at,
        "heartbeat_at": holder.heartbeat_at,
        "heartbeat_age_s": age,
        "ttl_remaining_s": holder.ttl_remaining_s,
        "problem": holder.problem,
        "last_run": last_run,
    }


def newer_run(mine: dict[str, Any] | None, theirs: dict[str, Any] | None) -> dict[str, Any] | None:
    """The newer of this host's last finished run and the fleet's (by when it ended)."""
    if mine is None or theirs is None:
        return mine or theirs
    if mine["run_id"] == theirs["run_id"]:
        return mine  # the same run: this host's row is the fuller one
    ours_ended = mine["ended_at"] or mine["started_at"] or ""
    return theirs if (theirs["ended_at"] or theirs["started_at"] or "") > ours_ended else mine


def lock_states(backend: Backend, ledger: Ledger | None, names: list[str] | None) -> list[LockEntry]:
    """Held locks (or exactly the named ones, held or free), each with its last finished run:
    the newer of this host's ledger and the fleet record (a shared backend's memory of every host)."""
    held: dict[str, list[Holder]] = {}
    for holder in backend.holders(names):
        held.setdefault(holder.name, []).append(holder)  # --slots: several holders, one entry each
    wanted = sorted(held) if names is None else list(dict.fromkeys(names))
    record = backend.fleet_record()
    fleet_last = fleet.last_runs(record, wanted) if record is not None and wanted else {}
    entries: list[LockEntry] = []
    for name in wanted:
        mine = _last_finished(ledger, name) if ledger is not None else None
        last_run = newer_run(mine, fleet_last.get(name))
        holders: list[Holder | None] = [*held.get(name, [])] or [None]  # None: a named lock that is free
        entries.extend(lock_entry(name, holder, last_run) for holder in holders)
    return entries


def ledger_view(ledger: Ledger | None, names: list[str] | None) -> list[LockEntry]:
    """What the ledger alone knows, for when the backend cannot be asked.

    Runs in progress on this host are listed with state ``unknown``: without the
    backend nobody can tell whether their leases still hold.
    """
    if ledger is None:
        return []
    try:
        running = ledger.history(status=Status.RUNNING, limit=100000)
    except LedgerError:
        return []
    by_name = {row["name"]: row for row in reversed(running)}
    wanted = sorted(by_name) if names is None else list(dict.fromkeys(names))
    entries = []
    for name in wanted:
        entry = lock_entry(name, None, _last_finished(ledger, name))
        row = by_name.get(name)
        entry["state"] = "unknown"
        if row is not None:
            entry["run_id"], entry["host"], entry["pid"] = row["run_id"], row["host"], row["pid"]
            entry["command"], entry["started_at"] = row["command"], row["started_at"]
        entries.append(entry)
    return entries


class StatusView(NamedTuple):
    """What ``status`` shows: the locks, and why the backend could not be asked (None if it could)."""

    locks: list[LockEntry]
    unreachable: BackendUnavailable | None


def status_view(backend: Backend, ledger: Ledger | None, names: list[str] | None) -> StatusView:
    """The locks as the backend knows them; when it cannot be reached, what the ledger alone knows."""
    try:
        return StatusView(lock_states(backend, ledger, names), None)
    except BackendUnavailable as exc:
        return StatusView(ledger_view(ledger, names), exc)


def _last_finished(ledger: Ledger, name: str) -> dict[str, Any] | None:
    try:
        return ledger.last_finished(name)
    except LedgerError:
        return None
