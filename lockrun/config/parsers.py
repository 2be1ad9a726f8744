"""The parsers of the table's rows (config/options.py): each takes a flag's text or a TOML value
and returns the setting, or raises UsageError naming where the value came from; each carries the
text that says what a value must be (a config file's error line, docs/reference.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from lockrun.config import values
from lockrun.core import defaults
from lockrun.core.errors import UsageError
from lockrun.core.printable import quoted

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Parse(Generic[T_co]):
    """A row's parser: ``parse(value, what)`` -> the value, or UsageError naming ``what``; with
    the text that says what a value must be (a config file's error line, the reference)."""

    __slots__ = ("_parse", "expected", "file_types", "hides")

    def __init__(self, parse: Callable[[object, str], T_co], expected: str,
                 file_types: tuple[type, ...] | None = None, hides: Callable[[str], str] | None = None) -> None:
        self._parse = parse
        self.expected = expected
        # The TOML types a config file may give it (None: those parse takes): a whole number is
        # an integer there, never the string a flag gives.
        self.file_types = file_types
        # A value that may hold a secret (a URL's password, a ping URL's UUID) as a person may see
        # it: in an error line, and in `lockrun config`.
        self.hides = hides

    def __call__(self, value: object, what: str) -> T_co:
        return self._parse(value, what)

    def shown(self, value: object) -> str:
        """``value`` quoted for an error line, its secrets hidden."""
        return _shown(value, self.hides)


def _shown(value: object, hides: Callable[[str], str] | None) -> str:
    if hides is None:
        return quoted(value)
    if isinstance(value, str):
        return quoted(hides(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_shown(item, hides) for item in value) + "]"
    if isinstance(value, dict):  # a TOML table where a URL belongs: its values unseen
        return "{" + ", ".join(f"{quoted(key)}: {_shown(item, hides)}" for key, item in value.items()) + "}"
    return quoted(value)


def _refuse(what: str, value: object, expected: str, hides: Callable[[str], str] | None = None) -> UsageError:
    return UsageError(f"invalid {what} {_shown(value, hides)}: expected {expected}")


def seconds(minimum: float = 0.0, allow_zero: bool = False, maximum: float = defaults.MAX_SECONDS) -> Parse[float]:
    """A time value: seconds (a TOML number, or ``90``) or a number with a unit (``2m``)."""
    example = "90" if minimum >= 1 else "30"
    expected = f'seconds ({example}) or a duration string ("2m"), {values.seconds_range(minimum, allow_zero, maximum)}'

    def parse(value: object, what: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise _refuse(what, value, expected)
        return values.parse_time_span(value, what, minimum=minimum, allow_zero=allow_zero, maximum=maximum)

    return Parse(parse, expected)


def whole(minimum: int, maximum: int, unit: str = "") -> Parse[int]:
    """A whole number (ASCII digits, or a TOML integer) from ``minimum`` to ``maximum``."""
    expected = f"a whole number{' of ' + unit if unit else ''} from {minimum} to {maximum}"

    def parse(value: object, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise _refuse(what, value, expected)
        return values.parse_whole(value, what, minimum, maximum)

    return Parse(parse, expected, file_types=(int,))


def text(expected: str) -> Parse[str]:
    def parse(value: object, what: str) -> str:
        if not isinstance(value, str) or not value:
            raise _refuse(what, value, expected)
        return value

    return Parse(parse, expected)


def _switch(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise _refuse(what, value, "true or false")
    return value


#: A flag without a value, or a TOML ``true``/``false``.
SWITCH = Parse(_switch, "true or false")


def choice(*allowed: str) -> Parse[str]:
    expected = " or ".join(f'"{name}"' for name in allowed)

    def parse(value: object, what: str) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise _refuse(what, value, expected)
        return value

    return Parse(parse, expected)


def from_text(parse_text: Callable[[str, str], T], expected: str, numbers: bool = False,
              hides: Callable[[str], str] | None = None) -> Parse[T]:
    """One of config/values' parsers of text; a TOML integer is its digits where ``numbers``."""

    def parse(value: object, what: str) -> T:
        if numbers and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise _refuse(what, value, expected, hides)
        return parse_text(value, what)

    return Parse(parse, expected, hides=hides)


def _urls(value: object, what: str) -> tuple[str, ...]:
    """``--notify URL`` (repeated: a tuple) or ``notify_urls = [...]``: http(s) URLs."""
    given = list(value) if isinstance(value, (list, tuple)) else [value]
    strings = [url for url in given if isinstance(url, str)]
    if not given or len(strings) != len(given):
        raise _refuse(what, value, URLS.expected, values.redact_endpoint)
    return tuple(values.validate_http_url(url, what) for url in strings)


URLS = Parse(_urls, "a list of http:// or https:// URLs", hides=values.redact_endpoint)


def _success_codes(value: object, what: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, (str, list)):
        raise _refuse(what, value, SUCCESS_CODES.expected)
    return values.parse_success_exit(value, what)


SUCCESS_CODES = Parse(_success_codes, f"{values.SUCCESS_EXIT_RULE} (24, \"1,24\" or [1, 24])")


def _replicas(value: object, what: str) -> int | str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _refuse(what, value, REPLICAS_RULE.expected)
    return values.parse_replicas(value, what)


REPLICAS_RULE = Parse(_replicas, f'{values.REPLICAS_RULE} ("all", quoted)')


def _zone_name(value: object, what: str) -> str:
    """An IANA zone name, checked now; the zone itself is loaded where a run needs it."""
    from lockrun.core.zones import parse_zone

    if not isinstance(value, str):
        raise _refuse(what, value, ZONE_NAME.expected)
    return parse_zone(value, what).name


ZONE_NAME = Parse(_zone_name, 'an IANA time zone name such as "UTC" or "Europe/Berlin"')


def redact_entries(value: object, what: str) -> tuple[str, ...]:
    """``redact``: the entries as given, once core/masking_rules.py has read them as rules."""
    from lockrun.core.masking_rules import parse_masking

    if not isinstance(value, (list, tuple)):
        raise _refuse(what, value, "a list of strings")
    try:
        parse_masking(value)
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}") from None
    assert isinstance(value, (list, tuple))  # parse_masking refuses anything else
    return tuple(str(entry) for entry in value)
