"""``lockrun pause`` and ``resume`` (docs/operating.md "Pausing a job"): what each asks of the backend,
and the line it answers with. A pause never touches the lock, ``unlock`` never touches a pause.
"""

from __future__ import annotations

import getpass
import os
from typing import TYPE_CHECKING

from lockrun.backends.pause import PauseRequest
from lockrun.system import host

if TYPE_CHECKING:
    from lockrun.backends.protocol import Backend


def who_pauses() -> str:
    """The user who asked for the pause, as status shows it."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): its number
        return str(os.getuid())


def pause_names(backend: Backend, names: list[str], for_s: float | None, until_epoch_s: float | None,
                reason: str) -> list[str]:
    """Pause each name; one line per name for stdout."""
    request = PauseRequest(who=who_pauses(), where=host.hostname(), reason=reason, for_s=for_s,
                           until_epoch_s=until_epoch_s)
    lines = []
    for name in names:
        paused = backend.pause(name, request)
        lines.append(f"{name}: {paused.describe()}")
    return lines


def resume_names(backend: Backend, names: list[str]) -> list[str]:
    """Resume each name; one line per name for stdout."""
    return [f"{name}: resumed" if backend.resume(name) else f"{name}: was not paused" for name in names]
