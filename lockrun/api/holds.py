"""The names this process's blocks hold (docs/internals.md "The Python API: a block as a run").

A POSIX lock belongs to the process, not to a thread, and closing any descriptor of the lock file
drops it: on the local backend a block takes its name in this process first, and only the owner
of the name touches the file. With Redis each block has its own token; only a block of a name
inside a block of the same name, in one thread or task (which could only wait for itself), is
refused at once.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from lockrun.api.delivery import after_fork_in_child
from lockrun.backends.protocol import Backend

#: Who holds a name in this process: a thread (its ident) or an asyncio task (its id).
Owner = tuple[str, int]


class Holds:
    """The names this process's blocks hold or wait for, and the local backends kept for them."""

    def __init__(self) -> None:
        self.start_afresh()

    def start_afresh(self) -> None:
        """Nothing held, nothing kept (a new instance, or a child of fork)."""
        self.changed = threading.Condition()
        self.owners: dict[tuple[str, ...], set[Owner]] = {}
        # The local backend of a name whose last wait left a helper asleep on its lock file, for the next
        # block of the name: that helper's descriptor may be closed only by it (backends/local/waiting.py).
        self.local_backends: dict[tuple[str, ...], Backend] = {}

    def take(self, key: tuple[str, ...], owner: Owner, *, exclusive: bool, until: float,
             cancelled: Callable[[], bool] = lambda: False) -> str | None:
        """Hold ``key`` for ``owner``; None when held, else why not: "self" (``owner`` holds it
        already: a block of the name inside another), "process" (``exclusive``: another owner of this
        process holds it, and did not let go before ``until``, monotonic, or the wait was
        ``cancelled``: see :meth:`wake`)."""
        with self.changed:
            while True:
                owners = self.owners.setdefault(key, set())
                if owner in owners:
                    return "self"
                if not exclusive or not owners:
                    owners.add(owner)
                    return None
                left = until - time.monotonic()
                if left <= 0 or cancelled():
                    return "process"
                self.changed.wait(left)

    def wake(self) -> None:
        """Every wait in :meth:`take` looks again (a waiting task was cancelled)."""
        with self.changed:
            self.changed.notify_all()

    def give(self, key: tuple[str, ...], owner: Owner) -> None:
        with self.changed:
            owners = self.owners.get(key)
            if owners is not None:
                owners.discard(owner)
                if not owners:
                    del self.owners[key]
            self.changed.notify_all()

    def local_backend(self, key: tuple[str, ...], make: Callable[[], Backend]) -> Backend:
        """The local backend of the name ``key`` (called by the owner of that name only)."""
        backend = self.local_backends.get(key)
        if backend is None:
            backend = self.local_backends[key] = make()
        return backend

    def retire(self, key: tuple[str, ...]) -> None:
        """Forget the local backend of ``key``: it was closed, and nothing of it outlives that."""
        self.local_backends.pop(key, None)


HOLDS = Holds()


def _forked() -> None:
    # A child of fork holds none of its parent's locks (nor the kernel locks: POSIX locks are not
    # inherited), and no thread of the parent runs in it (one may have held the condition's lock).
    HOLDS.start_afresh()
    after_fork_in_child()


os.register_at_fork(after_in_child=_forked)
