"""The click options made from the table of settings (config/options.py): ``run``'s (and
``config``'s), and the global ones every command accepts. A value given on the command line is
parsed by its row; what was not given is left to the resolver (config/resolve.py), which reads the
environment, the config file and the defaults, so that ``lockrun config NAME`` can say where each
value came from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from lockrun.cli.params import OneOf, Validated
from lockrun.config.options import GLOBAL_OPTIONS, NAME, RUN_OPTIONS, Option

F = TypeVar("F", bound=Callable[..., Any])

#: Where the values given on the command line are kept (by key), for :func:`given_flags`.
GIVEN = "lockrun.given"


def help_text(option: Option[Any]) -> str:
    """The row's help, and what ``--help`` says of it besides: its default, variable and config key."""
    notes = [f"default: {option.default_text}"]
    if option.env:
        notes.append(f"env: {option.env}")
    if option.key not in ("name", "config"):
        notes.append(f"config: {option.key}" + ("" if option.scope == "run" else ", top level only"))
    return f"{option.help} [{'; '.join(notes)}]"


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Keep a value given on the command line (not a default) by its row's key."""
    key = param.name or ""
    if ctx.get_parameter_source(key) == click.core.ParameterSource.COMMANDLINE:
        if isinstance(value, tuple) and value and isinstance(value[0], tuple):  # a repeatable row: one tuple
            value = tuple(item for items in value for item in items)
        ctx.meta.setdefault(GIVEN, {})[key] = value
    return value


def click_option(option: Option[Any], *, expose: bool = False) -> Callable[[F], F]:
    """One row as a click option; its value is read back with :func:`given_flags`."""
    settings: dict[str, Any] = {"help": help_text(option), "default": None, "callback": _remember,
                                "expose_value": expose}
    if option.sets is not None:
        settings.update(is_flag=True, flag_value=option.sets)
    elif option.choices:
        settings.update(type=OneOf(list(option.choices)), metavar=option.metavar)
    else:
        settings.update(type=Validated(option.metavar or "VALUE", option.parse), metavar=option.metavar,
                        multiple=option.repeatable, default=() if option.repeatable else None)
    # Global options may come before the subcommand's name (group.LockrunGroup): parsed first.
    if option.scope == "global":
        settings["is_eager"] = True
    return click.option(*option.flags, option.key, **settings)


def _options(rows: Iterable[Option[Any]]) -> Callable[[F], F]:
    decorators = [click_option(option) for option in rows if option.flags]

    def decorate(fn: F) -> F:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return decorate


#: ``run``'s options, in the table's order (docs/reference.md "Every setting").
run_options = _options(RUN_OPTIONS)
#: The run options ``lockrun config NAME`` takes: every one but ``--name``, which is its argument.
config_options = _options(option for option in RUN_OPTIONS if option is not NAME)
#: The settings every command accepts: --config, --redis-url, --redis-ca, --prefix, --ledger.
global_options = _options(GLOBAL_OPTIONS)
GLOBAL_OPTION_NAMES = tuple(option.flag for option in GLOBAL_OPTIONS if option.flag)


def given_flags(ctx: click.Context) -> dict[str, Any]:
    """The values given on this command line, by key (``ctx.meta`` is shared by every context of
    one command line)."""
    return dict(ctx.meta.get(GIVEN, {}))
