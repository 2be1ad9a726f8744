"""Where a user's local locks live by default: one place, whatever the environment says.

cron starts a job with ``HOME`` and ``LOGNAME`` from the passwd entry and nothing else of the
login environment: no ``XDG_STATE_HOME``, whatever a login shell sets. A default that followed
``$XDG_STATE_HOME`` (or a ``$HOME`` changed by hand, by ``sudo -E`` or by ``su`` without
``-``) gave one user two lock directories, and a job started by cron and by hand ran twice at
once. So the default is derived from what cron and every shell agree on, the passwd entry of
the user lockrun runs as: ``/var/lib/lockrun`` for root, ``~/.local/state/lockrun`` (the home
directory of the passwd entry) for everyone else. ``LOCKRUN_STATE_DIR`` and the config key
``state_dir`` are explicit choices and win, as before.

Versions before this one followed ``$XDG_STATE_HOME``. A user who set it may have a ledger and
locks there: :func:`legacy_dir` finds them, readers say so in one line (the history there is
not lost, only no longer read), and a run refuses while an older lockrun holds the same name
there (:func:`legacy_holder`).
"""

from __future__ import annotations

import os
from pathlib import Path

from lockrun.core.errors import BackendUnavailable

ROOT_STATE_DIR = Path("/var/lib/lockrun")


def passwd_home() -> Path:
    """The home directory of the passwd entry of the user lockrun runs as (``$HOME`` only when
    that user has no passwd entry, as in a container started with an arbitrary uid)."""
    import pwd

    try:
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        home = os.environ.get("HOME", "")
    if not home or not os.path.isabs(home):
        raise BackendUnavailable(
            f"cannot tell the home directory of uid {os.geteuid()}: no passwd entry and no absolute HOME;"
            " set LOCKRUN_STATE_DIR (or state_dir in the config file)"
        )
    return Path(home)


def default_state_dir() -> Path:
    """``/var/lib/lockrun`` for root, else ``~/.local/state/lockrun`` of the passwd entry."""
    if os.geteuid() == 0:
        return ROOT_STATE_DIR
    return passwd_home() / ".local" / "state" / "lockrun"


def legacy_dir(state_dir: Path) -> Path | None:
    """``$XDG_STATE_HOME/lockrun``, where lockrun kept its state before, when it holds a ledger or
    locks and is not ``state_dir`` itself (the default, in use); None otherwise. Costs nothing
    unless XDG_STATE_HOME is set."""
    xdg = os.environ.get("XDG_STATE_HOME")
    if os.geteuid() == 0 or not xdg or not os.path.isabs(xdg):
        return None
    old = Path(xdg) / "lockrun"
    try:
        if os.path.normpath(old) == os.path.normpath(state_dir) or state_dir != default_state_dir():
            return None  # in use, or LOCKRUN_STATE_DIR / state_dir chose another: nothing moved
    except BackendUnavailable:
        return None
    if not (os.path.lexists(old / "ledger.db") or os.path.lexists(old / "locks")):
        return None
    return old


def legacy_note(state_dir: Path) -> str | None:
    """One line for readers when an old ``$XDG_STATE_HOME/lockrun`` holds a ledger or locks: what
    is there is not lost, and here is how to see it or keep it (the line goes once it is moved)."""
    old = legacy_dir(state_dir)
    if old is None:
        return None
    move = ""
    if not os.path.lexists(state_dir) and os.path.isdir(state_dir.parent):
        move = f"; or move it (while no lockrun runs): mv {old} {state_dir}"
    return (
        f"note: {old} ($XDG_STATE_HOME/lockrun) holds the runs or locks of an older lockrun, which followed"
        f" XDG_STATE_HOME; this one keeps its state in {state_dir}, for cron and shells alike. Its runs:"
        f" lockrun --ledger {old}/ledger.db history; to keep using it, set LOCKRUN_STATE_DIR={old} everywhere,"
        f" cron included{move}"
    )


def legacy_holder(state_dir: Path, name: str, slots: int) -> str | None:
    """The lock file of ``name`` (any of its ``slots``) in the old location when some process
    holds it: an older lockrun started from a shell that set XDG_STATE_HOME is running the job."""
    old = legacy_dir(state_dir)
    if old is None:
        return None
    from lockrun.backends.local.files import LockFiles, locked_by_other

    files = LockFiles(old)
    paths = [files.lock_path(name)] + ([files.lock_path(name, slot) for slot in range(slots)] if slots > 1 else [])
    return next((str(path) for path in paths if locked_by_other(path)), None)
