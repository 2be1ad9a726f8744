"""Every Redis key of one lock (docs/redis.md "Redis keys"), built in this one place.

Keys are hash-tagged with ``{NAME}`` so that every key of one lock lives in one Redis
Cluster slot and a script may touch all of them. Lock names hold no braces, so the name
can be read back out of any of its keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple, Protocol

#: Keys asked for per SCAN call, and names read per pipeline.
SCAN_BATCH = 1000


class LockKeys(NamedTuple):
    lock: str
    info: str
    fence: str
    wake: str
    preempt: str
    slots: str
    runs: str  # the fleet record: one entry per recent finished run (a stream)
    last: str  # the fleet record: the newest finished run (a hash)
    counts: str  # the fleet record: outcomes by status (a hash)
    open: str  # the fleet record: the runs that started and have not ended yet (a hash by run id)
    vals: str  # the fleet record: host names and commands stored once, by number (a hash)
    base: str

    def done(self, key: str) -> str:
        return f"{self.base}:done:{key}"

    def slot_info(self, token: str) -> str:
        return f"{self.base}:slot:{token}"

    @property
    def slot_count(self) -> str:
        return f"{self.slots}:n"

    @property
    def skips(self) -> str:
        """The fleet record: the newest busy and duplicate skips, each with its time and host (a list;
        docs/fleet.md "One fleet, one memory"). The acquire scripts derive it from ``counts``."""
        return f"{self.base}:skips"

    @property
    def paused(self) -> str:
        """The name's pause (``lockrun pause``, docs/operating.md "Pausing a job"): a hash that expires at its end."""
        return f"{self.base}:paused"

    @property
    def cadence(self) -> str:
        """The name's declared cadence (docs/operating.md "Declaring a cadence"), written by the acquire scripts."""
        return f"{self.base}:cadence"

    @property
    def once_tz(self) -> str:
        """The time zone the name's --once periods are computed in (docs/guarantees.md "One zone per name")."""
        return f"{self.base}:once_tz"


def lock_keys(prefix: str, name: str) -> LockKeys:
    """Every Redis key of one lock."""
    base = f"{prefix}{{{name}}}"
    return LockKeys(
        lock=f"{base}:lock", info=f"{base}:info", fence=f"{base}:fence", wake=f"{base}:wake",
        preempt=f"{base}:preempt", slots=f"{base}:slots", runs=f"{base}:runs", last=f"{base}:last",
        counts=f"{base}:counts", open=f"{base}:open", vals=f"{base}:vals", base=base,
    )


def registry_key(prefix: str) -> str:
    """The registry of names (docs/redis.md "Redis keys"): a sorted set of every name lockrun wrote,
    scored by its last write (ms, server TIME). Not hash-tagged: a single server or Sentinel only."""
    return f"{prefix}names"


def name_in_key(prefix: str, key: str) -> str | None:
    """The lock name inside one of its keys (``prefix{NAME}:...``), or None for another key."""
    start = len(prefix) + 1
    end = key.find("}", start)
    return key[start:end] if key.startswith(prefix + "{") and end > start else None


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


class Scanner(Protocol):
    """The one client call :func:`scan_names` makes (a plain, Sentinel or Cluster client)."""

    def scan_iter(self, match: str | None = ..., count: int | None = ...) -> Iterator[bytes | str]: ...


def scan_every_name(client: Scanner, prefix: str) -> set[str]:
    """Every name with any key (one SCAN pass over the keyspace, MATCH ``prefix{*}:*``)."""
    found: set[str] = set()
    for key in client.scan_iter(match=_glob_escape(prefix) + "{*}:*", count=SCAN_BATCH):
        text = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
        name = name_in_key(prefix, text)
        if name:
            found.add(name)
    return found


def scan_names(client: Scanner, prefix: str, kinds: Iterable[str]) -> set[str]:
    """Every name that has a key of one of these kinds (``lock``, ``slots``, ``runs``...),
    by SCAN (never KEYS: it would stall the server for every other host)."""
    head = f"{prefix}{{"
    found: set[str] = set()
    for tail in (f"}}:{kind}" for kind in kinds):
        pattern = _glob_escape(prefix) + "{*" + tail
        for key in client.scan_iter(match=pattern, count=SCAN_BATCH):
            text = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
            if text.startswith(head) and text.endswith(tail):
                found.add(text[len(head) : -len(tail)])
    return found
