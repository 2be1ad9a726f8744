"""The config file (TOML) and the Redis password file: found in the usual places, read only when
trusted (a regular file owned by the user or root and not writable by others; a link is followed
and its target is what is checked), each key checked against its type and range (exit 78, naming
the file and line).
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from lockrun.config.options import BY_KEY, FILE_KEYS, JOB_KEYS, Option
from lockrun.config.values import validate_name
from lockrun.core.errors import BackendUnavailable, ConfigError, UsageError
from lockrun.core.printable import quoted
from lockrun.system.safefs import UnsafePath, check_owner_and_mode

SYSTEM_CONFIG = Path("/etc/lockrun.toml")


#: The table of a config file that sets a job's own options: ``[job.NAME]``.
JOB_TABLE = "job"

#: A TOML bare key: a name with anything else (``.``, ``:``, ``@``, ``/``) is quoted in its header.
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def job_table(name: str) -> str:
    """The header of a job's table as the file must spell it: ``[job.backup]``,
    ``[job."sync.invoices"]`` (unquoted, TOML would read a dotted name as nested tables)."""
    label = name if _BARE_KEY.fullmatch(name) else f'"{name}"'  # a lock name has no quote or backslash
    return f"[{JOB_TABLE}.{label}]"


class ConfigFile:
    """A config file's settings, each checked by its row of the table (config/options.py): the
    top level's, and each ``[job.NAME]`` table's (JOB_KEYS only)."""

    __slots__ = ("path", "top", "jobs")

    def __init__(self, path: Path | None = None, top: dict[str, Any] | None = None,
                 jobs: dict[str, dict[str, Any]] | None = None) -> None:
        self.path = path
        self.top: dict[str, Any] = top or {}
        self.jobs: dict[str, dict[str, Any]] = jobs or {}

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


def _read_trusted(path: Path, what: str, error: type[ConfigError] = ConfigError, private: bool = False) -> bytes:
    """A file's bytes, read through one descriptor whose owner and mode were checked first.

    As sudo and ssh do: owned by root or by the user lockrun runs as, writable by nobody
    else. With ``private`` (a password), others may not read it either.
    """
    fd, st = _open_regular(path, what, error)
    with os.fdopen(fd, "rb") as f:
        try:
            _check_trusted(path, st, what, error, private)
            os.set_blocking(fd, True)
            data = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise error(f"{what} {path}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise error(f"{what} {path} is larger than {MAX_CONFIG_BYTES} bytes")
    return data


def _open_regular(path: Path, what: str, error: type[ConfigError]) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file at ``path`` (not yet trusted), and its stat."""
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
    return fd, st


def _check_trusted(path: Path, st: os.stat_result, what: str, error: type[ConfigError], private: bool) -> None:
    try:
        check_owner_and_mode(path, st, what)
    except UnsafePath as exc:
        raise error(str(exc)) from None
    if private and st.st_mode & stat.S_IRWXO:
        raise error(
            f"{what} {path} can be read by others (mode {stat.S_IMODE(st.st_mode):04o}); refusing it:"
            f" chmod o-rwx {path}"
        )


def load_config(explicit: str | None) -> ConfigFile:
    """Read the first config file that exists; a file named explicitly must exist."""
    path = _config_path(explicit)
    if path is None:
        return ConfigFile()
    text, data = _read_toml(path)
    lines = text.splitlines()
    jobs = data.pop(JOB_TABLE, {})
    top = _checked(data, FILE_KEYS, path, lines, None)
    return ConfigFile(path, top, _checked_jobs(jobs, path, lines))


def _config_path(explicit: str | None) -> Path | None:
    """The file named (it must exist), else the first of the usual places that does; None: none."""
    if explicit:
        path = Path(explicit)
        try:
            exists, regular = path.exists(), path.is_file()
        except OSError as exc:  # a name too long, a loop of links
            raise ConfigError(f"config file {quoted(explicit)} cannot be looked at: {exc.strerror or exc}"
                              " (named by --config or LOCKRUN_CONFIG)") from None
        if not exists:
            raise ConfigError(f"config file {path} does not exist (named by --config or LOCKRUN_CONFIG)")
        if not regular:
            raise ConfigError(f"config file {path} is not a regular file (named by --config or LOCKRUN_CONFIG)")
        return path
    candidates = [p for p in default_config_paths() if p.is_file()]
    return candidates[0] if candidates else None


def _read_toml(path: Path) -> tuple[str, dict[str, object]]:
    """The file's text and its TOML."""
    try:
        text = _read_trusted(path, "config file").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path}: cannot read it: {exc}") from None
    try:
        data = _toml_loads(text) if text.strip() else {}  # an empty file is valid, and parsing it costs an import
    except ValueError as exc:  # TOMLDecodeError subclasses ValueError; its text names line and column
        hint = " (a UTF-8 byte order mark at its start? save it without one)" if text.startswith("\ufeff") else ""
        raise ConfigError(f"config file {path}: invalid TOML: {exc}{hint}") from None
    except RecursionError:  # tomllib reads nested tables by recursion: 500 levels are 3 KB
        raise ConfigError(f"config file {path}: invalid TOML: tables nested too deeply") from None
    return text, data


def _checked_jobs(jobs: object, path: Path, lines: list[str]) -> dict[str, dict[str, Any]]:
    """The ``[job.NAME]`` tables, each name checked and each table by JOB_KEYS."""
    if not isinstance(jobs, dict) or not all(isinstance(table, dict) for table in jobs.values()):
        raise ConfigError(f"config file {_where(path, lines, JOB_TABLE)}: {JOB_TABLE} must be tables"
                          " [job.NAME] of a job's own options")
    checked = {}
    for name, table in jobs.items():
        try:
            validate_name(name)
        except UsageError as exc:
            raise ConfigError(f"config file {_where(path, lines, None, name)}: [{JOB_TABLE}.NAME]: {exc}") from None
        checked[name] = _checked(table, JOB_KEYS, path, lines, name)
    return checked


def _checked(data: dict[str, object], allowed: frozenset[str], path: Path, lines: list[str],
             job: str | None) -> dict[str, Any]:
    """Each of a table's keys, parsed by its row: exit 78 naming the file, line and key otherwise."""
    checked = {}
    for key, value in data.items():
        option = BY_KEY.get(key)
        try:
            if option is None or key not in allowed:
                raise UsageError(_dotted(key, value, job) or _unknown(key, job))
            checked[key] = _value(option, value)
        except UsageError as exc:  # the line is looked for only now: a search per key made loading quadratic
            raise ConfigError(f"config file {_where(path, lines, key, job)}: {exc}") from None
    return checked


def _unknown(key: str, job: str | None) -> str:
    if job is None:
        known = ", ".join(sorted(FILE_KEYS))
        return f"unknown key {quoted(key)} (known keys: {known}, and [job.NAME] tables)"
    if key in FILE_KEYS:
        return f"{quoted(key)} is not a run option: it belongs at the top level of the file, for every job"
    return f"unknown key {quoted(key)} in {job_table(job)} (run options: {', '.join(sorted(JOB_KEYS))})"


def _dotted(key: str, value: object, job: str | None) -> str | None:
    """[job.sync.invoices] is read as a table "invoices" inside [job.sync]: say how to write it."""
    if job is None or not isinstance(value, dict):
        return None
    return (f"{quoted(key)} in {job_table(job)} is a table, not a run option: a job name with a dot is quoted,"
            f" {job_table(f'{job}.{key}')}")


def _value(option: Option[Any], value: object) -> Any:
    """The value parsed by its row; UsageError, said as a config file says it, otherwise."""
    file_types = option.parse.file_types
    try:
        if file_types is not None and (isinstance(value, bool) or not isinstance(value, file_types)):
            raise UsageError(f"invalid {option.key} {option.parse.shown(value)}")
        return option.parse(value, option.key)
    except UsageError as exc:
        raise UsageError(_as_the_file_says_it(option, value, str(exc))) from None
    except (OverflowError, ValueError):  # a parser not written for an integer of 400 digits
        raise UsageError(f"{option.key} must be {option.expected}, not a number that large") from None


def _as_the_file_says_it(option: Option[Any], value: object, reason: str) -> str:
    """The parser's usual line (``invalid ttl 'x': expected …``) as a config file says it (``ttl must
    be …, not 'x'``), with what else the parser knew (``Bad day-of-month``). A value that may hold
    a secret keeps its parser's line, which shows it hidden."""
    if not reason.startswith(f"invalid {option.key} ") or option.parse.hides is not None:
        return reason
    said = f"invalid {option.key} {quoted(value)}: "
    why = reason[len(said):] if reason.startswith(said) else ""
    shown = value.isoformat() if hasattr(value, "isoformat") else value  # a TOML date, as written
    line = f"{option.key} must be {option.expected}, not {quoted(shown)}"
    return f"{line}: {why}" if why and not why.startswith("expected") else line


def _where(path: Path, lines: list[str], key: str | None, job: str | None = None) -> str:
    """``FILE, line N`` of ``key`` at the top level or in ``[job.NAME]`` (``key`` None: the
    table's header), or ``FILE`` when it cannot be found (a key spelled in an inline table)."""
    first, end = _section(lines, job)
    if key is None:
        return f"{path}, line {first}" if job is not None and first else str(path)
    pattern = re.compile(rf"\s*(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')\s*=")
    line = next((number for number in range(first, end) if pattern.match(lines[number])), None)
    return f"{path}, line {line + 1}" if line is not None else str(path)


def _section(lines: list[str], job: str | None) -> tuple[int, int]:
    """The lines of the top level (``job`` None) or of ``[job.NAME]``: (first, end)."""
    headers = [number for number, line in enumerate(lines) if line.lstrip().startswith("[")]
    if job is None:
        return 0, headers[0] if headers else len(lines)
    return _job_section(lines, headers, job)


def _job_section(lines: list[str], headers: list[int], job: str) -> tuple[int, int]:
    name = re.escape(job)
    header = re.compile(rf"\s*\[\s*{JOB_TABLE}\s*\.\s*(?:{name}|\"{name}\"|'{name}')\s*\]")
    for at, number in enumerate(headers):
        if header.match(lines[number]):
            return number + 1, headers[at + 1] if at + 1 < len(headers) else len(lines)
    return 0, 0


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
