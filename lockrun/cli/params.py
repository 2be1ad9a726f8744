"""The click parameter types: each wraps one validator from ``config/values``, so a value is
checked, and its message worded, in one place (exit 2 with click's "Invalid value" line).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from lockrun.config import values
from lockrun.core import defaults
from lockrun.core.errors import LockrunError, UsageError
from lockrun.core.printable import quoted

if TYPE_CHECKING:
    from datetime import datetime

    from click.shell_completion import CompletionItem

    # click >= 8.3 types ParamType by the value it gives and the input it takes; older clicks
    # (pyproject allows 8.1) cannot subscript it at run time, hence the split.
    ParamTypeBase = click.ParamType[object, object]
    ChoiceBase = click.Choice[str]
else:
    ParamTypeBase = click.ParamType
    ChoiceBase = click.Choice


#: A validator from config/values: (the text given, the option's name for messages) -> the value.
Validator = Callable[[str, str], object]


class Validated(ParamTypeBase):
    """A click type that defers to one validator from settings.

    The validator's message becomes click's "Invalid value for '--opt'" line.
    With ``echo_value``, the message keeps the value and drops the validator's
    own "invalid --opt 'x':" prefix, which click already says.
    """

    def __init__(self, name: str, validate: Validator, echo_value: bool = True) -> None:
        self.name = name
        self.validate = validate
        self.echo_value = echo_value

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> object:
        if not isinstance(value, str):
            return value  # a default, already of the right type
        what = param.opts[0] if param else self.name
        try:
            return self.validate(value, what)
        except LockrunError as exc:
            message = str(exc)
            said = f"invalid {what} {quoted(value)}: "
            if self.echo_value and message.startswith(said):
                # click names the option; the value once, quoted as every error line quotes it
                message = f"{quoted(value)}: {message[len(said):]}"
            self.fail(message, param, ctx)


class OneOf(ChoiceBase):
    """click's Choice, whose message quotes the value as every error line does (a short prefix of a
    long one, ``\\xff`` for a byte that is not UTF-8: core/printable.quoted)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if not isinstance(value, str) or value in self.choices:
            return super().convert(value, param, ctx)  # a default, or one of them: click's own answer
        self.fail(f"{quoted(value)} is not one of {', '.join(quoted(choice) for choice in self.choices)}.", param, ctx)


def whole_number(minimum: int, maximum: int) -> Validated:
    """A whole number in ASCII digits from ``minimum`` to ``maximum`` (click's IntRange took ``' 2'`` and ``٢``)."""
    return Validated("N", lambda value, what: values.parse_whole(value, what, minimum, maximum))


def seconds_type(minimum: float = 0.0, allow_zero: bool = False) -> Validated:
    """A time value of at most 365 days: ``90``, ``90s``, ``2m``, ``1.5h``, ``7d`` (config/values)."""
    return Validated(
        "DURATION", lambda value, what: values.parse_seconds(value, what, minimum=minimum, allow_zero=allow_zero)
    )


DURATION = Validated("DURATION", values.parse_duration)  # the same syntax, at most 100 years
# `lockrun pause` (docs/operating.md "Pausing a job"): an end at most MAX_PAUSE_S ahead, a one-line reason.
PAUSE_FOR = Validated("DURATION", lambda value, what: values.parse_seconds(value, what,
                                                                          maximum=defaults.MAX_PAUSE_S))
PAUSE_REASON = Validated("TEXT", values.validate_pause_reason)


def _pause_end(value: str, what: str) -> float:
    import time

    from lockrun.config.moments import parse_pause_end

    return parse_pause_end(value, what, time.time(), defaults.MAX_PAUSE_S)


PAUSE_UNTIL = Validated("TIME", _pause_end)
LOCK_NAME = Validated("NAME", lambda value, what: values.validate_name(value), echo_value=False)


def moment_type(maximum: float | None = None) -> Validated:
    """A ``--since``/``--until``: a duration ago (at most ``maximum``; default the timeline's window) or a time."""

    def parse(value: str, what: str) -> float | datetime:
        from lockrun.config.moments import MAX_WINDOW_S, parse_moment  # not at import time: `run` never needs it

        return parse_moment(value, what, maximum=MAX_WINDOW_S if maximum is None else maximum)

    return Validated("TIME", parse)


MOMENT = moment_type()
HOST = Validated("H", values.validate_host)




def output_file(dash: bool = False) -> Validated:
    """A file lockrun writes: a device, FIFO or socket there (or a link to one) is a usage error
    now, not a warning after the run; the device stays as it is (``-``: standard output)."""

    def check(value: str, what: str) -> str:
        problem = None if dash and value == "-" else values.output_path_problem(value, "", directories=False)
        if problem:
            raise UsageError(problem)
        return value

    return Validated("PATH", check, echo_value=False)


class StatusFilter(Validated):
    """``history --status``: ledger statuses, comma-separated (and the option repeatable), or
    ``failures``; completion offers them, after a comma too."""

    def __init__(self) -> None:
        super().__init__("STATUSES", values.parse_status_filter)

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        from click.shell_completion import CompletionItem

        done, _, last = incomplete.rpartition(",")
        head = done + "," if done else ""
        return [CompletionItem(head + name) for name in values.STATUS_FILTER_NAMES if name.startswith(last)]


STATUS_FILTER = StatusFilter()


RUN_ID = Validated("RUN_ID", lambda value, what: values.validate_run_id(value), echo_value=False)
