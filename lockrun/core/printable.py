"""Text from elsewhere, made safe to print on a terminal.

Host names, commands, problems and output tails come from Redis, the ledger or another host:
anyone who can write there could put escape sequences in them that clear the operator's
screen, move the cursor over a line or retitle the window. Before such text is printed for
people, every control character is shown as its escape (``\\x1b``) instead. JSON output needs
nothing: json.dumps escapes control characters itself.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

#: How many characters of a user's value an error line quotes (docs/reference.md "Exit codes",
#: "A value in an error line"):
#: enough to recognise it; a 100 KB value is not echoed whole.
QUOTED_CHARS = 60


def printable(text: str, keep: str = "") -> str:
    """``text`` with its control characters (all but those in ``keep``) written as escapes; a byte
    that was not valid in the locale's encoding (an argv's ``$'\\xff'``) as ``\\xff`` (os_text.py)."""
    if text.isprintable():
        return text  # the usual case, checked in C
    from lockrun.core.os_text import escaped

    return "".join(ch if ch.isprintable() or ch in keep else escaped(ch) if "\ud800" <= ch <= "\udfff"
                   else ch.encode("unicode_escape").decode("ascii") for ch in text)


def command_line(argv: Sequence[str] | None) -> str:
    """An argv as a shell would take it back (``sh -c 'sleep 30'``): quoting kept, so that what
    is shown is what ran; ``-`` for none."""
    return shlex.join(argv) if argv else "-"


def clipped(text: str, limit: int = QUOTED_CHARS) -> str:
    """:func:`printable` ``text``, cut after ``limit`` characters with ``…`` and its length."""
    if len(text) <= limit:
        return printable(text)
    return f"{printable(text[:limit])}… ({len(text)} characters)"


def quoted(value: object, limit: int = QUOTED_CHARS) -> str:
    """A user's value as an error line quotes it: ``'value'`` (``"it's"``), its control characters
    and non-UTF-8 bytes escaped (``\\xff``, never ``\\udcff``), at most ``limit`` characters of it
    (``'aaaa…' (100000 characters)``). Not a string (a TOML number or list): as Python writes it.
    The one helper for every value an error line quotes."""
    if not isinstance(value, str):
        return clipped(repr(value), limit)
    quote = '"' if "'" in value and '"' not in value else "'"
    head = value if len(value) <= limit else value[:limit]
    shown = printable(head).replace(quote, "\\" + quote)
    return f"{quote}{shown}{quote}" if head is value else f"{quote}{shown}…{quote} ({len(value)} characters)"


#: A line longer than this has its words of more than 2 × QUOTED_CHARS characters cut (docs/reference.md
#: "Exit codes", "A value in an error line").
LONG_LINE = 1000


def long_words_clipped(line: str) -> str:
    """``line``, each word of it longer than 2 × QUOTED_CHARS cut as :func:`clipped` cuts a value,
    when the line is longer than LONG_LINE (a path of thousands of characters); else as it is."""
    if len(line) <= LONG_LINE:
        return line
    return re.sub(rf"[^\s']{{{2 * QUOTED_CHARS},}}", _clipped_word, line)


def _clipped_word(found: re.Match[str]) -> str:
    word = found.group(0)
    tail = word[-1] if word[-1] in ":;,." else ""  # the sentence's, not the path's
    return clipped(word[:len(word) - len(tail)]) + tail
