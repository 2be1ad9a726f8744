"""Reading back what lockrun stored, which someone else may have written (docs/operating.md "Operating it").

Everything read from Redis, the state directory or the ledger goes through one of these. Two
families: the lenient readers (``parse_*``) turn anything they cannot use into None or an empty
value, for records where a missing field is fine (the fleet record, ledger rows); the strict ones
(``as_*``) raise :class:`Unusable` naming what is wrong, for a holder's record, where an unusable
field makes the whole lock "malformed" rather than quietly unknown.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import TypeVar

from lockrun.core.clock import parse_iso
from lockrun.core.printable import quoted

Number = TypeVar("Number", int, float)
# Redis integers are signed 64-bit; anything wider was not written by lockrun.
INT_LIMIT = 2**63


def text_of(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _parsed_number(value: object, convert: Callable[[str], Number], limit: int) -> Number | None:
    """``convert`` of a stored number's text (str or bytes, at most ``limit`` characters), else None."""
    if not isinstance(value, (str, bytes)):
        return None
    text = text_of(value).strip()
    if not text or len(text) > limit:
        return None
    try:
        return convert(text)
    except (ValueError, RecursionError):  # deeply nested JSON raises the latter
        return None


def parse_int(value: object) -> int | None:
    """An integer from a stored string, or None when it is not one lockrun could have written."""
    if isinstance(value, bool):
        return None
    number = value if isinstance(value, int) else _parsed_number(value, int, 20)
    return number if number is not None and -INT_LIMIT <= number < INT_LIMIT else None


def parse_float(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    number = float(value) if isinstance(value, (int, float)) else _parsed_number(value, float, 40)
    return number if number is not None and math.isfinite(number) else None


def parse_command(value: object) -> list[str]:
    """A JSON list of strings (an argv); anything else reads as an empty command."""
    try:
        parsed = json.loads(text_of(value)) if isinstance(value, (str, bytes)) else value
    except (ValueError, RecursionError):
        return []
    if not isinstance(parsed, list):
        return []
    return [item for item in parsed if isinstance(item, str)]


def parse_bool(value: object) -> bool | None:
    """``1``/``0`` as stored (or a JSON boolean); anything else reads as None."""
    if isinstance(value, bool):
        return value
    text = text_of(value).strip() if isinstance(value, (str, bytes)) else None
    return {"1": True, "0": False}.get(text or "")


def text_or_none(value: object) -> str | None:
    """A stored text column: None stays None, bytes are decoded, anything else is its text."""
    if value is None or isinstance(value, str):
        return value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def sql_int(value: object) -> int | None:
    """A stored integer column: an int, or a whole finite float; anything else is None."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --- strict: a holder's record -----------------------------------------------------------

MAX_TEXT = 1024  # longer text fields are cut (a host name has at most 255 characters)
_INTEGER_RE = re.compile(r"-?\d{1,40}")


_MACHINE_ID_RE = re.compile(r"[0-9a-f]{32}")  # machine-id(5): 32 lower-case hex digits


class Unusable(ValueError):
    """One field's value is not what lockrun writes there."""


Parsed = TypeVar("Parsed")


def as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise Unusable(f"a {type(value).__name__}, not text")
    if len(value) > MAX_TEXT:
        raise Unusable(f"{len(value)} characters long")
    return value or None


def as_int(value: object, low: int, high: int) -> int | None:
    number = _whole(value)
    if number is not None and not low <= number <= high:
        raise Unusable(f"{number} is outside {low}..{high}")
    return number


def _whole(value: object) -> int | None:
    """A whole number as it is stored: digits (an empty field: None), an integral float, an int."""
    if isinstance(value, (bytes, str)):
        return _whole_text(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unusable(f"a {type(value).__name__}, not a whole number")
    return value


def _whole_text(value: bytes | str) -> int | None:
    text = as_text(value)
    if text is None:
        return None  # an empty field: not known yet (child_pid before the first renewal)
    if not _INTEGER_RE.fullmatch(text.strip()):
        raise Unusable(f"{quoted(text, 40)} is not a whole number")
    return int(text)


def as_command(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (bytes, str)):
        value = _json_of(value)
    if not isinstance(value, list) or not all(isinstance(arg, str) for arg in value):
        raise Unusable("not a list of strings")
    return [arg for arg in value if isinstance(arg, str)]  # all of them: a list[str] for the type checker


def _json_of(value: bytes | str) -> object:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    try:
        return json.loads(text) if text else []
    except (ValueError, RecursionError):
        raise Unusable("not a JSON list") from None


def int_between(low: int, high: int) -> Callable[[object], int | None]:
    return lambda value: as_int(value, low, high)


def as_time(value: object) -> str | None:
    text = as_text(value)
    if text is not None and parse_iso(text) is None:
        raise Unusable(f"{quoted(text, 40)}, not an ISO 8601 UTC time")
    return text


def as_machine_id(value: object) -> str | None:
    text = as_text(value)
    if text is not None and not _MACHINE_ID_RE.fullmatch(text):
        raise Unusable(f"{quoted(text, 40)} is not a machine id (32 hex digits)")
    return text


def written_by_others(what: str) -> str:
    """A ``problem`` of a record lockrun did not write, as both backends word it."""
    return f"{what}: written by something other than lockrun"
