"""Where a user's local locks live by default: one place, whatever the environment says.

cron starts a job with ``HOME`` and ``LOGNAME`` from the passwd entry and nothing else of the
login environment: no ``XDG_STATE_HOME``, whatever a login shell sets. A default that followed
``$XDG_STATE_HOME`` (or a ``$HOME`` changed by hand, by ``sudo -E`` or by ``su`` without
``-``) gave one user two lock directories, and a job started by cron and by hand ran twice at
once. So the default is derived from what cron and every shell agree on, the passwd entry of
the user lockrun runs as: ``/var/lib/lockrun`` for root, ``~/.local/state/lockrun`` (the home
directory of the passwd entry) for everyone else. ``LOCKRUN_STATE_DIR`` and the config key
``state_dir`` are explicit choices and win.
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
