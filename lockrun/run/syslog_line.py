"""``--syslog``: one line per finished run (with --retry: per finished attempt) to syslog, facility
cron, as ``lockrun[PID]: name=... run_id=... status=...``, so that a log pipeline sees every run
without reading SQLite (docs/operating.md "Output").

The standard library's :class:`logging.handlers.SysLogHandler` sends it, not the ``syslog``
module: both speak to the local syslog socket, but only the handler takes the socket's path, so
``LOCKRUN_SYSLOG_SOCKET`` (default ``/dev/log``) can point it elsewhere: a container's mounted
socket, or a test's. A syslog that cannot be reached is one warning, never a failed run.
"""

from __future__ import annotations

import os
import re
from typing import Any

from lockrun.core.errors import Report

#: Where the line goes: the local syslog socket, unless the environment names another.
SYSLOG_SOCKET_ENV = "LOCKRUN_SYSLOG_SOCKET"
DEFAULT_SYSLOG_SOCKET = "/dev/log"
#: The fields, in this order (docs/operating.md "Output").
FIELDS = ("name", "run_id", "status", "exit_status", "duration_s", "host", "attempt")
_PLAIN = re.compile(r"[A-Za-z0-9._:@/+-]+")


def field_value(value: object) -> str:
    """A value as ``key=value`` shows it: bare when it is plain, else double-quoted with ``\\``
    and ``"`` escaped and control characters as ``\\xNN`` (a host name or a lock name never splits
    the line). None is ``-``."""
    if value is None:
        return "-"
    text = f"{value:g}" if isinstance(value, float) else str(value)
    if _PLAIN.fullmatch(text):
        return text
    escaped = "".join(
        "\\" + char if char in '\\"' else (f"\\x{ord(char):02x}" if ord(char) < 32 or ord(char) == 127 else char)
        for char in text
    )
    return f'"{escaped}"'


def run_line(row: dict[str, Any], attempt: int) -> str:
    """``name=job run_id=… status=failed exit_status=3 duration_s=1.2 host=app-1 attempt=1``."""
    values = {**row, "attempt": attempt}
    return " ".join(f"{key}={field_value(values.get(key))}" for key in FIELDS)


def send_run(row: dict[str, Any], *, attempt: int, report: Report) -> None:
    """Send the run's line (a failed run at priority warning, others at info); a failure is one warning."""
    import logging
    import logging.handlers

    class RaisingHandler(logging.handlers.SysLogHandler):
        def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
            raise  # noqa: PLE0704 - inside emit's except: the error goes to the caller, not stderr

    address = os.environ.get(SYSLOG_SOCKET_ENV) or DEFAULT_SYSLOG_SOCKET
    line = run_line(row, attempt)
    level = logging.INFO if row.get("status") in ("succeeded", "duplicate", "busy") else logging.WARNING
    try:
        handler = RaisingHandler(address=address, facility=logging.handlers.SysLogHandler.LOG_CRON)
    except OSError as exc:
        report("warn", f"--syslog: cannot reach syslog at {address} ({exc.strerror or exc})")
        return
    try:
        handler.ident = f"lockrun[{os.getpid()}]: "
        handler.append_nul = False  # as syslog(3) sends it
        handler.emit(logging.LogRecord("lockrun", level, __file__, 0, line, None, None))
    except OSError as exc:
        report("warn", f"--syslog: cannot write to syslog at {address} ({exc.strerror or exc})")
    finally:
        handler.close()
