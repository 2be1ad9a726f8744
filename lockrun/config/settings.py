"""What every command shares, read from a resolved :class:`~lockrun.config.resolve.Plan`: the
backend (its URL, prefix, CA, password file, timeouts and fleet retention), the state directory
and the ledger. The run options are the plan's own (``plan[TTL]``); this is the part of it that
``status``, ``history`` and the rest need too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lockrun.config import options
from lockrun.config.file import read_password_file
from lockrun.config.resolve import Plan, resolve
from lockrun.core.redis_url import redact_url, url_without_credentials


class Settings:
    """The global settings of one plan, as every command reads them (a plain class: it is made on
    every run's path, and a NamedTuple of this size costs a compile per field at import)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.redis_url: str | None = plan[options.REDIS_URL] or None
        self.prefix: str = plan[options.PREFIX]
        self.state_dir: Path = Path(plan[options.STATE_DIR] or default_state_dir()).expanduser()
        self.ledger_path: Path = Path(plan[options.LEDGER] or self.state_dir / "ledger.db").expanduser()
        self.ttl: float = plan[options.TTL]
        self.config_path: Path | None = plan.config_path
        self.ledger_keep_days: int | None = plan[options.LEDGER_KEEP_DAYS]
        self.redis_ca: str | None = plan[options.REDIS_CA]
        self.socket_timeout: float | None = plan[options.SOCKET_TIMEOUT]
        self.connect_timeout: float | None = plan[options.CONNECT_TIMEOUT]
        self.fleet_keep_runs: int = plan[options.FLEET_KEEP_RUNS]
        self.fleet_keep_days: int = plan[options.FLEET_KEEP_DAYS]
        password_file = plan[options.REDIS_PASSWORD_FILE]
        self.redis_password_file: Path | None = Path(password_file).expanduser() if password_file else None
        #: "--redis-url", "LOCKRUN_REDIS_URL" or "redis_url in FILE": for the hint that compares shells and runs.
        self.redis_url_from: str | None = plan.named_source(options.REDIS_URL) if self.redis_url else None

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


def settings_for(flags: dict[str, Any] | None = None, name: str | None = None) -> Settings:
    """The settings of a command given ``flags`` (by key), for lock ``name`` when it has a job table."""
    return Settings(resolve(flags or {}, name))
