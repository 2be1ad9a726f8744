"""Validated values and the settings precedence: flag > environment > config file > default.

Flags and environment variables arrive together from the CLI (click reads the
``envvar``s and leaves ``None`` when neither was given); this module fills the
gaps from the first config file that exists, then from the defaults.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from lockrun.backends.redis.url import redact_url, url_without_credentials, validate_redis_url
from lockrun.config.file import load_config, read_password_file
from lockrun.config.values import parse_replicas
from lockrun.core.defaults import (
    DEFAULT_FLEET_KEEP_DAYS,
    DEFAULT_FLEET_KEEP_RUNS,
    DEFAULT_PREFIX,
    DEFAULT_RETRY_DELAY_S,
    DEFAULT_TTL,
)
from lockrun.core.masking import BUILT_IN, Masking, parse_masking

# --- resolved settings ------------------------------------------------------------------


class Settings(NamedTuple):
    """The global settings every subcommand shares, after precedence is applied."""

    redis_url: str | None
    prefix: str
    state_dir: Path
    ledger_path: Path
    ttl: float
    config_path: Path | None
    ledger_keep_days: int | None = None  # prune finished runs older than this, now and then
    metrics_file: Path | None = None  # Prometheus textfile rewritten after each run
    redis_ca: str | None = None  # CA file for rediss:// URLs
    socket_timeout: float | None = None  # None: derived from the TTL (TTL/5, 50 ms to 5 s)
    connect_timeout: float | None = None
    notify_urls: tuple[str, ...] = ()
    min_hold: float | None = None
    fleet_keep_runs: int = DEFAULT_FLEET_KEEP_RUNS
    fleet_keep_days: int = DEFAULT_FLEET_KEEP_DAYS
    redis_password_file: Path | None = None  # the password, kept out of argv and the environment
    redis_url_from: str | None = None  # "--redis-url", "LOCKRUN_REDIS_URL" or "redis_url in FILE"
    replicas: int | str = 0  # the config file's `replicas` (--replicas overrides it)
    allow_eviction: bool = False  # the config file's `allow_eviction` (--allow-eviction sets it too)
    timezone: str | None = None  # the config file's `timezone` (--tz and LOCKRUN_TZ win over it)
    output_tail: bool = True  # the config file's `output_tail` (--no-tail turns it off too)
    output: str = "always"  # the config file's `output` (--output wins over it)
    syslog: bool = False  # the config file's `syslog` (--syslog sets it too)
    # The config file's `retry`, `retry_delay`, `jitter` and `success_exit` (their flags win over them).
    retry: int = 0
    retry_delay: float = DEFAULT_RETRY_DELAY_S
    jitter: float = 0.0
    success_exit: tuple[int, ...] = ()
    # The config file's `redact` and `record_command`: what the recorded command line hides
    # (docs/fleet.md "What is published").
    masking: Masking = BUILT_IN

    @property
    def backend_name(self) -> str:
        return "redis" if self.redis_url else "local"

    @property
    def backend_where(self) -> str:
        """The Redis URL without credentials, or the local state directory (as the ledger records it)."""
        from lockrun.core.os_text import escaped  # a path need not be UTF-8: the ledger keeps it escaped

        return url_without_credentials(self.redis_url) if self.redis_url else escaped(str(self.state_dir))

    @property
    def backend_from(self) -> str:
        """How the backend was chosen, for a person: where the URL came from, or that none was set."""
        return self.redis_url_from or "no Redis URL configured"

    @property
    def redacted_url(self) -> str | None:
        return redact_url(self.redis_url) if self.redis_url else None

    def redis_password(self) -> str | None:
        """The password from the password file, if one is configured (read only when Redis is used)."""
        return read_password_file(self.redis_password_file) if self.redis_password_file else None


def default_state_dir() -> Path:
    """``/var/lib/lockrun`` for root, else ``~/.local/state/lockrun`` of the user's passwd entry: never
    ``$XDG_STATE_HOME`` or ``$HOME``, which cron does not set as a login shell does (state_home.py)."""
    from lockrun.config.state_home import default_state_dir as from_passwd

    return from_passwd()


def resolve(
    *,
    config: str | None = None,
    redis_url: str | None = None,
    redis_ca: str | None = None,
    prefix: str | None = None,
    ledger: str | None = None,
    ttl: float | None = None,
    redis_url_from: str | None = None,
) -> Settings:
    """Apply flag/env (already merged by the caller, who says in ``redis_url_from`` which of the
    two gave ``redis_url``) > config file > default."""
    config_path, file = load_config(config)
    state_dir_env = os.environ.get("LOCKRUN_STATE_DIR")
    state_dir = Path(state_dir_env or file.get("state_dir") or default_state_dir()).expanduser()
    if redis_url is not None:
        validate_redis_url(redis_url)
    elif file.get("redis_url"):
        redis_url_from = f"redis_url in {config_path}"
    redis_url = redis_url if redis_url is not None else file.get("redis_url")
    ledger_path = Path(ledger or file.get("ledger") or state_dir / "ledger.db").expanduser()
    password_file = os.environ.get("LOCKRUN_REDIS_PASSWORD_FILE") or file.get("redis_password_file")
    return Settings(
        redis_url=redis_url or None,
        prefix=prefix if prefix is not None else file.get("prefix", DEFAULT_PREFIX),
        state_dir=state_dir,
        ledger_path=ledger_path,
        ttl=float(ttl if ttl is not None else file.get("ttl", DEFAULT_TTL)),
        config_path=config_path,
        ledger_keep_days=file.get("ledger_keep_days"),
        metrics_file=Path(file["metrics_file"]).expanduser() if file.get("metrics_file") else None,
        notify_urls=tuple(file.get("notify_urls", ())),
        min_hold=file.get("min_hold"),  # seconds (config/file.py reads every time value)
        replicas=parse_replicas(file["replicas"], "replicas") if "replicas" in file else 0,
        redis_ca=redis_ca or file.get("redis_ca"),
        socket_timeout=float(file["socket_timeout"]) if "socket_timeout" in file else None,
        connect_timeout=float(file["connect_timeout"]) if "connect_timeout" in file else None,
        fleet_keep_runs=file.get("fleet_keep_runs", DEFAULT_FLEET_KEEP_RUNS),
        fleet_keep_days=file.get("fleet_keep_days", DEFAULT_FLEET_KEEP_DAYS),
        redis_password_file=Path(password_file).expanduser() if password_file else None,
        redis_url_from=redis_url_from if redis_url else None,
        allow_eviction=file.get("allow_eviction", False),
        timezone=file.get("timezone"),
        output_tail=file.get("output_tail", True),
        output=file.get("output", "always"),
        syslog=file.get("syslog", False),
        retry=file.get("retry", 0),
        retry_delay=float(file.get("retry_delay", DEFAULT_RETRY_DELAY_S)),
        jitter=float(file.get("jitter", 0.0)),
        success_exit=tuple(file.get("success_exit", ())),
        masking=parse_masking(file.get("redact", ()), file.get("record_command", True)),
    )
