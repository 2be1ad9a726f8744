"""The settings a block resolves, as the CLI resolves a run's: argument > environment > config file
> default (docs/reference.md "Settings"). One function, :func:`block_settings`, so that the day the
CLI reads per-name tables (``[job.NAME]``) the API follows by changing this one place.
"""

from __future__ import annotations

import os

from lockrun.config import settings
from lockrun.config.values import parse_seconds


def _env(key: str) -> str | None:
    """An environment variable as click reads a flag's ``envvar``: unset or empty is no value."""
    return os.environ.get(key) or None


def block_settings(name: str, *, redis_url: str | None, ttl: float | None) -> settings.Settings:
    """What a block of ``name`` runs with: ``redis_url`` and ``ttl`` as given (already checked),
    else ``LOCKRUN_REDIS_URL`` and ``LOCKRUN_TTL``, else the config file (``LOCKRUN_CONFIG``, else
    the default places), else the defaults (the local backend, 60 s). ``LOCKRUN_PREFIX``,
    ``LOCKRUN_LEDGER``, ``LOCKRUN_REDIS_CA``, ``LOCKRUN_STATE_DIR`` and the password file apply as
    for the CLI. ``name`` is for per-name settings (not yet: the whole file applies to every name).

    A bad environment value raises UsageError, a bad config file ConfigError (both LockrunError)."""
    del name  # the config file has no per-name tables yet
    url_from = "redis_url=" if redis_url is not None else "LOCKRUN_REDIS_URL"
    if redis_url is None:
        redis_url = _env("LOCKRUN_REDIS_URL")
    if ttl is None and (ttl_env := _env("LOCKRUN_TTL")) is not None:
        ttl = parse_seconds(ttl_env, "LOCKRUN_TTL", minimum=1)
    return settings.resolve(
        config=_env("LOCKRUN_CONFIG"), redis_url=redis_url, redis_ca=_env("LOCKRUN_REDIS_CA"),
        prefix=_env("LOCKRUN_PREFIX"), ledger=_env("LOCKRUN_LEDGER"), ttl=ttl,
        redis_url_from=url_from if redis_url else None,
    )
