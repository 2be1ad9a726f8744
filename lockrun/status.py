"""What ``lockrun status`` knows about each lock: the holder, its liveness, the last run."""

from __future__ import annotations

from datetime import datetime, timezone

from lockrun import host
from lockrun.backends import Backend, Holder
from lockrun.ledger import Ledger
from lockrun.errors import LedgerError


def heartbeat_age(heartbeat_at: str | None, now: datetime | None = None) -> float | None:
    if not heartbeat_at:
        return None
    try:
        then = datetime.strptime(heartbeat_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return round(((now or datetime.now(timezone.utc)) - then).total_seconds(), 3)


def is_zombie(holder: Holder, age: float | None) -> bool:
    """A holder that is certainly dead, or whose keeper has missed two renewals and a margin."""
    if host.known_dead(holder.host, holder.boot_id, holder.pid, holder.pid_start):
        return True
    if age is None or not holder.ttl_ms:
        return False
    ttl = holder.ttl_ms / 1000.0
    return age > 2 * ttl / 3 + max(0.5, 0.1 * ttl)


def lock_entry(name: str, holder: Holder | None, last_run: dict | None) -> dict:
    """One lock as contract §9 lists it."""
    if holder is None:
        fields = dict.fromkeys(
            ("token", "run_id", "host", "pid", "child_pid", "command", "started_at", "heartbeat_at",
             "heartbeat_age_s", "ttl_remaining_s"),
        )
        return {"name": name, "state": "free", **fields, "last_run": last_run}
    age = heartbeat_age(holder.heartbeat_at)
    return {
        "name": name,
        "state": "zombie" if is_zombie(holder, age) else "held",
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
        "last_run": last_run,
    }


def lock_states(backend: Backend, ledger: Ledger | None, names: list[str] | None) -> list[dict]:
    """Held locks (or exactly the named ones, held or free), each with its last finished run."""
    held = {h.name: h for h in backend.holders(names)}
    wanted = sorted(held) if names is None else list(dict.fromkeys(names))
    entries = []
    for name in wanted:
        last_run = None
        if ledger is not None:
            try:
                last_run = ledger.last_finished(name)
            except LedgerError:
                last_run = None
        entries.append(lock_entry(name, held.get(name), last_run))
    return entries
