"""Reading what redis-py hands back: bytes or str, numbers as bytes, flat field/value lists.

redis-py types every reply as ``Any``; these helpers turn one into the value lockrun
expects, and say None (never raise) where a key holds something lockrun did not write.
"""

from __future__ import annotations


def text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def int_or_none(value: object) -> int | None:
    if not isinstance(value, (int, str, bytes, bytearray, float)):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def script_int(reply: object) -> int:
    """A whole number that one of lockrun's own scripts returned (never data from a key)."""
    number = int_or_none(reply)
    if number is None:
        raise TypeError(f"a lockrun script returned {reply!r}, not a whole number")
    return number


def expiry_s(pttl: object) -> float | None:
    """The lease left in seconds from a PTTL reply; None for no expiry (-1) or no key (-2)."""
    ms = int_or_none(pttl)
    return ms / 1000.0 if ms is not None and ms >= 0 else None


def pairs(flat: object) -> dict[object, object]:
    """A hash from a flat ``field, value, ...`` list (HGETALL inside a script); {} for anything else."""
    if not isinstance(flat, list):
        return {}
    return dict(zip(flat[0::2], flat[1::2], strict=False))  # an odd count drops the stray field


def is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
