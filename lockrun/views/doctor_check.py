"""One finding of ``lockrun doctor`` and the words every judgement shares (docs/operating.md
"Checking the setup: lockrun doctor")."""

from __future__ import annotations

from typing import Any, NamedTuple

from lockrun.backends.audit import Unread
from lockrun.core.printable import printable

OK, WARN, FAIL = "ok", "warn", "fail"
#: Worst first: what a report's verdict and exit code follow.
SEVERITY = {OK: 0, WARN: 1, FAIL: 2}


class Check(NamedTuple):
    """One line of the report: the check's name, its status, what it found and, when it is not
    OK, exactly what to change."""

    check: str
    status: str  # OK, WARN or FAIL
    detail: str
    fix: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"check": self.check, "status": self.status, "detail": self.detail, "fix": self.fix}


def said(why: str, limit: int = 200) -> str:
    """What a server or the system said, as one printable line of bounded length."""
    words = " ".join(printable(why).split())
    return words if len(words) <= limit else words[: limit - 1] + "…"


def unread_text(what: str, value: Unread) -> str:
    """``could not read X (the server's words)``: the WARN every unreadable value gets."""
    return f"could not read {what} ({said(value.why)})"


def duration_text(seconds: float) -> str:
    """``0.05 ms``, ``2.5 ms``, ``120 ms``, ``1.25 s``: round trips, hand-overs, clock offsets."""
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    milliseconds = seconds * 1000
    digits = 2 if milliseconds < 1 else 1 if milliseconds < 100 else 0
    return f"{milliseconds:.{digits}f} ms"


def seconds_text(seconds: float) -> str:
    """``60s``, ``0.2s``: a setting, as flags take it."""
    return f"{seconds:g}s"
