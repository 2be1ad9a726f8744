"""How a block ended (or why it did not start), as a run's outcome: the ledger status, the exit
status the CLI would give the same end, and the note (docs/python.md "What a block records").
Pure: no clock, no backend.

    the block ended without an exception, or with SystemExit(0)  succeeded  exit 0
    it raised (SystemExit(N): exit N, else 1)                    failed     note: raised TYPE
    KeyboardInterrupt (Ctrl-C, SIGINT)                            killed     signal 2, exit 130
    the lease was lost (on_lost="raise"), whatever it raised      lost       exit 76, note: why
    the lease was lost under on_lost="flag" and it went on        as above, with a note that it was lost
                                                                 (--on-lost continue's row);
                                                                 lost if it raised LeaseLost (check())
    the task waiting for the lock was cancelled as it got it     error      note: cancelled before the
    (lock_async: NotStarted; the lease goes straight back)                  block started
"""

from __future__ import annotations

import signal

from lockrun.api.errors import Busy, Paused, Unavailable
from lockrun.core.errors import ExitCode, LockrunError
from lockrun.core.record import Status
from lockrun.run.outcome import Outcome


class NotStarted(BaseException):
    """The block was given up between taking the lock and starting: a ``lock_async`` task cancelled
    while the acquire's answer was on its way. Not a failure of the block (it never ran)."""


def type_name(exc: BaseException) -> str:
    """``ValueError``, ``myapp.jobs.SyncError``: what a note says an exception was (never its
    message, which may hold anything, secrets included)."""
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _exit_status(code: object) -> int:
    """SystemExit's code as a process would exit with it: None 0, a number as is (within 0-255), else 1."""
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    return 1


def block_outcome(
    error: BaseException | None, *, lost: str | None, raise_on_lost: bool, lost_raised: bool, fencing_token: int,
) -> Outcome:
    """The outcome of a block that ended with ``error`` (None: it did not raise) under a lease that
    was lost for the reason ``lost`` (None: it was kept). ``raise_on_lost``: on_lost="raise";
    ``lost_raised``: ``error`` is the LeaseLost of this very lease (delivered, or from ``check()``)."""
    if lost is not None and (raise_on_lost or lost_raised):
        note = f"lease lost: {lost}"
        if error is not None and not lost_raised:
            note += f"; the block raised {type_name(error)}"
        return Outcome(exit_code=ExitCode.LOST, status=Status.LOST, fencing_token=fencing_token, note=note,
                       lease_lost=True)
    outcome = _ended(error, fencing_token)
    if lost is not None:  # on_lost="flag": the block went on (--on-lost continue's row)
        outcome = outcome.noted(f"lease lost: {lost}")._replace(lease_lost=True)
    return outcome


def _ended(error: BaseException | None, fencing_token: int) -> Outcome:
    """The outcome of what the block did, the lease aside."""
    if error is None or (isinstance(error, SystemExit) and _exit_status(error.code) == 0):
        return Outcome(exit_code=ExitCode.OK, status=Status.SUCCEEDED, command_exit=0, fencing_token=fencing_token)
    if isinstance(error, NotStarted):
        return Outcome(exit_code=ExitCode.SIGNAL_BASE + int(signal.SIGINT), status=Status.ERROR,
                       fencing_token=fencing_token, error="cancelled before the block started (lock_async)")
    if isinstance(error, KeyboardInterrupt):
        sigint = int(signal.SIGINT)
        return Outcome(exit_code=ExitCode.SIGNAL_BASE + sigint, status=Status.KILLED, signal=sigint,
                       fencing_token=fencing_token, note="KeyboardInterrupt")
    code = _exit_status(error.code) if isinstance(error, SystemExit) else 1
    what = f"SystemExit({code})" if isinstance(error, SystemExit) else type_name(error)
    return Outcome(exit_code=code, status=Status.FAILED, command_exit=code, fencing_token=fencing_token,
                   note=f"raised {what}")


def not_run_outcome(exc: BaseException) -> Outcome:
    """The outcome of a block that did not start: its entry raised ``exc``."""
    if isinstance(exc, Paused):
        return Outcome(exit_code=ExitCode.OK, status=Status.PAUSED, note=str(exc))
    if isinstance(exc, Busy):
        return Outcome(exit_code=ExitCode.BUSY, status=Status.BUSY, note=str(exc))
    if isinstance(exc, Unavailable):
        return Outcome(exit_code=ExitCode.UNAVAILABLE, status=Status.UNAVAILABLE, error=str(exc))
    if isinstance(exc, LockrunError):
        return Outcome(exit_code=exc.exit_code, status=Status.ERROR, error=str(exc))
    if isinstance(exc, KeyboardInterrupt):
        return Outcome(exit_code=ExitCode.SIGNAL_BASE + 2, status=Status.ERROR,
                       error="interrupted (KeyboardInterrupt) before the block started")
    return Outcome(exit_code=ExitCode.INTERNAL, status=Status.ERROR,
                   error=f"interrupted before the block started: {exc!r}")
