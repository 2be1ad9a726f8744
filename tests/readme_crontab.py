"""The crontab lines of the README and docs/*.md: every job line of every fenced code block, with
the ``NAME=value`` lines that come before it in its block (cron applies those to the lines after them).

Shared by tests/test_cron.py, which runs each of them under a real cron daemon, and
tests/test_docs.py, which checks that the man page's crontab lines are among them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: Where crontab lines are written for people: the front door, then the reference.
DOCUMENTS = (README, *sorted((ROOT / "docs").glob("*.md")))

_FENCE = re.compile(r"^\s*```")
_FIELD = r"[0-9*][0-9*/,\-]*"
_JOB = re.compile(r"^(?P<when>@(?:reboot|yearly|annually|monthly|weekly|daily|midnight|hourly)"
                  rf"|(?:{_FIELD}\s+){{4}}{_FIELD})"
                  r"\s+(?P<command>\S.*)$")
_ENV = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=(?P<value>.*)$")


class CrontabLine(NamedTuple):
    line_no: int  # in its document, 1-based
    when: str  # the five time fields, or @reboot etc.
    command: str  # the rest of the line, exactly as written
    env: tuple[str, ...]  # NAME=value lines before it in its code block
    document: str = "README.md"  # README.md, or docs/NAME.md

    @property
    def where(self) -> str:
        return f"{self.document} line {self.line_no}"

    @property
    def text(self) -> str:
        return f"{self.when} {self.command}"


def job_line(text: str) -> re.Match | None:
    """The schedule and command of a crontab job line, or None."""
    return _JOB.match(text.strip())


def crontab_lines(markdown: str | None = None, document: str = "README.md") -> list[CrontabLine]:
    """Every crontab job line in the code blocks of the README and docs/*.md (or of ``markdown``), in order."""
    if markdown is None:
        return [line for path in DOCUMENTS
                for line in crontab_lines(path.read_text(), str(path.relative_to(ROOT)))]
    text = markdown
    found: list[CrontabLine] = []
    in_block = False
    env: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if _FENCE.match(raw):
            in_block, env = not in_block, []
            continue
        if not in_block:
            continue
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if match := job_line(line):
            found.append(CrontabLine(number, match["when"], match["command"], tuple(env), document))
        elif _ENV.match(line):
            env.append(line)
    return found


def unescaped_percent(command: str) -> bool:
    """cron turns an unescaped % into a newline: the command is cut there."""
    return re.search(r"(?<!\\)%", command) is not None
