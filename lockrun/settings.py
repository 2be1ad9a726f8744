"""Validated values and the settings precedence: flag > environment > config file > default.

Flags and environment variables arrive together from the CLI (click reads the
``envvar``s and leaves ``None`` when neither was given); this module fills the
gaps from the first config file that exists, then from the defaults.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
import sys
from typing import NamedTuple
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from lockrun.errors import ConfigError, UsageError

DEFAULT_TTL = 60.0
DEFAULT_PREFIX = "lockrun:"
DEFAULT_KILL_AFTER = 10.0
DEFAULT_BUSY_EXIT = 75
SYSTEM_CONFIG = Path("/etc/lockrun.toml")

NAME_RULE = (
    "1 to 200 characters from A-Z a-z 0-9 . _ : @ / -, starting with a letter or digit"
)
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/\-]{0,199}")
_SECONDS_RE = re.compile(r"\d+(\.\d*)?|\.\d+")
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
REDIS_SCHEMES = ("redis", "rediss", "unix")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")


# --- single values ------------------------------------------------------------------


def validate_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise UsageError(f"invalid lock name {name!r}: use {NAME_RULE}")
    return name


ONCE_KEY_RULE = "1 to 200 characters from A-Z a-z 0-9 . _ : @ / - after strftime expansion"
_ONCE_KEY_RE = re.compile(r"[A-Za-z0-9._:@/\-]{1,200}")
DEFAULT_REMEMBER = "30d"


def expand_once_key(template: str) -> str:
    """``report-%Y-%m-%d`` -> ``report-2026-11-29`` (local time, like cron)."""
    import time

    key = time.strftime(template)
    if not _ONCE_KEY_RE.fullmatch(key):
        raise UsageError(f"invalid --once key {template!r} (expands to {key!r}): use {ONCE_KEY_RULE}")
    return key


_RUN_ID_RE = re.compile(r"[0-9a-f]{4,32}")


def validate_run_id(text: str) -> str:
    """A run id or a prefix of it: 4 to 32 lower-case hex digits."""
    if not _RUN_ID_RE.fullmatch(text):
        raise UsageError(f"invalid run id {text!r}: use 4 to 32 hex digits of it (see lockrun history)")
    return text


def default_name(argv: list[str]) -> str:
    """``cmd-`` + 12 hex of sha256 over the argv joined by NUL.

    Joining by NUL (not space) keeps ``frob "a b"`` and ``frob a b`` apart.
    """
    digest = hashlib.sha256("\0".join(argv).encode("utf-8", "surrogateescape"))
    return "cmd-" + digest.hexdigest()[:12]


def parse_seconds(text: str, what: str, *, minimum: float = 0.0, allow_zero: bool = False) -> float:
    """A positive decimal number of seconds (``--wait`` also accepts 0)."""
    text = str(text).strip()
    value = float(text) if _SECONDS_RE.fullmatch(text) else math.nan
    ok = math.isfinite(value) and (value > 0 or (allow_zero and value == 0)) and value >= minimum
    if not ok:
        expected = "a number of seconds >= 0" if allow_zero else "a positive number of seconds"
        if minimum > 0:
            expected += f" (at least {minimum:g})"
        raise UsageError(f"invalid {what} {text!r}: expected {expected}")
    return value


def parse_duration(text: str, what: str) -> float:
    """A number with a unit: ``90s``, ``15m``, ``12h``, ``7d`` -> seconds."""
    match = _DURATION_RE.fullmatch(str(text).strip())
    if not match or float(match.group(1)) <= 0:
        raise UsageError(f"invalid {what} {text!r}: expected a number with a unit s, m, h or d (90s, 15m, 12h, 7d)")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


_SIZE_RE = re.compile(r"(\d+)([kKmM]?)[bB]?")
MAX_TAIL = 16 * 1024 * 1024


def parse_size(text: str, what: str) -> int:
    """``512``, ``10k``, ``1m`` (powers of 1024) -> bytes, 1 byte to 16 MiB."""
    match = _SIZE_RE.fullmatch(str(text).strip())
    size = int(match.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2).lower()] if match else 0
    if not 0 < size <= MAX_TAIL:
        raise UsageError(f"invalid {what} {text!r}: expected a size like 512, 10k or 1m (at most 16m)")
    return size


# What --notify-on may name: every final status a run can end in.
NOTIFY_STATUSES = (
    "succeeded", "failed", "busy", "duplicate", "timeout", "lost", "preempted", "killed", "unavailable", "error",
)
DEFAULT_NOTIFY_ON = ("failed", "lost", "timeout", "unavailable", "error")


def parse_notify_statuses(text: str, what: str) -> tuple[str, ...]:
    """``failed,lost`` -> ("failed", "lost"); every name must be a final ledger status."""
    statuses = tuple(part.strip() for part in str(text).split(",") if part.strip())
    if not statuses or any(status not in NOTIFY_STATUSES for status in statuses):
        raise UsageError(f"invalid {what} {text!r}: a comma-separated list of {', '.join(NOTIFY_STATUSES)}")
    return statuses


def redact_endpoint(url: str) -> str:
    """``https://hooks.example.com/…``: enough to tell endpoints apart, no secrets.

    A webhook's query string and a ping URL's path (the check's UUID) are its
    credentials, so neither is ever shown or stored.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparseable URL>"
    return f"{parts.scheme}://{host}{port}/…"


def validate_http_url(url: str, what: str) -> str:
    """An http(s) URL with a host; the message never shows the URL's secrets."""
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(f"invalid {what} {redact_endpoint(url)!r}: expected an http:// or https:// URL")
    return url


def validate_redis_url(url: str, error: type[UsageError] | type[ConfigError] = UsageError) -> str:
    """Check the scheme and shape of a Redis URL; the message never shows a password."""
    if url.split("://", 1)[0] in CLUSTER_SCHEMES + SENTINEL_SCHEMES:  # several host:port pairs
        try:
            parse_cluster_url(url)
        except ValueError as exc:
            raise error(f"invalid Redis URL {redact_url(url)!r}: {exc}") from None
        return url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise error(f"invalid Redis URL {redact_url(url)!r}: cannot parse it") from None
    if parts.scheme not in REDIS_SCHEMES:
        raise error(
            f"invalid Redis URL {redact_url(url)!r}: the scheme must be redis://, rediss://, unix://,"
            " redis+cluster:// or redis+sentinel://"
        )
    if parts.scheme == "unix" and not parts.path:
        raise error(f"invalid Redis URL {redact_url(url)!r}: a unix:// URL needs a socket path")
    return url


class ClusterURL(NamedTuple):
    nodes: list[tuple[str, int]]
    username: str | None
    password: str | None
    tls: bool
    service: str | None = None  # Sentinel: the monitored master's name
    db: int = 0


def parse_cluster_url(url: str) -> ClusterURL:
    """Several nodes in one URL.

    ``redis+cluster://[user:password@]h1:7000,h2:7001/``: startup nodes of a Redis Cluster;
    ``redis+sentinel://[user:password@]h1:26379,h2:26379/SERVICE[/DB]``: Sentinels and the
    name of the master they watch (the credentials are the master's).
    """
    scheme, _, rest = url.partition("://")
    netloc, _, path = rest.split("?", 1)[0].partition("/")
    service, db = None, 0
    if scheme in SENTINEL_SCHEMES:
        service, _, db_text = path.strip("/").partition("/")
        if not service:
            raise ValueError("a redis+sentinel:// URL names the master: redis+sentinel://h1:26379,h2:26379/mymaster/0")
        if db_text and not db_text.isdigit():
            raise ValueError(f"the database after the master's name is a number, not {db_text!r}")
        db = int(db_text or 0)
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username, password = unquote(user) or None, unquote(secret) if colon else None
    nodes = []
    for item in filter(None, hosts.split(",")):
        host, colon, port = item.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"cluster nodes are host:port pairs separated by commas, not {item!r}")
        nodes.append((host.strip("[]"), int(port)))
    if not nodes:
        raise ValueError(f"a {scheme}:// URL needs at least one host:port")
    return ClusterURL(nodes, username, password, scheme.startswith("rediss"), service, db)


def redact_url(url: str) -> str:
    """The URL with any password (userinfo or ``?password=``) replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, has_password, _ = userinfo.partition(":")
        netloc = f"{user}:***@{hostport}" if has_password else f"{userinfo}@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key.lower() == "password" for key, _ in pairs):
            query = urlencode(
                [(k, "***" if k.lower() == "password" else v) for k, v in pairs], safe="*", quote_via=quote
            )
    # Reassembled by hand: urlunsplit() would turn unix:///path into unix:/path.
    text = f"{parts.scheme}://{netloc}{parts.path}" if "//" in url[:len(parts.scheme) + 3] else urlunsplit(
        (parts.scheme, netloc, parts.path, "", "")
    )
    return text + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")


# --- config file ----------------------------------------------------------------------

# The fleet record's retention (README "One fleet, one memory"): per name, the newest runs kept
# in its stream, and how long the record of a name outlives its last write.
DEFAULT_FLEET_KEEP_RUNS = 1000
DEFAULT_FLEET_KEEP_DAYS = 90
MAX_FLEET_KEEP_RUNS = 1_000_000
MAX_FLEET_KEEP_DAYS = 3650

#: key -> (python types accepted, what the message says is expected)
CONFIG_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "redis_url": ((str,), "a string (redis://, rediss:// or unix:// URL)"),
    "redis_ca": ((str,), "a string (path of the CA certificates that verify a rediss:// server)"),
    "prefix": ((str,), "a string"),
    "ledger": ((str,), "a string (path of the SQLite ledger)"),
    "state_dir": ((str,), "a string (directory)"),
    "ttl": ((int, float), "a number of seconds >= 1"),
    "ledger_keep_days": ((int,), "a whole number of days >= 1"),
    "metrics_file": ((str,), "a string (path of a Prometheus textfile, rewritten after each run)"),
    "notify_urls": ((list,), "a list of http:// or https:// URLs"),
    "min_hold": ((str,), "a duration string such as \"30s\" or \"5m\""),
    "socket_timeout": ((int, float), "a positive number of seconds (capped at TTL/3)"),
    "fleet_keep_runs": ((int,), f"a whole number of runs from 1 to {MAX_FLEET_KEEP_RUNS}"),
    "fleet_keep_days": ((int,), f"a whole number of days from 1 to {MAX_FLEET_KEEP_DAYS}"),
    "connect_timeout": ((int, float), "a positive number of seconds (capped at TTL/3)"),
}


def default_config_paths() -> list[Path]:
    return [SYSTEM_CONFIG, Path.home() / ".config" / "lockrun" / "config.toml"]


def _toml_loads(text: str) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    return tomllib.loads(text)


def _line_of(text: str, key: str) -> int | None:
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line):
            return number
    return None


def load_config(explicit: str | None) -> tuple[Path | None, dict]:
    """Read the first config file that exists; a file named explicitly must exist."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist (named by --config or LOCKRUN_CONFIG)")
        candidates = [path]
    else:
        candidates = [p for p in default_config_paths() if p.is_file()][:1]
    if not candidates:
        return None, {}
    path = candidates[0]
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path}: cannot read it: {exc}") from None
    if mode & stat.S_IWOTH:
        raise ConfigError(f"config file {path} is world-writable; refusing it (it could redirect locks): chmod o-w {path}")
    try:
        data = _toml_loads(text) if text.strip() else {}  # an empty file is valid, and parsing it costs an import
    except ValueError as exc:  # TOMLDecodeError subclasses ValueError; its text names line and column
        raise ConfigError(f"config file {path}: invalid TOML: {exc}") from None
    for key, value in data.items():
        line = _line_of(text, key)
        where = f"{path}, line {line}" if line else str(path)
        if key not in CONFIG_KEYS:
            known = ", ".join(CONFIG_KEYS)
            raise ConfigError(f"config file {where}: unknown key {key!r} (known keys: {known})")
        types, expected = CONFIG_KEYS[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise ConfigError(f"config file {where}: {key} must be {expected}, not {type(value).__name__}")
        if key == "ttl" and not (math.isfinite(value) and value >= 1):
            raise ConfigError(f"config file {where}: ttl must be {expected}")
        if key == "ledger_keep_days" and value < 1:
            raise ConfigError(f"config file {where}: ledger_keep_days must be {expected}")
        if key == "fleet_keep_runs" and not 1 <= value <= MAX_FLEET_KEEP_RUNS:
            raise ConfigError(f"config file {where}: fleet_keep_runs must be {expected}")
        if key == "fleet_keep_days" and not 1 <= value <= MAX_FLEET_KEEP_DAYS:
            raise ConfigError(f"config file {where}: fleet_keep_days must be {expected}")
        if key in ("socket_timeout", "connect_timeout") and not (math.isfinite(value) and value > 0):
            raise ConfigError(f"config file {where}: {key} must be {expected}")
        if key == "min_hold":
            try:
                parse_duration(value, "min_hold")
            except UsageError as exc:
                raise ConfigError(f"config file {where}: {exc}") from None
        if key == "notify_urls":
            if not all(isinstance(url, str) for url in value):
                raise ConfigError(f"config file {where}: notify_urls must be {expected}")
            for url in value:
                try:
                    validate_http_url(url, "notify_urls entry")
                except UsageError as exc:
                    raise ConfigError(f"config file {where}: {exc}") from None
        if key == "redis_url":
            try:
                validate_redis_url(value, ConfigError)
            except ConfigError as exc:
                raise ConfigError(f"config file {where}: {exc}") from None
    return path, data


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

    @property
    def backend_name(self) -> str:
        return "redis" if self.redis_url else "local"

    @property
    def redacted_url(self) -> str | None:
        return redact_url(self.redis_url) if self.redis_url else None


def default_state_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/lockrun")
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "lockrun"


def resolve(
    *,
    config: str | None = None,
    redis_url: str | None = None,
    redis_ca: str | None = None,
    prefix: str | None = None,
    ledger: str | None = None,
    ttl: float | None = None,
) -> Settings:
    """Apply flag/env (already merged by the caller) > config file > default."""
    config_path, file = load_config(config)
    state_dir_env = os.environ.get("LOCKRUN_STATE_DIR")
    state_dir = Path(state_dir_env or file.get("state_dir") or default_state_dir()).expanduser()
    if redis_url is not None:
        validate_redis_url(redis_url)
    redis_url = redis_url if redis_url is not None else file.get("redis_url")
    ledger_path = Path(ledger or file.get("ledger") or state_dir / "ledger.db").expanduser()
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
        min_hold=parse_duration(file["min_hold"], "min_hold") if file.get("min_hold") else None,
        redis_ca=redis_ca or file.get("redis_ca"),
        socket_timeout=float(file["socket_timeout"]) if "socket_timeout" in file else None,
        connect_timeout=float(file["connect_timeout"]) if "connect_timeout" in file else None,
        fleet_keep_runs=file.get("fleet_keep_runs", DEFAULT_FLEET_KEEP_RUNS),
        fleet_keep_days=file.get("fleet_keep_days", DEFAULT_FLEET_KEEP_DAYS),
    )
