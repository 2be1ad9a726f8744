"""The hint for when the operator's shell and this host's runs use different backends.

A Redis URL set inline in a crontab line (or in another user's config file) is invisible to the
shell someone runs ``lockrun status`` in: that shell then looks at the local backend, or at
another server, and truthfully reports no locks. The ledger records, for every run, which
backend it used and how that was configured (never credentials), so ``status``, ``history`` and
``unlock`` can say so in one line.
"""

from __future__ import annotations

from typing import Any

from lockrun.core.clock import human_duration, iso_ago, seconds_since
from lockrun.core.errors import LedgerError
from lockrun.ledger.store import Ledger

RECENT_S = 7 * 86400.0  # runs older than this describe how things were, not how they are
FUTURE_S = 3600.0  # a row further in the future than this was not written by this host's clock


def _shown(text: str | None) -> str | None:
    """Stored text as one short printable line: the ledger may hold anything."""
    if text is None:
        return None
    clean = "".join(ch if ch.isprintable() else "?" for ch in str(text))
    return clean if len(clean) <= 200 else clean[:199] + "…"


def _describe(backend: str, where: str | None, origin: str | None) -> str:
    where, origin = _shown(where), _shown(origin)
    if backend == "local":
        return "the local backend" + (f" in {where}" if where else "")
    if not where:
        return "the redis backend (how it was configured was not recorded)"
    return f"redis {where}" + (f" (from {origin})" if origin else "")


def _readable(row: dict[str, Any]) -> bool:
    """A row lockrun could have written: any other is no evidence of how this host runs."""
    if not isinstance(row["name"], str) or row["backend"] not in ("local", "redis"):
        return False
    if any(row[key] is not None and not isinstance(row[key], str) for key in ("backend_where", "backend_from")):
        return False
    age = seconds_since(row["started_at"])
    return age is not None and age >= -FUTURE_S


def _configuration(row: dict[str, Any]) -> tuple[object, object, object]:
    return row["backend"], row["backend_where"], row["backend_from"]


def _differs(row: dict[str, Any], backend: str, where: str) -> bool:
    if row["backend"] != backend:
        return True
    return row["backend_where"] is not None and row["backend_where"] != where


def other_backend_hint(
    ledger: Ledger | None, backend: str, where: str, origin: str, names: list[str] | None = None
) -> str | None:
    """One line when the newest recent run of some name (of ``names``, or any) on this host used
    another backend than ``backend`` at ``where``; None when they agree or nothing is known."""
    others = _runs_elsewhere(ledger, backend, where, names)
    return _hint(others, backend, where, origin) if others else None


def _runs_elsewhere(ledger: Ledger | None, backend: str, where: str, names: list[str] | None) -> list[dict[str, Any]]:
    """The newest recent run of each name, of those that used another backend."""
    if ledger is None:
        return []
    try:
        rows = ledger.recent_configurations(iso_ago(RECENT_S), names)
    except LedgerError:
        return []
    newest: dict[str, dict[str, Any]] = {}
    for row in rows:  # newest first: the first row of a name is how it runs now
        if _readable(row):
            newest.setdefault(row["name"], row)
    return [row for row in newest.values() if _differs(row, backend, where)]


def _hint(others: list[dict[str, Any]], backend: str, where: str, origin: str) -> str:
    first = others[0]
    # The names that ran as the newest of them did: each name is said under the backend it used.
    others = [row for row in others if _configuration(row) == _configuration(first)]
    quoted = [repr(row["name"]) for row in others[:2]]
    who = " and ".join(quoted) if len(others) <= 2 else f"{', '.join(quoted)} and {len(others) - 2} more"
    ago = human_duration(max(0.0, seconds_since(first["started_at"]) or 0.0))
    shell = _describe(backend, where, None if backend == "local" else origin)
    if backend == "local":
        shell += f" ({origin})"
    theirs = _describe(first["backend"], first["backend_where"], first["backend_from"])
    return (
        f"note: this host's latest runs of {who} ({ago} ago) used {theirs}, but this shell uses {shell}:"
        " give it the same setting to see those locks"
    )
