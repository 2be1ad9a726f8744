"""Run ids: one format wherever a run id is made, shown or sent (``LOCKRUN_RUN_ID``, the ledger,
the fleet record, pings, webhooks, syslog): a canonical UUID, ``8-4-4-4-12`` lower-case hex with
dashes, since that is the only ``rid`` healthchecks accepts (docs/operating.md "Telling someone").

A run id is looked up by its hex digits, dashes ignored, so that a prefix given with or without
its dashes (``3f2a9c1e-4b7d``, ``3f2a9c1e4b7d``) finds it.
"""

from __future__ import annotations

import uuid


def new_run_id() -> str:
    """A fresh random run id: ``3f2a9c1e-4b7d-4e21-9a0c-5d6e7f8091a2``."""
    return str(uuid.uuid4())


def run_id_digits(text: str) -> str:
    """A run id or a prefix of one as its hex digits alone, lower case: what lookups compare."""
    return text.replace("-", "").lower()
