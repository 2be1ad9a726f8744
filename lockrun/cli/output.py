"""lockrun's own lines on stderr: ``lockrun: `` and one printable line, whatever a message quotes; and
the lines that say a change was made, which a stdout that cannot be written does not turn into a failure."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

from lockrun.core.printable import QUOTED_CHARS, clipped, printable

#: A message longer than this has its words of more than 2 × QUOTED_CHARS characters cut (docs/reference.md
#: "Exit codes": an error line shows at most QUOTED_CHARS characters of a value).
LONG_MESSAGE = 1000
_LONG_WORD = re.compile(rf"[^\s']{{{2 * QUOTED_CHARS},}}")


def say(message: str) -> None:
    if sys.stderr is None:  # started with stderr closed, or it failed: nobody to tell
        return
    if len(message) > LONG_MESSAGE:  # a path or value of thousands of characters, maybe twice: cut each
        message = _LONG_WORD.sub(_clipped_word, message)
    try:
        sys.stderr.write(f"lockrun: {printable(message, keep=chr(10))}\n")  # messages quote what others wrote
        sys.stderr.flush()
    except (OSError, ValueError):
        # stderr is full or gone: nobody to tell. Dropped, so that Python's flush at exit does not
        # fail on it again and turn lockrun's exit status into 120.
        sys.stderr = None


def print_applied(lines: Iterable[str], applied: str) -> None:
    """Print the lines that say a change was made (``applied`` says it in the warning: "the pause
    holds all the same"). The change is made
    whether or not they can be written: stdout closed or full is a warning here, not exit 1, so
    that ``lockrun pause … || alert`` never alerts on a pause that holds (docs/reference.md "Exit codes").
    A reader that went away early (``| head -1``) is no error at all."""
    import click

    from lockrun.system.own_output import OutputFailed

    try:
        for line in lines:
            click.echo(line)
        if sys.stdout is not None:
            sys.stdout.flush()
    except OutputFailed as exc:
        if not exc.broken_pipe:
            say(f"{exc.reason}; {applied}")


def _clipped_word(found: re.Match[str]) -> str:
    word = found.group(0)
    tail = word[-1] if word[-1] in ":;,." else ""  # the sentence's, not the path's
    return clipped(word[:len(word) - len(tail)]) + tail
