"""One script call as EVAL takes it, and the parts of their KEYS and ARGV that several scripts
share (a --once key's, an acquire's checks, a run's end in the fleet record): each script's own
layout is beside it, in ``scripts.py`` or ``slot_scripts.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from lockrun.backends.redis.keys import LockKeys
from lockrun.backends.redis.record_format import event_pairs
from lockrun.backends.values import FleetRecord, FleetRetention, OnceKey
from lockrun.core.clock import utc_now_iso
from lockrun.core.record import row_json_parts, tail_for_fleet

#: How long a wake-up waits in a wake list for a waiter to BLPOP it.
WAKE_TTL_MS = 5000

#: One ARGV value: redis-py sends numbers as their decimal text.
Arg = str | int


class ScriptCall(NamedTuple):
    """One script with its KEYS and ARGV, ready for EVAL."""

    script: str
    keys: list[str]
    args: list[Arg]


def ms(seconds: float) -> int:
    """Seconds as whole milliseconds, at least 1 (PX 0 is an error, and 0 would mean no TTL)."""
    return max(1, int(seconds * 1000))


def flat_pairs(fields: Mapping[str, str]) -> list[Arg]:
    """field, value, field, value, ...: a hash as ARGV."""
    return [item for field in fields.items() for item in field]


def once_keys(keys: LockKeys, once: OnceKey | None) -> list[str]:
    """The last KEYS of an acquire or a release: the --once key's done mark, then the name's
    once_tz when the key is time-derived (none without --once)."""
    done = [keys.done(once.key)] if once else []
    return done + ([keys.once_tz] if once and once.zone else [])


def acquire_args(retention: FleetRetention, allow_eviction: bool, once: OnceKey | None) -> list[Arg]:
    """What both acquire scripts take after their own first ARGV: maxlen, keep_ms,
    allow_eviction, the --once key's zone and remember_ms."""
    return [retention.max_events, retention.keep_ms, int(allow_eviction), once.zone if once and once.zone else "",
            ms(once.remember_s) if once else 0]


def done_args(done: OnceKey | None) -> list[Arg]:
    """What both release scripts take to mark a --once key done: remember_ms, done_value, zone."""
    return [ms(done.remember_s), utc_now_iso(), done.zone or ""] if done else [0, "", ""]


def record_args(keys: LockKeys, record: FleetRecord | None, retention: FleetRetention) -> tuple[list[str], list[Arg]]:
    """The fleet-record KEYS (without the registry) and ARGV of a release or clear script
    (FLEET_END_LUA's record_end)."""
    run_id = record.row.get("run_id") if record else None
    fleet_keys = [keys.runs, keys.last, keys.counts, keys.open, keys.vals]
    if record is None or not run_id:
        return fleet_keys, [0, 0, "", "", "", 0, "", "", "", "", "", ""]
    head, tail = row_json_parts(record.row)
    lost_head, lost_tail = row_json_parts(record.if_lost) if record.if_lost is not None else (head, "")
    if lost_head != head:  # the two rows may differ only where the release decides
        lost_tail = ""
    lost_note = (record.if_lost or {}).get("note") or ""
    args: list[Arg] = [
        retention.max_events, retention.keep_ms, record.row["status"], tail_for_fleet(record.output_tail),
        record.row.get("ended_at") or "", int(record.at_once), run_id, head, tail, lost_tail,
        record.row.get("note") or "", lost_note, *event_pairs(record.row),
    ]
    return fleet_keys, args
