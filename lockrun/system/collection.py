"""Python's cyclic garbage collector around lockrun's start-up (docs/internals.md "Start-up").

A run imports some 60 modules of its own besides click, redis-py and sqlite3, and each full
collection while they load walks every object loaded so far: some 8 % of the instructions of an
uncontended run went to collections that freed nothing. The command's entry point holds the
collector off until the run has its backend (every import behind it); then the objects of
start-up are frozen (they live as long as the process: later collections need not walk them,
nor touch their pages, which the processes lockrun forks share) and collection resumes. This is
the order the gc module's documentation gives for a process that forks.

A process that never held it off (lockrun imported as a library, the tests) is left as it is.
"""

from __future__ import annotations

import gc

_held = False


def hold_for_startup() -> None:
    """No cyclic collection until :func:`resume_after_startup` (the ``lockrun`` command's first step)."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def resume_after_startup() -> None:
    """Start-up is over: freeze what it made and collect again, if :func:`hold_for_startup` held it off."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()
