"""The config file (TOML) and the Redis password file: found in the usual places, read only when
trusted (owned by the user or root, not writable by others, not a link), each key checked
against its type and range (exit 78, naming the file and line).
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path
from typing import Any, TypedDict, cast

from lockrun.backends.redis.url import validate_redis_url
from lockrun.config.values import (
    OUTPUT_MODES,
    OUTPUT_PATH_KEYS,
    REPLICAS_RULE,
    RETRY_RULE,
    SUCCESS_EXIT_RULE,
    output_path_problem,
    parse_replicas,
    parse_retry,
    parse_success_exit,
    parse_time_span,
    seconds_range,
    validate_http_url,
)
from lockrun.core.defaults import (
    MAX_CALL_TIMEOUT_S,
    MAX_FLEET_KEEP_DAYS,
    MAX_FLEET_KEEP_RUNS,
    MAX_JITTER_S,
    MAX_KEEP_DAYS,
    MAX_RETRY_DELAY_S,
    MAX_SECONDS,
)
from lockrun.core.errors import BackendUnavailable, ConfigError, UsageError
from lockrun.core.masking import REDACT_RULE, parse_masking
from lockrun.core.printable import quoted
from lockrun.system.safefs import UnsafePath, check_owner_and_mode

SYSTEM_CONFIG = Path("/etc/lockrun.toml")


#: key -> (python types accepted, what the message says is expected)
CONFIG_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "redis_url": ((str,), "a string (redis://, rediss:// or unix:// URL)"),
    "redis_ca": ((str,), "a string (path of the CA certificates that verify a rediss:// server)"),
    "redis_password_file": ((str,), "a string (path of a file whose first line is the Redis password)"),
    "prefix": ((str,), "a string"),
    "ledger": ((str,), "a string (path of the SQLite ledger)"),
    "state_dir": ((str,), "a string (directory)"),
    "ttl": ((int, float, str), f"seconds (90) or a duration string (\"2m\"), {seconds_range(1)}"),
    "ledger_keep_days": ((int,), f"a whole number of days from 1 to {MAX_KEEP_DAYS}"),
    "metrics_file": ((str,), "a string (path of a Prometheus textfile, rewritten after each run)"),
    "notify_urls": ((list,), "a list of http:// or https:// URLs"),
    "min_hold": ((int, float, str), f"seconds (30) or a duration string (\"5m\"), {seconds_range()}"),
    "socket_timeout": ((int, float, str), f"seconds (2.5) or a duration string (\"2s\"),"
                                          f" {seconds_range(maximum=MAX_CALL_TIMEOUT_S)} (a run caps it at TTL/3)"),
    "connect_timeout": ((int, float, str), f"seconds (2.5) or a duration string (\"2s\"),"
                                           f" {seconds_range(maximum=MAX_CALL_TIMEOUT_S)} (a run caps it at TTL/3)"),
    "replicas": ((int, str), f"{REPLICAS_RULE} (\"all\", quoted)"),
    "fleet_keep_runs": ((int,), f"a whole number of runs from 1 to {MAX_FLEET_KEEP_RUNS}"),
    "fleet_keep_days": ((int,), f"a whole number of days from 1 to {MAX_FLEET_KEEP_DAYS}"),
    # docs/guarantees.md "What lockrun guarantees, and how"
    "allow_eviction": ((bool,), "true or false (run even on a Redis that may evict keys)"),
    "timezone": ((str,), "a string: an IANA time zone name such as \"UTC\" or \"Europe/Berlin\""),
    # docs/operating.md "Output": the tail a failed run keeps, chronic(1)'s output, syslog
    "output_tail": ((bool,), "true or false (keep the last 4 KiB of a failed run's output in the ledger)"),
    "output": ((str,), "\"always\" or \"on-failure\""),
    "syslog": ((bool,), "true or false (one line per finished run to syslog)"),
    # docs/operating.md "Retries and jitter"
    "retry": ((int,), RETRY_RULE),
    "retry_delay": ((int, float, str), f"seconds (10) or a duration string (\"30s\"),"
                                       f" {seconds_range(allow_zero=True, maximum=MAX_RETRY_DELAY_S)}"),
    "jitter": ((int, float, str), f"seconds (30) or a duration string (\"5m\"),"
                                  f" {seconds_range(allow_zero=True, maximum=MAX_JITTER_S)}"),
    "success_exit": ((int, str, list), f"{SUCCESS_EXIT_RULE} (24, \"1,24\" or [1, 24])"),
    # docs/fleet.md "What is published": the command line as lockrun records it
    "redact": ((list,), REDACT_RULE),
    "record_command": ((bool,), "true or false (false: record the program's name only, not its arguments)"),
}
#: Config keys whose values are booleans (any other key refuses true and false).
BOOL_CONFIG_KEYS = frozenset({"allow_eviction", "output_tail", "syslog", "record_command"})


class ConfigFile(TypedDict, total=False):
    """A config file's keys, as :func:`load_config` returns them: each of the type CONFIG_KEYS
    names, and within its range."""

    redis_url: str
    redis_ca: str
    redis_password_file: str
    prefix: str
    ledger: str
    state_dir: str
    ttl: float  # seconds: a TOML number or a duration string, read as seconds (TIME_KEYS)
    ledger_keep_days: int
    metrics_file: str
    notify_urls: list[str]
    min_hold: float
    socket_timeout: float
    connect_timeout: float
    replicas: int | str
    fleet_keep_runs: int
    fleet_keep_days: int
    allow_eviction: bool
    timezone: str
    output_tail: bool
    output: str
    syslog: bool
    retry: int
    retry_delay: float
    jitter: float
    success_exit: tuple[int, ...]  # read as the sorted codes (parse_success_exit)
    redact: list[str]
    record_command: bool

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

    if key == "ledger_keep_days" and not 1 <= value <= MAX_KEEP_DAYS:
        refuse(f", not {quoted(value)}")
    if key == "fleet_keep_runs" and not 1 <= value <= MAX_FLEET_KEEP_RUNS:
        refuse(f", not {quoted(value)}")
    if key == "fleet_keep_days" and not 1 <= value <= MAX_FLEET_KEEP_DAYS:
        refuse(f", not {quoted(value)}")
    if key == "output" and value not in OUTPUT_MODES:
        refuse(f", not {quoted(value)}")
    if key == "notify_urls" and not all(isinstance(url, str) for url in value):
        refuse()
    if key == "redact":
        try:
            parse_masking(value)
        except ValueError as exc:
            refuse(f", {exc}")
    if key in OUTPUT_PATH_KEYS:
        problem = output_path_problem(value, key, directories=key == "ledger")
        if problem:
            raise ConfigError(f"config file {where}: {problem}")
    try:
        if key == "replicas":
            parse_replicas(value, "replicas")
        if key == "retry":
            parse_retry(value, "retry")
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


#: Keys that are time values, as every flag takes them: seconds (a TOML number, or "90") or a
#: duration string ("90s", "2m", "1.5h", "7d"); read as seconds. key -> (minimum, maximum).
TIME_KEYS: dict[str, tuple[float, float]] = {
    "ttl": (1.0, MAX_SECONDS),
    "min_hold": (0.0, MAX_SECONDS),
    "socket_timeout": (0.0, MAX_CALL_TIMEOUT_S),
    "connect_timeout": (0.0, MAX_CALL_TIMEOUT_S),
    "retry_delay": (0.0, MAX_RETRY_DELAY_S),
    "jitter": (0.0, MAX_JITTER_S),
}
#: Time keys for which 0 is a value (no pause, no jitter).
ZERO_TIME_KEYS = frozenset({"retry_delay", "jitter"})


def _time_value(key: str, value: float | str, expected: str, where: str) -> float:
    minimum, maximum = TIME_KEYS[key]
    try:
        return parse_time_span(value, key, minimum=minimum, maximum=maximum, allow_zero=key in ZERO_TIME_KEYS)
    except UsageError:
        raise ConfigError(f"config file {where}: {key} must be {expected}, not {quoted(value)}") from None


def _success_exit(value: Any, expected: str, where: str) -> tuple[int, ...]:
    try:
        return parse_success_exit(value if isinstance(value, list) else str(value), "success_exit")
    except UsageError:
        raise ConfigError(f"config file {where}: success_exit must be {expected}, not {quoted(value)}") from None


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
            raise ConfigError(f"config file {where}: unknown key {quoted(key)} (known keys: {known})")
        types, expected = CONFIG_KEYS[key]
        if (isinstance(value, bool) and key not in BOOL_CONFIG_KEYS) or not isinstance(value, types):
            raise ConfigError(f"config file {where}: {key} must be {expected}, not {type(value).__name__}")
        if key in TIME_KEYS:
            data[key] = _time_value(key, cast(Any, value), expected, where)
        _check_config_value(key, value, expected, where)
        if key == "success_exit":
            data[key] = _success_exit(value, expected, where)
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
