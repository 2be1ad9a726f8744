"""Flag > environment > ``[job.NAME]`` > the config file's top level > default, applied once to
every row of the table (options.py), into one :class:`Plan` (docs/reference.md "Every setting";
``lockrun config NAME`` shows it with where each value came from).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from lockrun.config.file import ConfigFile, job_table, load_config
from lockrun.config.options import CONFIG, OPTIONS, Option
from lockrun.core.errors import UsageError

T = TypeVar("T")

FLAG, DEFAULT = "flag", "default"


class Plan:
    """Every setting's value for one lock name, and where it came from; read as ``plan[TTL]``."""

    __slots__ = ("name", "config_path", "_values", "_sources")

    def __init__(self, name: str | None, config_path: Path | None, values: dict[str, Any],
                 sources: dict[str, str]) -> None:
        self.name = name
        self.config_path = config_path
        self._values = values
        self._sources = sources

    def __getitem__(self, option: Option[T]) -> T:
        value: T = self._values[option.key]
        return value

    def source(self, option: Option[Any]) -> str:
        """``flag``, ``env LOCKRUN_TTL``, ``FILE [job.NAME]``, ``FILE`` or ``default``."""
        return self._sources[option.key]

    def explicit(self, option: Option[T]) -> T | None:
        """The value when this run or this name asked for it (a flag, the environment, its
        ``[job.NAME]`` table), None when it comes from the file's top level or the default: a
        default for every job gives way where options cannot go together."""
        source = self._sources[option.key]
        if source == DEFAULT or (self.config_path is not None and source == str(self.config_path)):
            return None
        return self[option]

    def from_the_file(self, option: Option[Any]) -> bool:
        """Set by the config file (its top level or the name's table): a message then says exit 78."""
        source = self._sources[option.key]
        return source not in (FLAG, DEFAULT) and not source.startswith("env ")

    def named_source(self, option: Option[Any]) -> str:
        """Where a value came from, as a message names it: ``--tz``, ``LOCKRUN_TZ``, ``timezone in
        FILE`` (or ``FILE [job.NAME]``)."""
        source = self._sources[option.key]
        if source == FLAG:
            return option.flag or option.key
        if source.startswith("env "):
            return source[len("env "):]
        return f"{option.key} in {source}"

    def on_the_command_line(self, option: Option[Any]) -> bool:
        """Given as a flag or by its environment variable (a message then says exit 2, not 78)."""
        source = self._sources[option.key]
        return source == FLAG or source.startswith("env ")

    def settings(self) -> Iterator[tuple[Option[Any], Any, str]]:
        for option in OPTIONS:
            yield option, self._values[option.key], self._sources[option.key]


def resolve(flags: Mapping[str, Any], name: str | None = None, environ: Mapping[str, str] | None = None) -> Plan:
    """The plan for lock ``name`` (None: no job's table applies) from ``flags`` (the values given
    on the command line, already parsed, by key)."""
    environ = os.environ if environ is None else environ
    file = load_config(flags.get("config") or _env_value(CONFIG, environ))
    job = file.jobs.get(name, {}) if name else {}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for option in OPTIONS:
        values[option.key], sources[option.key] = _resolved(option, flags, environ, file, job, name)
    values[CONFIG.key] = str(file.path) if file.path else None  # the file read (a default place, or the one named)
    return Plan(name, file.path, values, sources)


def _resolved(option: Option[Any], flags: Mapping[str, Any], environ: Mapping[str, str], file: ConfigFile,
              job: Mapping[str, Any], name: str | None) -> tuple[Any, str]:
    if option.key in flags:
        return flags[option.key], FLAG
    env = _env_value(option, environ)
    if env is not None and option.env:
        return _from_env(option, option.env, env), f"env {option.env}"
    if option.key in job:
        if option.adds and option.key in file.top:  # a job's redact rules add to every job's
            return file.top[option.key] + job[option.key], f"{file.path} + {job_table(str(name))}"
        return job[option.key], f"{file.path} {job_table(str(name))}"
    if option.key in file.top:
        return file.top[option.key], str(file.path)
    return option.default, DEFAULT


def _from_env(option: Option[T], variable: str, text: str) -> T:
    """The variable's value parsed by its row; a bad one is exit 2, in one line naming the variable."""
    try:
        return option.parse(text, f"{variable} ({option.flag})" if option.flag else variable)
    except UsageError as exc:
        if variable in str(exc):
            raise
        raise UsageError(f"{variable}: {exc}") from None


def _env_value(option: Option[Any], environ: Mapping[str, str]) -> str | None:
    """The option's environment variable, when set and not empty (as click reads one)."""
    return (environ.get(option.env) or None) if option.env else None


