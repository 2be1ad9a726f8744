"""The exceptions of the Python API: each a :class:`~lockrun.core.errors.LockrunError` carrying the
exit code the CLI gives the same outcome (a management command may exit with it).

    LockrunError
      Busy          the lock is held elsewhere (after ``wait``): the block did not run
        Paused      an operator paused the name (``lockrun pause``): the block did not run
      Unavailable   the backend could not be reached (within a bounded time): the block did not run
      LeaseLost     the lease was lost while the block ran, or ``check()`` outside a held lease

Bad arguments are Python's own ``TypeError`` and ``ValueError`` (they are the caller's bugs, not
the lock's state); a bad configuration file or environment value is a ``LockrunError``.
"""

from __future__ import annotations

from lockrun.core.errors import ExitCode, LockrunError

__all__ = ["Busy", "LeaseLost", "LockrunError", "Paused", "Unavailable"]


class Busy(LockrunError):
    """The lock ``name`` is held elsewhere, and ``wait`` ran out: the block did not run."""

    __module__ = "lockrun"  # its public name, in tracebacks and notes (lockrun exports it)

    exit_code = ExitCode.BUSY

    def __init__(self, message: str, *, name: str = "") -> None:
        super().__init__(message)
        self.name = name


class Paused(Busy):
    """The name is paused (``lockrun pause``): the block did not run, as a run of the CLI is skipped."""

    __module__ = "lockrun"


class Unavailable(LockrunError):
    """The lock backend could not be reached (connect, auth or a call failed within its bound): the
    block did not run. Never the local backend instead of a configured Redis."""

    __module__ = "lockrun"

    exit_code = ExitCode.UNAVAILABLE


class LeaseLost(LockrunError):
    """The lease of ``name`` was lost while the block ran (``reason`` says how), or :meth:`Lease.check`
    was called where no lease is held (after the block, or in a process forked inside it)."""

    __module__ = "lockrun"

    exit_code = ExitCode.LOST

    def __init__(self, message: str = "the lease was lost", *, name: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.reason = reason or message
