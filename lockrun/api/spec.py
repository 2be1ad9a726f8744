"""What ``lockrun.lock()`` is given, checked as the CLI checks its flags (docs/python.md): a wrong
type is TypeError, a value out of the CLI's range ValueError in the CLI's words."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

from lockrun.config.values import parse_time_span, validate_name
from lockrun.core.errors import UsageError
from lockrun.core.redis_url import validate_redis_url

OnLost = Literal["raise", "flag"]


def _seconds(value: object, what: str, *, minimum: float = 0.0, allow_zero: bool = False) -> float:
    """Seconds (a number) or the CLI's time syntax ("90s", "2m"), in the CLI's range."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{what} must be a number of seconds or a duration string such as '2m',"
                        f" not {type(value).__name__}")
    try:
        return parse_time_span(value, what, minimum=minimum, allow_zero=allow_zero)
    except UsageError as exc:
        raise ValueError(str(exc)) from None


class BlockSpec(NamedTuple):
    """What ``lock()`` was given, checked."""

    name: str
    ttl: float | None
    wait: float
    redis_url: str | None
    on_lost: OnLost


def block_spec(name: object, ttl: object, wait: object, redis_url: object, on_lost: object) -> BlockSpec:
    """The arguments of ``lock()`` checked as the CLI checks its flags: TypeError for a wrong type,
    ValueError (with the CLI's words) for a value out of its range."""
    checked_name = _name(name)
    checked_url = None if redis_url is None else _redis_url(redis_url)
    if on_lost not in ("raise", "flag"):
        raise ValueError(f"on_lost must be 'raise' or 'flag', not {on_lost!r}")
    return BlockSpec(
        name=checked_name,
        ttl=None if ttl is None else _seconds(ttl, "ttl", minimum=1),
        wait=_seconds(wait, "wait", allow_zero=True),
        redis_url=checked_url,
        on_lost="raise" if on_lost == "raise" else "flag",
    )


def _name(name: object) -> str:
    return _text(name, "the lock name must be a str", validate_name)


def _redis_url(redis_url: object) -> str:
    return _text(redis_url, "redis_url must be a str or None", validate_redis_url)


def _text(value: object, must_be: str, validate: Callable[[str], object]) -> str:
    """An argument that is text: TypeError for another type, ValueError in the CLI's words."""
    if not isinstance(value, str):
        raise TypeError(f"{must_be}, not {type(value).__name__}")
    try:
        validate(value)
    except UsageError as exc:
        raise ValueError(str(exc)) from None
    return value
