"""lockrun's own lines on stderr: ``lockrun: `` and one printable line, whatever a message quotes; and
the lines that say a change was made, which a stdout that cannot be written does not turn into a failure."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from lockrun.core.printable import long_words_clipped, printable


def say(message: str) -> None:
    if sys.stderr is None:  # started with stderr closed, or it failed: nobody to tell
        return
    message = long_words_clipped(message)  # a path of thousands of characters, maybe twice: cut each
    try:
        sys.stderr.write(f"lockrun: {printable(message)}\n")  # one line: a newline in what it quotes is written as \n
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

