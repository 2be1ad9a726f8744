"""Exit codes and the small named exceptions that library modules raise.

Only ``cli/`` turns these into messages and exit codes (one ``except LockrunError`` in
``cli/main.py``); everything below it raises and lets the caller decide.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum


class ExitCode(IntEnum):
    """lockrun's own exit codes (README, "Exit codes"). The command's code passes through."""

    OK = 0
    FAILURE = 1  # a read or unlock found nothing, refused, or could not read the ledger
    USAGE = 2
    UNAVAILABLE = 69  # the lock backend cannot be reached
    BUSY = 75  # default; changeable with -E
    LOST = 76  # the lease was lost and the command was terminated
    CONFIG = 78  # bad configuration file
    TIMEOUT = 124  # --timeout expired and the command was stopped
    INTERNAL = 125  # lockrun itself failed
    NOT_EXECUTABLE = 126
    NOT_FOUND = 127
    SIGNAL_BASE = 128  # 128 + N: the command was killed by signal N

    # A code reads as its number wherever it is shown or stored (str(), f-strings, a ledger
    # row): Python 3.11 made that IntEnum's default; Python 3.10 still says "ExitCode.LOST".
    __str__ = int.__repr__


#: One line per code for the README, the man page and ``--help``; same source.
EXIT_CODE_DOCS: list[tuple[str, str, str]] = [
    ("the command's own", "the command exited", "yes"),
    ("128+N", "the command was killed by signal N", "yes"),
    ("2", "usage error: bad flag, value, name or missing command (plain `lockrun` prints its help on stderr);"
          " flags that cannot go together; a name used elsewhere with another --slots N or --once time zone", "no"),
    ("69", "the lock backend is unreachable (connect, auth or first command failed, within a bounded time;"
           " local backend: the state directory cannot be used), or holds data for this lock that lockrun did not"
           " write, or is a Redis that may evict keys (maxmemory-policy) or is out of memory", "no"),
    ("75", "lock busy (changeable with -E)", "no"),
    ("76", "the lease was lost (--on-lost terminate) or another run replaced it (--replace), and the command"
           " was terminated", "stopped"),
    ("78", "bad configuration file or Redis password file (unreadable, out of range, settings that cannot go"
           " together, or not owned by you or root)", "no"),
    ("124", "--timeout expired and the command was stopped", "stopped"),
    ("125", "lockrun itself failed", "maybe"),
    ("126 / 127", "the command is not executable / not found", "no"),
    ("0", "--once key already done: skipped as a duplicate", "no"),
]


#: report(level, message), level "info" (shown only with -v), "warn" or "error": how a run says
#: a line while it goes on; cli/ decides which lines are printed.
Report = Callable[[str, str], None]


class LockrunError(Exception):
    """Base of every error lockrun reports as one line and an exit code."""

    exit_code: int = ExitCode.INTERNAL


class UsageError(LockrunError):
    """A bad flag, value, lock name or URL given by the user."""

    exit_code = ExitCode.USAGE


class ConfigError(LockrunError):
    """A configuration file that cannot be used, or a missing required setting."""

    exit_code = ExitCode.CONFIG


class BackendUnavailable(LockrunError):
    """The lock backend could not be reached or refused us (auth, timeout, I/O)."""

    exit_code = ExitCode.UNAVAILABLE


class NothingTaken(BackendUnavailable):
    """The backend answered and took nothing (an evicting Redis refused by the acquire script, or
    one out of memory that refused the script's first write): there is no lock to give back."""


class EvictingServer(NothingTaken):
    """A Redis that may evict keys (``maxmemory`` > 0 and a ``maxmemory-policy`` other than
    ``noeviction``): a lock, a ``--once`` mark or the fleet record could vanish while they matter."""


class ForeignData(BackendUnavailable):
    """The backend holds data for this lock that lockrun did not write and cannot use
    (a Redis key of another type, a file that is not a regular file)."""


class ReplicasMissing(BackendUnavailable):
    """Fewer replicas than --replicas asks for acknowledged a write (the lock, or a renewal)."""

    def __init__(self, message: str, acknowledged: int, needed: int) -> None:
        super().__init__(message)
        self.acknowledged = acknowledged
        self.needed = needed


class WaitInterrupted(BaseException):  # noqa: N818 - not an error: a signal ended a wait
    """A signal lockrun forwards (SIGTERM, SIGINT, SIGHUP) arrived while a waiter blocked on the
    backend (run/signals.py raises it there, as Python raises KeyboardInterrupt): the wait ends at
    once. A BaseException, like KeyboardInterrupt, so that no ``except Exception`` swallows it."""


class CommandNotRunnable(LockrunError):
    """The command could not be executed: not found (127) or not executable (126)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class LedgerError(LockrunError):
    """The ledger could not be opened or written. Never fatal for ``run``; exit 1 for the
    commands whose whole job is the ledger (history, show, prune, metrics, timeline)."""

    exit_code = ExitCode.FAILURE


class FleetReadError(LockrunError):
    """The fleet record cannot answer as asked (e.g. a run id prefix that matches several runs)."""

    exit_code = ExitCode.FAILURE


class ZoneMismatch(UsageError):
    """A ``--once`` period of a name computed in another time zone than the one its runs recorded."""

    def __init__(self, name: str, recorded: str, ours: str, ours_from: str) -> None:
        super().__init__(
            f"lock {name!r} computes its --once periods in {recorded} (recorded by its earlier runs), this run in"
            f" {ours} ({ours_from}): every caller of one name must use the same zone; give --tz {recorded}"
            " (or LOCKRUN_TZ, or timezone in the config file)"
        )


class SlotsMismatch(UsageError):
    """A lock name used with another --slots N than this caller's."""

    def __init__(self, name: str, theirs: int, ours: int) -> None:
        super().__init__(
            f"lock {name!r} is in use with --slots {theirs} elsewhere, this run asked for --slots {ours}:"
            " every caller of one name must use the same N"
        )
