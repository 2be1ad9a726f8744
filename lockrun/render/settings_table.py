"""``lockrun config NAME``: one line per setting, its value and where it came from, like
``git config --show-origin``; or the JSON of views/settings_view."""

from __future__ import annotations

import json
import sys

from lockrun.core.clock import exact_duration
from lockrun.core.printable import printable
from lockrun.views.settings_view import Setting, settings_json

#: Settings whose value is a number of seconds, shown as a duration (``7m``) in the table.
SECONDS = frozenset({"ttl", "wait", "timeout", "kill_after", "min_hold", "once_every", "remember", "retry_delay",
                     "jitter", "warn_after", "every", "grace", "socket_timeout", "connect_timeout"})


def value_text(setting: Setting) -> str:
    value = setting.value
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if setting.key in SECONDS and isinstance(value, (int, float)):
        return exact_duration(float(value))
    if isinstance(value, list):
        return ",".join(str(item) for item in value) or "-"
    return printable(str(value))


def print_settings(name: str, settings: list[Setting], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(settings_json(name, settings), indent=2) + "\n")
        return
    rows = [(setting.key, value_text(setting), printable(_source_text(setting))) for setting in settings]
    widths = [max(len(row[column]) for row in rows) for column in (0, 1)]
    sys.stdout.write(f"settings of a run of {printable(name)}:\n")
    for key, value, source in rows:
        sys.stdout.write(f"  {key:<{widths[0]}}  {value:<{widths[1]}}  {source}\n")


def _source_text(setting: Setting) -> str:
    """Where the value came from; for an unset default, what it means (wait: give up at once)."""
    return f"{setting.source}: {setting.unset_means}" if setting.unset_means else setting.source
