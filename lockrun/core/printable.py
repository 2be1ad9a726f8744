"""Text from elsewhere, made safe to print on a terminal.

Host names, commands, problems and output tails come from Redis, the ledger or another host:
anyone who can write there could put escape sequences in them that clear the operator's
screen, move the cursor over a line or retitle the window. Before such text is printed for
people, every control character is shown as its escape (``\\x1b``) instead. JSON output needs
nothing: json.dumps escapes control characters itself.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence


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
