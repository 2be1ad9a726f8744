"""What ``lockrun config NAME`` shows: every setting a run of NAME would use, resolved as the run
resolves it (config/resolve.py), and where each value came from (docs/reference.md "Every setting")."""

from __future__ import annotations

from typing import Any, NamedTuple

from lockrun.config.options import NAME, Option
from lockrun.config.resolve import Plan


class Setting(NamedTuple):
    key: str
    value: Any  # as JSON gives it: a number of seconds, a string, a list, true/false or null
    source: str  # flag, env LOCKRUN_TTL, FILE [job.NAME], FILE or default
    unset_means: str | None = None  # an unset default's meaning, as --help says it ("0 (give up at once)")


def settings_of(plan: Plan) -> list[Setting]:
    """Each setting of the plan but the name (the command's argument), in the table's order; a
    value that may hold a secret shown as its row hides it (docs/guarantees.md "What lockrun guarantees, and how",
    "Secrets")."""
    return [Setting(option.key, _shown(option, value), source,
                    option.shown_default if value is None and option.shown_default else None)
            for option, value, source in plan.settings() if option is not NAME]


def _shown(option: Option[Any], value: Any) -> Any:
    hides = option.parse.hides  # a Redis URL without its password, a ping or webhook URL as scheme://host/…
    if hides is not None and isinstance(value, str):
        return hides(value)
    if hides is not None and isinstance(value, tuple):
        return [hides(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # 420, not 420.0: seconds as a person writes them
    if isinstance(value, tuple):
        return list(value)
    return value


def settings_json(name: str, settings: list[Setting]) -> dict[str, Any]:
    """``{"name": …, "settings": {"ttl": {"value": 420, "source": "…"}, …}}``."""
    return {"name": name, "settings": {setting.key: {"value": setting.value, "source": setting.source}
                                       for setting in settings}}


