"""Text that came from the kernel as bytes and need not be valid in the locale's encoding.

An argv, an environment variable, a path or a host name on Linux is bytes; Python decodes
them with ``surrogateescape``, so ``lockrun -- $'\\xff'`` gives the str ``'\\udcff'``. Such a str
round-trips to the kernel (the command runs as it would without lockrun, with its own bytes)
but cannot be encoded anywhere else: SQLite, redis-py and a UTF-8 stdout refuse it. Every
record of a run (the ledger row, the fleet record, the holder's description, webhooks) keeps
:func:`escaped` text instead: the undecodable bytes written as ``\\xff``, as the shell's
``$'\\xff'`` shows them. (A command that itself contains the four characters ``\\xff`` looks
the same in the record; the record is for people, the command ran with its real bytes.)
"""

from __future__ import annotations

from typing import Any


def escaped(text: str) -> str:
    """``text`` with each byte Python could not decode (a lone surrogate) written as ``\\xNN``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return text  # the usual case, checked in C
    return "".join(_escape(char) for char in text)


def _escape(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    if 0xD800 <= code <= 0xDFFF:  # any other lone surrogate
        return f"\\u{code:04x}"
    return char


def escaped_all(value: Any) -> Any:
    """``value`` (a str, or a list or dict of them, nested) with every str :func:`escaped`."""
    if isinstance(value, str):
        return escaped(value)
    if isinstance(value, list):
        return [escaped_all(item) for item in value]
    if isinstance(value, tuple):
        return tuple(escaped_all(item) for item in value)
    if isinstance(value, dict):
        return {key: escaped_all(item) for key, item in value.items()}
    return value
