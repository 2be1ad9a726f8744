"""A pause of one name (``lockrun pause``, docs/operating.md "Pausing a job"): what a backend keeps,
and reading it back defensively.

A pause is stored with the name (Redis: the hash ``prefix{NAME}:paused``, expiring at its end; the
local backend: a file in the state directory) and read by the acquire itself, under the lock: a
run that finds a well-formed pause is skipped (ledger status ``paused``, exit 0). A pause record
lockrun did not write (another type, no end) is *not* honoured: a run goes on, and says so in
a warning, because a pause nobody can read the end of would silence a job for good.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from lockrun.core.defaults import MAX_PAUSE_REASON
from lockrun.core.printable import printable, quoted
from lockrun.core.readers import Unusable, as_text, as_time

#: The fields of a pause record (the Redis hash and the local file alike): who paused it, on
#: which host, when, until when (ISO 8601 UTC; ``until_ms``: the same as epoch ms), and why.
PAUSE_FIELDS = ("who", "where", "when", "until", "reason")
#: The form of ``when`` and ``until`` lockrun writes, the one the Redis acquire scripts honour
#: (redis/lua_parts.py PAUSE_LUA): a pause these readers call malformed is never one a run honours.
PAUSE_TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z")


class PauseRequest(NamedTuple):
    """What ``lockrun pause`` asks a backend to store: an end ``for_s`` from now (by the backend's
    clock: the Redis server's TIME) or at ``until_epoch_s``, exactly one of them."""

    who: str
    where: str
    reason: str
    for_s: float | None = None
    until_epoch_s: float | None = None


class Paused(NamedTuple):
    """A name's pause as recorded. ``problem``: why the record is not one lockrun wrote; such a
    pause is shown, never honoured (runs go on)."""

    name: str
    who: str | None = None
    where: str | None = None
    when: str | None = None
    until: str | None = None
    reason: str | None = None
    problem: str | None = None

    @classmethod
    def from_fields(cls, name: str, fields: Mapping[Any, object] | None, problem: str | None = None) -> Paused:
        """A pause from its stored fields (bytes from Redis, JSON values from a file), whoever wrote them."""
        info = {(key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)): value
                for key, value in (fields or {}).items()}
        problems = [problem] if problem else []
        found: dict[str, str | None] = {}
        for field in PAUSE_FIELDS:
            try:
                value = as_time(info.get(field)) if field in ("when", "until") else as_text(info.get(field))
                if field in ("when", "until") and value is not None and not PAUSE_TIME_RE.fullmatch(value):
                    raise Unusable(f"{quoted(value, 40)}, not an ISO 8601 UTC time")
            except Unusable as exc:
                problems.append(f"{field}: {exc}")
                value = None
            found[field] = printable(value)[:MAX_PAUSE_REASON] if value is not None else None
        if found["until"] is None and not problems:
            problems.append("no end (until)")
        return cls(name=name, who=found["who"], where=found["where"], when=found["when"], until=found["until"],
                   reason=found["reason"], problem="; ".join(problems) or None)

    def describe(self) -> str:
        """``paused until 2026-12-02T05:00:00.000000Z by alice on app-1 (deploy)`` for one-line messages."""
        if self.problem:
            return f"a malformed pause ({self.problem})"
        text = f"paused until {self.until}"
        if self.who or self.where:
            text += f" by {self.who or '?'} on {self.where or '?'}"
        return text + (f" ({self.reason})" if self.reason else "")

    def as_json(self) -> dict[str, str | None]:
        """As ``status --json`` and ``check --json`` show it."""
        return {"who": self.who, "where": self.where, "when": self.when, "until": self.until,
                "reason": self.reason, "problem": self.problem}
