"""``--syslog``: one line per finished run (with --retry: per finished attempt) to syslog, facility
cron, as ``lockrun[PID]: name=... run_id=... status=...``, so that a log pipeline sees every run
without reading SQLite (docs/operating.md "Output").

The datagram is what logger(1) sends (util-linux: its ``syslog_local_header``, ``--rfc3164`` and
``--rfc5424``), chosen by ``LOCKRUN_SYSLOG_FORMAT``:

- ``local`` (the default), what logger(1) and syslog(3) send to the local socket:
  ``<PRI>Dec  6 01:02:03 lockrun[PID]: MSG``. The receiving daemon adds this host's name (it runs
  on this host); the line's ``host=`` field names it too. rsyslog's and journald's local sockets
  read a host name in a datagram as the tag, so none is sent there by default.
- ``rfc5424``: ``<PRI>1 2026-12-06T01:02:03.123456+01:00 HOST lockrun PID - - MSG``: for a socket
  that relays to another host (a container's mounted socket), whose syslog should keep this
  host's name and the full time; ``rfc3164``: ``<PRI>Dec  6 01:02:03 HOST lockrun[PID]: MSG``.

``LOCKRUN_SYSLOG_SOCKET`` (default ``/dev/log``) names the socket: a container's mounted socket,
or a test's. A syslog that cannot be reached is one warning, never a failed run.
"""

from __future__ import annotations

import errno
import os
import re
import time
from typing import Any

from lockrun.core.errors import Report

#: Where the line goes: the local syslog socket, unless the environment names another.
SYSLOG_SOCKET_ENV = "LOCKRUN_SYSLOG_SOCKET"
DEFAULT_SYSLOG_SOCKET = "/dev/log"
#: Which header the line has (the module's docstring): local, rfc3164 or rfc5424.
SYSLOG_FORMAT_ENV = "LOCKRUN_SYSLOG_FORMAT"
SYSLOG_FORMATS = ("local", "rfc3164", "rfc5424")
#: syslog's facility cron (9) and the severities lockrun uses (RFC 5424 section 6.2.1).
FACILITY_CRON = 9
WARNING, NOTICE, INFO = 4, 5, 6
#: Finished runs whose line is informational; a paused skip, asked for by an operator, is a
#: notice; everything else (failed, timeout, lost, error, ...) a warning.
INFO_STATUSES = ("succeeded", "duplicate", "busy")
NOTICE_STATUSES = ("paused",)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
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
    return '"' + "".join(map(_escaped, text)) + '"'


def _escaped(char: str) -> str:
    """A character of a quoted value: ``\\`` and ``"`` escaped, a control character as ``\\xNN``."""
    if char in '\\"':
        return "\\" + char
    return f"\\x{ord(char):02x}" if ord(char) < 32 or ord(char) == 127 else char


def run_line(row: dict[str, Any], attempt: int) -> str:
    """``name=job run_id=… status=failed exit_status=3 duration_s=1.2 host=app-1 attempt=1``."""
    values = {**row, "attempt": attempt}
    return " ".join(f"{key}={field_value(values.get(key))}" for key in FIELDS)


def severity_of(status: object) -> int:
    return INFO if status in INFO_STATUSES else NOTICE if status in NOTICE_STATUSES else WARNING


def datagram(message: str, severity: int, form: str, now: float, pid: int, host: str) -> bytes:
    """The whole datagram for ``message`` in ``form`` (SYSLOG_FORMATS), stamped ``now`` in this
    host's local time, as logger(1) writes each form."""
    priority = f"<{FACILITY_CRON * 8 + severity}>"
    moment = time.localtime(now)
    if form == "rfc5424":
        offset = moment.tm_gmtoff or 0
        zone = f"{'+' if offset >= 0 else '-'}{abs(offset) // 3600:02d}:{abs(offset) % 3600 // 60:02d}"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", moment) + f".{int(now % 1 * 1_000_000):06d}{zone}"
        return f"{priority}1 {stamp} {host or '-'} lockrun {pid} - - {message}".encode("utf-8", "replace")
    # RFC 3164's TIMESTAMP: English month, space-padded day, whatever the locale.
    stamp = f"{_MONTHS[moment.tm_mon - 1]} {moment.tm_mday:2d} {time.strftime('%H:%M:%S', moment)}"
    origin = f" {host}" if form == "rfc3164" and host else ""
    return f"{priority}{stamp}{origin} lockrun[{pid}]: {message}".encode("utf-8", "replace")


def send_run(row: dict[str, Any], *, attempt: int, report: Report) -> None:
    """Send the run's line (severity_of its status); a failure is one warning."""
    from lockrun.system.host import hostname

    address = os.environ.get(SYSLOG_SOCKET_ENV) or DEFAULT_SYSLOG_SOCKET
    data = datagram(run_line(row, attempt), severity_of(row.get("status")), _form(report), time.time(), os.getpid(),
                    hostname())
    _send(address, data, report)


def _form(report: Report) -> str:
    """The line's form, from SYSLOG_FORMAT_ENV (anything else: one warning, and local)."""
    form = os.environ.get(SYSLOG_FORMAT_ENV) or "local"
    if form not in SYSLOG_FORMATS:
        report("warn", f"--syslog: {SYSLOG_FORMAT_ENV}={form!r} is none of {', '.join(SYSLOG_FORMATS)}; using local")
        form = "local"
    return form


def _send(address: str, data: bytes, report: Report) -> None:
    import socket

    # A datagram socket, as syslog(3) prefers; a stream socket (some systems' /dev/log) takes the
    # line with a NUL after it, as syslog(3) sends it there.
    for kind, ending in ((socket.SOCK_DGRAM, b""), (socket.SOCK_STREAM, b"\0")):
        try:
            with socket.socket(socket.AF_UNIX, kind | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(2.0)
                try:
                    sock.connect(address)
                except OSError as exc:
                    if exc.errno == errno.EPROTOTYPE:
                        continue
                    report("warn", f"--syslog: cannot reach syslog at {address} ({exc.strerror or exc})")
                    return
                sock.sendall(data + ending)  # one datagram, or the whole line down the stream
                return
        except OSError as exc:
            report("warn", f"--syslog: cannot write to syslog at {address} ({exc.strerror or exc})")
            return
    report("warn", f"--syslog: cannot reach syslog at {address} (neither a datagram nor a stream socket)")
