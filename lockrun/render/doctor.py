"""``lockrun doctor``'s report: one line per check, or its JSON (docs/operating.md "Checking the
setup: lockrun doctor"). Plain text: the report is read by people and by grep."""

from __future__ import annotations

import sys

from lockrun.core.printable import long_words_clipped, printable
from lockrun.render.tables import print_json
from lockrun.views.doctor import DoctorReport
from lockrun.views.doctor_check import Check

#: The widest check name, so that the details line up.
NAME_WIDTH = 11


def check_line(check: Check) -> str:
    """``FAIL eviction    maxmemory-policy allkeys-lru …; fix: CONFIG SET …``: one line, whatever
    a server or a path put in it."""
    line = f"{check.status.upper():<4} {check.check:<{NAME_WIDTH}} {check.detail}"
    if check.fix:  # a server's own sentence ends in a full stop: not before the semicolon
        line = f"{line.rstrip('.')}; fix: {check.fix}"
    return printable(long_words_clipped(line))


def print_report(report: DoctorReport, as_json: bool) -> None:
    if as_json:
        print_json(report.as_json())
        return
    sys.stdout.write("".join(check_line(check) + "\n" for check in report.checks))
