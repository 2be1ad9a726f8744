"""Which backend a command talks to: Redis when a URL is configured, else the local one; and how
long one backend call may take. A configured but unreachable Redis is exit 69, never the local
backend instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from lockrun.backends.protocol import Backend
from lockrun.backends.values import FleetRetention


def call_timeout_for(ttl: float, configured: float | None = None) -> float:
    """The bound on one backend call: a fifth of the lease, between 50 ms and 5 s.

    A renewal that hangs longer than that must leave time for a retry and for
    stopping the command before the lease can expire, so a configured timeout
    (``socket_timeout`` / ``connect_timeout``) is capped at a third of the lease.
    """
    if configured is not None:
        return min(configured, ttl / 3.0)
    return min(5.0, max(0.05, ttl / 5.0))


class BackendSettings(Protocol):
    """What :func:`open_backend` reads of the resolved settings (``settings.Settings`` is one)."""

    @property
    def redis_url(self) -> str | None: ...
    @property
    def state_dir(self) -> str | Path | None: ...
    @property
    def prefix(self) -> str: ...
    @property
    def redis_ca(self) -> str | None: ...
    @property
    def fleet_keep_runs(self) -> int: ...
    @property
    def fleet_keep_days(self) -> int: ...
    def redis_password(self) -> str | None: ...


def open_backend(
    settings: BackendSettings, timeout: float, connect_timeout: float | None = None, replicas: int | str = 0,
    allow_eviction: bool = False,
) -> Backend:
    """Redis when a URL is configured, else the local backend in the state directory.

    A configured but unreachable Redis is never replaced by the local backend:
    that is exit 69. Redis is imported only when it is used. ``replicas`` (``--replicas``:
    a number or "all") is how many Redis replicas must acknowledge an acquire or renewal.
    ``allow_eviction``: acquire even on a Redis that may evict keys (else exit 69).
    """
    if not settings.redis_url:
        from lockrun.backends.local.backend import LocalBackend

        return LocalBackend(settings.state_dir)
    from lockrun.backends.redis.backend import RedisBackend

    return RedisBackend(
        settings.redis_url, settings.prefix, timeout, ca=settings.redis_ca, connect_timeout=connect_timeout,
        fleet=FleetRetention(settings.fleet_keep_runs, settings.fleet_keep_days),
        password=settings.redis_password(),
        replicas=replicas,
        allow_eviction=allow_eviction,
    )
