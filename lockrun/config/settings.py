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
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, cast
from urllib.parse import urlsplit

from lockrun.backends.redis.url import redact_url, url_without_credentials, validate_redis_url
from lockrun.backends.values import ALL_REPLICAS
from lockrun.core.errors import BackendUnavailable, ConfigError, UsageError
from lockrun.core.record import FINAL_STATUSES, Status
from lockrun.system.safefs import UnsafePath, check_owner_and_mode, special_file

if TYPE_CHECKING:
    from lockrun.core.zones import Zone

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


# --- ranges: every number lockrun accepts has one, checked when it is parsed (exit 2, or 78 in a
# config file). The README's "Ranges" table and --help quote these constants. -------------------

#: The longest lease, --wait, --timeout, --kill-after and --min-hold: 365 days. A lease
#: travels as milliseconds to Redis (PX), as a time_t to the backstop timer and as a
#: timeout to thread and select waits; the last overflow at about 292 years on 64-bit
#: Linux, so a year leaves room for every sum lockrun makes of them.
MAX_SECONDS = 365 * 86400
#: The longest --remember, history --since and prune --older-than: 100 years (36500d),
#: well inside what ISO timestamps (year 9999) and Redis expiries can hold.
MAX_DURATION_S = 36500 * 86400
#: ledger_keep_days: 1 to 36500 (100 years).
MAX_KEEP_DAYS = 36500
#: socket_timeout / connect_timeout in the config: more than 0, at most 300 s (and a run
#: caps them at TTL/3 anyway).
MAX_CALL_TIMEOUT_S = 300
#: history --limit: 1 to 1,000,000,000 rows.
MAX_HISTORY_LIMIT = 1_000_000_000
#: --slots: 1 to 10,000 holders.
MAX_SLOTS = 10_000


def _days(seconds: float) -> str:
    return f"{seconds / 86400:g}d"


MAX_DURATION_TEXT = _days(MAX_DURATION_S)  # "36500d", as --help says it
MAX_MIN_HOLD_TEXT = _days(MAX_SECONDS)  # "365d"


# --- single values ------------------------------------------------------------------


def validate_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise UsageError(f"invalid lock name {name!r}: use {NAME_RULE}")
    return name


ONCE_KEY_RULE = "1 to 200 characters from A-Z a-z 0-9 . _ : @ / - after strftime expansion"
_ONCE_KEY_RE = re.compile(r"[A-Za-z0-9._:@/\-]{1,200}")
DEFAULT_REMEMBER = "30d"


def expand_once_key(template: str, zone: Zone | None = None) -> str:
    """``report-%Y-%m-%d`` -> ``report-2026-11-29``, in ``zone`` (None: the process's local time)."""
    from lockrun.core.zones import strftime

    key = strftime(template, zone)
    if not _ONCE_KEY_RE.fullmatch(key):
        raise UsageError(f"invalid --once key {template!r} (expands to {key!r}): use {ONCE_KEY_RULE}")
    return key


# --once-per PERIOD: the key is the period's start in local time, so a crontab needs no %.
ONCE_PERIODS = {"hour": "%Y-%m-%dT%H", "day": "%Y-%m-%d", "week": "%G-W%V", "month": "%Y-%m"}


def once_key_for_period(period: str, now: float | None = None, zone: Zone | None = None) -> str:
    """``day`` -> ``2026-12-01``; ``week`` is the ISO week (``2026-W49``), ``hour`` ``2026-12-01T14``;
    the period's start in ``zone`` (None: the process's local time)."""
    from lockrun.core.zones import strftime

    return strftime(ONCE_PERIODS[period], zone, now)


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


def seconds_range(minimum: float = 0.0, allow_zero: bool = False, maximum: float = MAX_SECONDS) -> str:
    """How --help and messages state a seconds option's range:
    ``at least 1 and at most 31536000 (365 days)``."""
    low = f"at least {minimum:g}" if minimum > 0 else ("0 or more" if allow_zero else "more than 0")
    return f"{low} and at most {maximum:.0f} ({maximum / 86400:g} days)"


def parse_seconds(
    text: str, what: str, *, minimum: float = 0.0, allow_zero: bool = False, maximum: float = MAX_SECONDS
) -> float:
    """A positive decimal number of seconds (``--wait`` also accepts 0), at most ``maximum``."""
    text = str(text).strip()
    value = float(text) if _SECONDS_RE.fullmatch(text) else math.nan
    ok = (
        math.isfinite(value) and (value > 0 or (allow_zero and value == 0)) and minimum <= value <= maximum
    )
    if not ok:
        raise UsageError(
            f"invalid {what} {text!r}: expected a number of seconds, {seconds_range(minimum, allow_zero, maximum)}"
        )
    return value


def parse_duration(text: str, what: str, maximum: float = MAX_DURATION_S) -> float:
    """A number with a unit: ``90s``, ``15m``, ``12h``, ``7d`` -> seconds, at most ``maximum``."""
    match = _DURATION_RE.fullmatch(str(text).strip())
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)] if match else math.nan
    if not (0 < seconds <= maximum):  # also false for NaN and for an infinity from too many digits
        raise UsageError(
            f"invalid {what} {text!r}: expected a number with a unit s, m, h or d (90s, 15m, 12h, 7d),"
            f" at most {_days(maximum)}"
        )
    return seconds


def parse_min_hold(text: str, what: str) -> float:
    """``--min-hold``: a duration that keeps a lock taken, so no longer than a lease may be."""
    return parse_duration(text, what, maximum=MAX_SECONDS)


TIMELINE_WIDTHS = (70, 1000)  # `timeline --width`: the narrowest that leaves ten columns of time

_HOST_RE = re.compile(r"[^\x00-\x20\x7f]{1,255}")


def validate_host(text: str, what: str) -> str:
    """A host name to filter on: 1 to 255 printable characters, no spaces."""
    if not _HOST_RE.fullmatch(str(text)):
        raise UsageError(f"invalid {what} {text!r}: expected a host name (1 to 255 printable characters, no spaces)")
    return str(text)


_SIZE_RE = re.compile(r"(\d+)([kKmM]?)[bB]?")
MAX_TAIL = 16 * 1024 * 1024


def parse_size(text: str, what: str) -> int:
    """``512``, ``10k``, ``1m`` (powers of 1024) -> bytes, 1 byte to 16 MiB."""
    match = _SIZE_RE.fullmatch(str(text).strip())
    size = int(match.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2).lower()] if match else 0
    if not 0 < size <= MAX_TAIL:
        raise UsageError(f"invalid {what} {text!r}: expected a size like 512, 10k or 1m (at most 16m)")
    return size


MAX_REPLICAS = 100
REPLICAS_RULE = f"a whole number from 0 to {MAX_REPLICAS}, or all"


def parse_replicas(text: str | int, what: str) -> int | str:
    """``--replicas``: how many Redis replicas must acknowledge the lock and each renewal.

    0 (the default) waits for none; ``all`` for every replica in sync with the master.
    """
    value = str(text).strip().lower()
    if value == ALL_REPLICAS:
        return ALL_REPLICAS
    if not re.fullmatch(r"[0-9]{1,6}", value) or int(value) > MAX_REPLICAS:
        raise UsageError(f"invalid {what} {text!r}: expected {REPLICAS_RULE}")
    return int(value)


# What --notify-on may name: every final status a run can end in.
NOTIFY_STATUSES = tuple(status.value for status in FINAL_STATUSES)
DEFAULT_NOTIFY_ON = tuple(
    status.value for status in (Status.FAILED, Status.LOST, Status.TIMEOUT, Status.UNAVAILABLE, Status.ERROR)
)


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


# --- paths lockrun writes ----------------------------------------------------------------

#: Config keys naming a file lockrun writes (and replaces by a rename): only a regular file may be there.
OUTPUT_PATH_KEYS = ("ledger", "metrics_file")


def output_path_problem(path: str, what: str, directories: bool = True) -> str | None:
    """The one line refusing ``path`` as a file lockrun writes, when a device, FIFO or socket (or a
    link to one; with ``directories``, a directory) is there, checked when it is parsed; else None.
    lockrun would never write there, so saying it before the run beats a warning after it."""
    kind = special_file(Path(path).expanduser(), directories=directories)
    if kind is None:
        return None
    named = f"{what} {path}" if what else path
    return (f"{named} is {kind}, not a regular file; lockrun writes only regular files there,"
            " and never replaces anything else")


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
    "redis_password_file": ((str,), "a string (path of a file whose first line is the Redis password)"),
    "prefix": ((str,), "a string"),
    "ledger": ((str,), "a string (path of the SQLite ledger)"),
    "state_dir": ((str,), "a string (directory)"),
    "ttl": ((int, float), f"a number of seconds from 1 to {MAX_SECONDS}"),
    "ledger_keep_days": ((int,), f"a whole number of days from 1 to {MAX_KEEP_DAYS}"),
    "metrics_file": ((str,), "a string (path of a Prometheus textfile, rewritten after each run)"),
    "notify_urls": ((list,), "a list of http:// or https:// URLs"),
    "min_hold": ((str,), f"a duration string such as \"30s\" or \"5m\", at most {_days(MAX_SECONDS)}"),
    "socket_timeout": ((int, float), f"a number of seconds, more than 0 and at most {MAX_CALL_TIMEOUT_S}"
                                     " (a run caps it at TTL/3)"),
    "connect_timeout": ((int, float), f"a number of seconds, more than 0 and at most {MAX_CALL_TIMEOUT_S}"
                                      " (a run caps it at TTL/3)"),
    "replicas": ((int, str), f"{REPLICAS_RULE} (\"all\", quoted)"),
    "fleet_keep_runs": ((int,), f"a whole number of runs from 1 to {MAX_FLEET_KEEP_RUNS}"),
    "fleet_keep_days": ((int,), f"a whole number of days from 1 to {MAX_FLEET_KEEP_DAYS}"),
    # README "Never twice, whatever lockrun cannot see"
    "allow_eviction": ((bool,), "true or false (run even on a Redis that may evict keys)"),
    "timezone": ((str,), "a string: an IANA time zone name such as \"UTC\" or \"Europe/Berlin\""),
}
#: Config keys whose values are booleans (any other key refuses true and false).
BOOL_CONFIG_KEYS = frozenset({"allow_eviction"})


class ConfigFile(TypedDict, total=False):
    """A config file's keys, as :func:`load_config` returns them: each of the type CONFIG_KEYS
    names, and within its range."""

    redis_url: str
    redis_ca: str
    redis_password_file: str
    prefix: str
    ledger: str
    state_dir: str
    ttl: float  # a TOML integer too
    ledger_keep_days: int
    metrics_file: str
    notify_urls: list[str]
    min_hold: str
    socket_timeout: float
    connect_timeout: float
    replicas: int | str
    fleet_keep_runs: int
    fleet_keep_days: int
    allow_eviction: bool
    timezone: str

#: A config file larger than this is not a config file.
MAX_CONFIG_BYTES = 1 << 20


def default_config_paths() -> list[Path]:
    """/etc/lockrun.toml, then ~/.config/lockrun/config.toml of the passwd entry's home: like the
    state directory (state_home.py), never ``$HOME``, which cron, ``sudo -E`` or a crontab's
    ``HOME=`` line change, so that one user's runs read one file whatever their environment."""
    from lockrun.config.state_home import passwd_home

    try:
        home = passwd_home()
    except BackendUnavailable:  # no passwd entry and no usable HOME: the system file alone
        return [SYSTEM_CONFIG]
    return [SYSTEM_CONFIG, home / ".config" / "lockrun" / "config.toml"]


def _toml_loads(text: str) -> dict[str, object]:
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


def _read_trusted(path: Path, what: str, error: type[ConfigError] = ConfigError, private: bool = False) -> bytes:
    """A file's bytes, read through one descriptor whose owner and mode were checked first.

    As sudo and ssh do: owned by root or by the user lockrun runs as, writable by nobody
    else. With ``private`` (a password), others may not read it either.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except IsADirectoryError:
        raise error(f"{what} {path} is not a regular file") from None
    except OSError as exc:
        raise error(f"{what} {path}: cannot read it: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise error(f"{what} {path}: cannot read it: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):  # checked before fdopen, which refuses a directory with its own error
        os.close(fd)
        raise error(f"{what} {path} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            try:
                check_owner_and_mode(path, st, what)
            except UnsafePath as exc:
                raise error(str(exc)) from None
            if private and st.st_mode & stat.S_IRWXO:
                raise error(
                    f"{what} {path} can be read by others (mode {stat.S_IMODE(st.st_mode):04o}); refusing it:"
                    f" chmod o-rwx {path}"
                )
            os.set_blocking(fd, True)
            data = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise error(f"{what} {path}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise error(f"{what} {path} is larger than {MAX_CONFIG_BYTES} bytes")
    return data


def _check_config_value(key: str, value: Any, expected: str, where: str) -> None:
    """Raise ConfigError unless ``value`` is within the key's range.

    ``value`` is Any: its type depends on ``key``, and the caller has checked it against CONFIG_KEYS.
    """
    def refuse(reason: str = "") -> None:
        raise ConfigError(f"config file {where}: {key} must be {expected}{reason}")

    if key == "ttl" and not (math.isfinite(value) and 1 <= value <= MAX_SECONDS):
        refuse(f", not {value!r}")
    if key == "ledger_keep_days" and not 1 <= value <= MAX_KEEP_DAYS:
        refuse(f", not {value!r}")
    if key in ("socket_timeout", "connect_timeout") and not (math.isfinite(value) and 0 < value <= MAX_CALL_TIMEOUT_S):
        refuse(f", not {value!r}")
    if key == "fleet_keep_runs" and not 1 <= value <= MAX_FLEET_KEEP_RUNS:
        refuse(f", not {value!r}")
    if key == "fleet_keep_days" and not 1 <= value <= MAX_FLEET_KEEP_DAYS:
        refuse(f", not {value!r}")
    if key == "notify_urls" and not all(isinstance(url, str) for url in value):
        refuse()
    if key in OUTPUT_PATH_KEYS:
        problem = output_path_problem(value, key, directories=key == "ledger")
        if problem:
            raise ConfigError(f"config file {where}: {problem}")
    try:
        if key == "min_hold":
            parse_min_hold(value, "min_hold")
        if key == "replicas":
            parse_replicas(value, "replicas")
        if key == "notify_urls":
            for url in value:
                validate_http_url(url, "notify_urls entry")
        if key == "redis_url":
            validate_redis_url(value)
        if key == "timezone":
            from lockrun.core.zones import parse_zone

            parse_zone(value, "timezone")
    except UsageError as exc:
        raise ConfigError(f"config file {where}: {exc}") from None


def load_config(explicit: str | None) -> tuple[Path | None, ConfigFile]:
    """Read the first config file that exists; a file named explicitly must exist."""
    if explicit:
        path = Path(explicit)
        if not path.exists():
            raise ConfigError(f"config file {path} does not exist (named by --config or LOCKRUN_CONFIG)")
        if not path.is_file():
            raise ConfigError(f"config file {path} is not a regular file (named by --config or LOCKRUN_CONFIG)")
        candidates = [path]
    else:
        candidates = [p for p in default_config_paths() if p.is_file()][:1]
    if not candidates:
        return None, ConfigFile()
    path = candidates[0]
    try:
        text = _read_trusted(path, "config file").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path}: cannot read it: {exc}") from None
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
        if (isinstance(value, bool) and key not in BOOL_CONFIG_KEYS) or not isinstance(value, types):
            raise ConfigError(f"config file {where}: {key} must be {expected}, not {type(value).__name__}")
        _check_config_value(key, value, expected, where)
    return path, cast(ConfigFile, data)  # every key is known, of its type and in its range (checked above)


def read_password_file(path: Path) -> str:
    """The Redis password: the file's first line. The file must be ours or root's, and private."""
    data = _read_trusted(path, "Redis password file", private=True)
    try:
        password = data.decode("utf-8").splitlines()[0] if data.strip() else ""
    except UnicodeDecodeError:
        raise ConfigError(f"Redis password file {path} is not UTF-8 text") from None
    if not password:
        raise ConfigError(f"Redis password file {path} is empty")
    return password


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
        min_hold=parse_min_hold(file["min_hold"], "min_hold") if file.get("min_hold") else None,
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
    )
