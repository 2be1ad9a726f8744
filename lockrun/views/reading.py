"""Opening this host's ledger for a read command, and saying what an empty answer may hide.

A ledger that does not exist yet means "no runs recorded"; one that exists but cannot be read,
or a directory no run could keep a ledger in, is an error (exit 1), because "no runs recorded"
would hide the cause. ``status`` only warns: it still shows the backend.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from lockrun.core.errors import LedgerError
from lockrun.ledger.store import Ledger
from lockrun.system import host
from lockrun.system.safefs import UnsafePath, check_ancestors, private_dir
from lockrun.views.backend_hint import other_backend_hint

if TYPE_CHECKING:
    from lockrun.config.settings import Settings


def _open(path: Path) -> Ledger | None:
    if not os.path.lexists(path):
        check_ledger_directory(path.parent)  # no runs yet, or a directory no run could write in
        return None
    return Ledger(path, known_dead=host.known_dead).open(create=False)


def open_ledger_for_reading(path: Path) -> Ledger | None:
    """The ledger if there is one, None if there is none yet; LedgerError (exit 1) when it exists
    but cannot be read, for the commands whose whole job is the ledger."""
    try:
        return _open(path)
    except LedgerError as exc:
        raise LedgerError(f"cannot read the run ledger: {exc}") from None


def open_ledger_or_warning(path: Path) -> tuple[Ledger | None, str | None]:
    """For ``status``: the ledger, or None and the warning line that says why it cannot be read."""
    try:
        return _open(path), None
    except LedgerError as exc:
        return None, f"warning: cannot read the run ledger ({exc})"


def check_ledger_directory(folder: Path) -> None:
    """Raise LedgerError when the ledger's directory exists but no run could keep a ledger there
    (a file, a dangling link, writable by others): "no runs recorded" would hide the cause."""
    try:
        if not os.path.lexists(folder):
            # Nothing has run on this host yet, or no run could: one below a directory someone
            # else controls is refused (exit 69), and "no runs recorded" would hide why.
            check_ancestors(folder, "the ledger's directory")
            return
        private_dir(folder, "the ledger's directory", create=False)
    except UnsafePath as exc:
        raise LedgerError(str(exc)) from None


def backend_hint(book: Ledger | None, resolved: Settings, names: list[str] | None) -> str | None:
    """One line when this host's recent runs used another backend than this shell (backend_hint.py)."""
    return other_backend_hint(book, resolved.backend_name, resolved.backend_where, resolved.backend_from, names)
