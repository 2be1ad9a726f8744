"""lockrun's own lines on stderr: ``lockrun: `` and one printable line, whatever a message quotes."""

from __future__ import annotations

import sys

from lockrun.core.printable import printable


def say(message: str) -> None:
    if sys.stderr is None:  # started with stderr closed, or it failed: nobody to tell
        return
    try:
        sys.stderr.write(f"lockrun: {printable(message, keep=chr(10))}\n")  # messages quote what others wrote
        sys.stderr.flush()
    except (OSError, ValueError):
        # stderr is full or gone: nobody to tell. Dropped, so that Python's flush at exit does not
        # fail on it again and turn lockrun's exit status into 120.
        sys.stderr = None
