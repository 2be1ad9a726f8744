"""The compact fleet record's layout (docs/fleet.md "One fleet, one memory", "What the fleet record
costs").

One ``runs`` stream entry per finished run, with the same fields in the same order every time, so
that Redis stores the field names once per stream node and only the values per run. Times are
whole microseconds (Redis keeps numbers of up to 64 bits as integers, not text); the host name
and the command are numbers into the name's ``vals`` hash (stored once, at most VALS_MAX of
them; a value past that is stored in the event itself, after a ``=``).

Encoding is done here before the release script runs; the script fills in what only it knows
(the note and ``lock_lost_at_release``, the host and command numbers, the start's server time).
Decoding is defensive: whoever wrote an entry, it reads back as string fields that
``core.record.row_from_fields`` parses as it parses any other record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from lockrun.core.clock import ISO_FORMAT, parse_iso
from lockrun.core.readers import parse_int, text_of
from lockrun.core.record import Row

#: The fields of an entry, in the order they are written: (field, the row's field it holds).
#: ``t`` started_at in µs since 1970, ``e`` ended_at in µs after ``t``, ``d``/``w`` duration_s and
#: waited_s in µs; ``h``/``c`` host and command (a number into ``vals`` or ``=`` and the value);
#: ``k`` the ms between the run's start and this entry, both on the server's clock.
EVENT_FIELDS = (
    ("r", "run_id"), ("s", "status"), ("x", "exit_code"), ("g", "signal"), ("h", "host"), ("p", "pid"),
    ("c", "command"), ("t", "started_at"), ("e", "ended_at"), ("d", "duration_s"), ("f", "fencing_token"),
    ("o", "once_key"), ("E", "error"), ("n", "note"), ("X", "exit_status"), ("w", "waited_s"),
    ("l", "lock_lost_at_release"), ("k", None),
)
#: How many distinct host names and commands one name's ``vals`` hash holds (then: inline).
VALS_MAX = 64
#: Busy and duplicate skips one name's ``skips`` list keeps, newest first, for timeline --fleet
#: (each ~20 bytes plus the host name; older ones are only counted, in ``counts``).
SKIPS_KEPT = 32
#: Open runs (started, not ended) one name's ``open`` hash keeps beyond its ``--slots`` N: the
#: oldest past that are dropped (runs whose lockrun died without giving the lock back).
OPEN_SPARE = 16
_US = 1_000_000


def _us_of_iso(text: str) -> int | None:
    moment = parse_iso(text)  # not strptime: a release would import and run it for one timestamp
    if moment is None:
        return None
    us = int(moment.timestamp()) * _US + moment.microsecond
    return us if _iso_of_us(us) == text else None


def _iso_of_us(us: int) -> str | None:
    try:
        return datetime.fromtimestamp(us // _US, timezone.utc).replace(microsecond=us % _US).strftime(ISO_FORMAT)
    except (OverflowError, OSError, ValueError):
        return None


def _seconds_us(value: Any) -> str:
    try:
        return str(round(float(value) * _US))
    except (TypeError, ValueError, OverflowError):
        return ""


def event_pairs(row: Row) -> list[str]:
    """The entry's field/value pairs for one finished row; ``h`` and ``c`` carry the raw host and
    command JSON (the script swaps them for numbers), ``n``, ``l`` and ``k`` are the script's.

    A --retry run's entries (docs/operating.md "Retries and jitter") have two more, after the
    others: ``a`` the attempt, ``F`` the first attempt's run id ('' on the first attempt itself:
    ``r`` is it). A run without --retry writes neither, so its entries keep the one field set."""
    started = row.get("started_at")
    started_us = _us_of_iso(started) if isinstance(started, str) else None
    flat: list[str] = []
    for field, source in EVENT_FIELDS:
        value = row.get(source) if source else None
        flat += [field, _ENCODERS.get(source, _text)(value, started_us)]
    attempt = row.get("attempt")
    if attempt is not None:
        first = row.get("first_run_id")
        flat += ["a", str(attempt), "F", "" if first in (None, row.get("run_id")) else str(first)]
    return flat


def _text(value: Any, started_us: int | None) -> str:
    return "" if value is None else str(value)


def _started_text(value: Any, started_us: int | None) -> str:
    """µs since 1970, or ``=`` and the text when it is not a time as lockrun writes it."""
    if started_us is not None:
        return str(started_us)
    return "=" + value if isinstance(value, str) else ""


def _ended_text(value: Any, started_us: int | None) -> str:
    """µs after the start, or ``=`` and the text when either is not a time as lockrun writes it."""
    ended_us = _us_of_iso(value) if isinstance(value, str) else None
    if ended_us is not None and started_us is not None:
        return str(ended_us - started_us)
    return "=" + value if isinstance(value, str) else ""


def _seconds_text(value: Any, started_us: int | None) -> str:
    return _seconds_us(value) if value is not None else ""


def _command_text(value: Any, started_us: int | None) -> str:
    return json.dumps(list(value)) if value is not None else ""


#: How a row's field is written into an entry, by the row's field (anything else: as text).
_ENCODERS: dict[str | None, Callable[[Any, int | None], str]] = {
    "started_at": _started_text, "ended_at": _ended_text, "duration_s": _seconds_text, "waited_s": _seconds_text,
    "command": _command_text,
}


def is_compact(fields: Mapping[Any, object]) -> bool:
    """Whether a stream entry is in this layout: it has a run id (``r``). Any other entry is
    someone else's, and no run."""
    return any(text_of(key) == "r" for key in fields)


def vals_by_number(flat: Mapping[Any, object] | None) -> dict[str, tuple[str, str]]:
    """The ``vals`` hash (``h``/``c`` + value -> number) as number -> (kind, value)."""
    found: dict[str, tuple[str, str]] = {}
    for key, number in (flat or {}).items():
        text = text_of(key)
        if len(text) >= 1 and text[0] in "hc":
            found[text_of(number)] = (text[0], text[1:])
    return found


def _ref(value: str, kind: str, vals: dict[str, tuple[str, str]]) -> str | None:
    if value.startswith("="):
        return value[1:]
    known = vals.get(value)
    return known[1] if known and known[0] == kind else None


def decode_event(entry_id: str, fields: Mapping[Any, object], vals: dict[str, tuple[str, str]]) -> dict[object, object]:
    """A compact entry as the fields of an ``end`` event: ``event`` ``end``, the row's fields by
    their names (what ``core.record.row_from_fields`` parses), and ``start_ms``, the start's
    server time, when the entry knows it (not when the run's ``open`` entry was gone at its end:
    lost with the server's data, or pruned)."""
    raw = {text_of(key): text_of(value) for key, value in fields.items()}
    out: dict[object, object] = {"event": "end"}
    started_us = parse_int(raw.get("t", ""))
    for field, source in EVENT_FIELDS:
        value = raw.get(field, "")
        if source is not None and value != "":
            out[source] = _DECODERS.get(source, _as_is)(value, started_us, vals)
    if raw.get("a"):
        out["attempt"] = raw["a"]
        out["first_run_id"] = raw.get("F") or raw.get("r") or None
    out["start_ms"] = _start_ms(entry_id, raw.get("k", ""))
    return {key: value for key, value in out.items() if value is not None}


def _as_is(value: str, started_us: int | None, vals: dict[str, tuple[str, str]]) -> str | None:
    return value


def _host(value: str, started_us: int | None, vals: dict[str, tuple[str, str]]) -> str | None:
    return _ref(value, "h", vals)


def _command(value: str, started_us: int | None, vals: dict[str, tuple[str, str]]) -> str | None:
    return _ref(value, "c", vals)


def _started(value: str, started_us: int | None, vals: dict[str, tuple[str, str]]) -> str | None:
    if value.startswith("="):
        return value[1:]
    return _iso_of_us(started_us) if started_us else None


def _ended(value: str, started_us: int | None, vals: dict[str, tuple[str, str]]) -> str | None:
    if value.startswith("="):
        return value[1:]
    offset = parse_int(value)
    return _iso_of_us(started_us + offset) if offset is not None and started_us is not None else None


def _seconds(value: str, started_us: int | None, vals: dict[str, tuple[str, str]]) -> str | None:
    us = parse_int(value)
    return repr(us / _US) if us is not None else None


#: How an entry's value is read back, by the row's field it holds (anything else: as it is);
#: None leaves the field out.
_DECODERS = {"host": _host, "command": _command, "started_at": _started, "ended_at": _ended, "duration_s": _seconds,
             "waited_s": _seconds}


def _start_ms(entry_id: str, before_text: str) -> str | None:
    """The start's server time: the entry's ID (ms) less the ``k`` it carries, when both read."""
    head = entry_id.split("-", 1)[0]
    before = parse_int(before_text)
    if head.isdigit() and before is not None and before >= 0:
        return str(int(head) - before)
    return None


def decode_open(run_id: object, value: object) -> tuple[str, dict[object, object]] | None:
    """An ``open`` hash entry (``START_MS FENCE {info JSON}``) as (a stream-like ID at its start,
    the fields of a ``start`` event: ``event`` ``start`` and the row's fields by their names);
    None when it is not one lockrun wrote."""
    parts = text_of(value).split(" ", 2)
    if len(parts) != 3 or not parts[0].isdigit():
        return None
    try:
        info = json.loads(parts[2])
    except (ValueError, RecursionError):
        info = None
    if not isinstance(info, dict):
        return None
    fields: dict[object, object] = {k: v for k, v in info.items() if isinstance(k, str) and isinstance(v, str)}
    fields.update(event="start", run_id=text_of(run_id), fencing_token=parts[1])
    return f"{parts[0]}-0", fields
