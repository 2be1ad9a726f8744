"""The settings a block resolves, as the CLI resolves a run's (docs/reference.md "Every setting"):
argument > environment > the config file's ``[job.NAME]`` > its top level > default, by the same
table and resolver (config/options.py, config/resolve.py). One function, :func:`block_settings`.
"""

from __future__ import annotations

from typing import Any

from lockrun.config import settings
from lockrun.config.resolve import resolve


def block_settings(name: str, *, redis_url: str | None, ttl: float | None) -> settings.Settings:
    """What a block of ``name`` runs with: ``redis_url`` and ``ttl`` as given (already checked),
    else ``LOCKRUN_REDIS_URL`` and ``LOCKRUN_TTL``, else the config file's ``[job.NAME]`` table
    (``ttl``), else its top level (``LOCKRUN_CONFIG``, else the default places), else the defaults
    (the local backend, 60 s). ``LOCKRUN_PREFIX``, ``LOCKRUN_LEDGER``, ``LOCKRUN_REDIS_CA``,
    ``LOCKRUN_STATE_DIR`` and the password file apply as for the CLI.

    A bad environment value raises UsageError, a bad config file ConfigError (both LockrunError)."""
    given: dict[str, Any] = {}
    if redis_url is not None:
        given["redis_url"] = redis_url
    if ttl is not None:
        given["ttl"] = ttl
    resolved = settings.Settings(resolve(given, name))
    if redis_url is not None:
        resolved.redis_url_from = "redis_url="  # the argument, as a message names where the URL came from
    return resolved
