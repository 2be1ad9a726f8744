"""The user's masking rules: the config keys ``redact`` and ``record_command`` read into a
:class:`~lockrun.core.masking.Masking` (docs/fleet.md "What is published")."""

from __future__ import annotations

import re

from lockrun.core.printable import quoted
from lockrun.core.secret_names import Masking, normal_name

#: The config key ``redact``: at most this many entries, each at most this long.
MAX_REDACT_ENTRIES = 100
MAX_REDACT_ENTRY = 200
_OPTION_ENTRY = r"--?[A-Za-z0-9][A-Za-z0-9_.\-]*"
_NAME_ENTRY = r"[A-Za-z_][A-Za-z0-9_.\-]*"


def parse_masking(redact: object = (), record_command: bool = True) -> Masking:
    """The config keys ``redact`` and ``record_command`` as rules; ValueError naming the entry that
    is not one (the config file turns it into exit 78)."""
    if isinstance(redact, (str, bytes)) or not isinstance(redact, (list, tuple)):
        raise ValueError(f"not {quoted(redact)}")
    if len(redact) > MAX_REDACT_ENTRIES:
        raise ValueError(f"not a list of {len(redact)}")
    options, names, patterns = set(), set(), []
    for entry in map(_entry, redact):
        if entry.startswith("re:"):
            patterns.append(_pattern_entry(entry))
        elif re.fullmatch(_OPTION_ENTRY, entry, re.ASCII):
            options.add(entry)
        elif re.fullmatch(_NAME_ENTRY, entry, re.ASCII):
            names.add(normal_name(entry))
        else:
            raise ValueError(f"not the entry {quoted(entry)}")
    return Masking(frozenset(options), frozenset(names), tuple(patterns), record_command)


def _entry(entry: object) -> str:
    if not isinstance(entry, str) or not entry or len(entry) > MAX_REDACT_ENTRY:
        raise ValueError(f"not the entry {quoted(entry)}")
    return entry


def _pattern_entry(entry: str) -> re.Pattern[str]:
    """``re:`` and a regular expression that cannot match the empty text."""
    try:
        pattern = re.compile(entry[3:])
    except (re.error, RecursionError, OverflowError) as exc:
        raise ValueError(f"not the entry {quoted(entry)}: not a regular expression ({exc})") from None
    if pattern.search("") is not None:
        raise ValueError(f"not the entry {quoted(entry)}: it matches the empty text")
    return pattern
