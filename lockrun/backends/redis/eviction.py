"""A Redis that may evict keys, in words (docs/guarantees.md "A Redis that evicts keys").

With ``maxmemory`` set and any ``maxmemory-policy`` but ``noeviction``, Redis drops keys when
memory runs out: ``allkeys-*`` any key, ``volatile-*`` any key with a TTL, and every key lockrun
writes has one. A held lock could vanish and a second run start; a ``--once`` mark could
vanish and the day's job run again. The acquire scripts read ``INFO memory`` themselves
(lua_parts.ACQUIRE_CHECKS_LUA) and refuse such a server; ``status`` asks each server once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from lockrun.backends.redis.replies import int_or_none, text
from lockrun.core.printable import printable

FIX = "run CONFIG SET maxmemory-policy noeviction on it (and put it in its redis.conf)"
WAY_OUT = "or set allow_eviction = true (--allow-eviction) to run anyway"


class Eviction(NamedTuple):
    """A server that may evict keys: its policy ('' when it would not say) and maxmemory."""

    where: str  # the server, as messages name it
    policy: str
    maxmemory: int
    why: str = ""  # why the policy is not known


def human_bytes(count: int) -> str:
    for unit, size in (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
        if count >= size:
            return f"{count / size:g}{unit}" if count % size == 0 else f"{count / size:.1f}{unit}"
    return f"{count}b"


def describe(found: Eviction) -> str:
    """``Redis at URL may evict keys (maxmemory-policy allkeys-lru, maxmemory 2mb)``."""
    if not found.policy:
        return (f"Redis at {found.where} does not say whether it evicts keys (INFO memory: "
                f"{printable(found.why)[:200]})")
    return (f"Redis at {found.where} may evict keys (maxmemory-policy {printable(found.policy)[:40]},"
            f" maxmemory {human_bytes(found.maxmemory)})")


def eviction_refusal(where: str, policy: str, maxmemory: object, why: str) -> str:
    """The one line of a run refused by the acquire script (exit 69)."""
    found = Eviction(where, policy, int_or_none(maxmemory) or 0, why)
    if not policy:
        return (f"{describe(found)}: lockrun checks its maxmemory-policy before every run; let lockrun's Redis user"
                f" run INFO (ACL SETUSER USER +info), {WAY_OUT}; the command did not run")
    return (f"{describe(found)}: a held lock or a --once mark could vanish and the job run twice; {FIX}, {WAY_OUT};"
            " the command did not run")


def status_warning(found: Eviction) -> str:
    """The one line ``status`` prints about each such server."""
    if not found.policy:
        return f"warning: {describe(found)}; runs refuse it (exit 69) unless allow_eviction is set"
    return (f"warning: {describe(found)}: a held lock or a --once mark could vanish and a job run twice; runs refuse"
            f" it (exit 69) unless allow_eviction is set; {FIX}")


def eviction_in(where: str, info: Mapping[object, object] | object) -> Eviction | None:
    """What one server's ``INFO memory`` (as redis-py parses it) says of eviction: None when it
    keeps every key; an Eviction when it may evict, or when the reply does not say."""
    if not isinstance(info, Mapping):
        return Eviction(where, "", 0, f"an unreadable reply ({type(info).__name__})")
    fields = {text(key): value for key, value in info.items()}
    limit = int_or_none(fields.get("maxmemory"))
    policy = text(fields["maxmemory_policy"]) if "maxmemory_policy" in fields else None
    if limit is None or policy is None:
        return Eviction(where, "", 0, "INFO memory names no maxmemory_policy")
    if limit == 0 or policy == "noeviction":
        return None
    return Eviction(where, policy, limit)
