"""--syslog read by a real rsyslogd (contract §16; docs/operating.md "Output"): the tag
lockrun[PID], facility cron, the severity (warning for a failure, notice for a paused skip, info
for a success), the timestamp from the line, and the host name: by default the line is what
logger(1) and syslog(3) send to the local socket (the daemon, on this host, adds the host's name);
LOCKRUN_SYSLOG_FORMAT=rfc5424 or rfc3164 carries this host's name to a syslog elsewhere (a relay)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import history, run_lockrun, wait_until
from tests.real_clients import program
from tests.test_once_zone import LIBFAKETIME

RELAY_NAME = "rsyslog-relay"  # the daemon's own host name: a line's name must be told from it
#: What rsyslog parsed, one field per `|` (its property names).
TEMPLATE = "%HOSTNAME%|%TIMESTAMP:::date-rfc3339%|%syslogtag%|%programname%|%procid%|%syslogseverity-text%|" \
           "%syslogfacility-text%|%msg%\\n"
CONFIG = """global(workDirectory="{dir}" localHostName="{relay}")
module(load="imuxsock" SysSock.Use="off")
template(name="fields" type="string" string="{template}")
# Debian's own imuxsock settings but for the time: the line's, not the arrival's, is read.
input(type="imuxsock" Socket="{dir}/local.sock" IgnoreTimestamp="off" UseSysTimeStamp="off" Ruleset="local")
# A socket that relays for other hosts (a container's): their names and times are kept.
input(type="imuxsock" Socket="{dir}/relay.sock" IgnoreTimestamp="off" UseSysTimeStamp="off" ParseHostname="on"
      UseSpecialParser="off"
      Ruleset="relay")
ruleset(name="local") {{ action(type="omfile" file="{dir}/local.log" template="fields") }}
ruleset(name="relay") {{ action(type="omfile" file="{dir}/relay.log" template="fields") }}
"""
DAYS_BACK = 2  # lockrun's clock, moved back (libfaketime): the time rsyslog shows is the line's


class Rsyslog:
    def __init__(self) -> None:
        binary = program("rsyslogd", "rsyslog", "/usr/sbin/rsyslogd")
        self.dir = Path(tempfile.mkdtemp(prefix="lr-rs-"))  # short: socket paths are limited
        config = self.dir / "rsyslog.conf"
        config.write_text(CONFIG.format(dir=self.dir, relay=RELAY_NAME, template=TEMPLATE))
        self.proc = subprocess.Popen([binary, "-n", "-f", str(config), "-i", str(self.dir / "pid")],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_until(lambda: self._alive() and (self.dir / "local.sock").exists() and (self.dir / "relay.sock").exists(),
                   timeout=30, what="rsyslogd's sockets")

    def _alive(self) -> bool:
        assert self.proc.poll() is None, self.proc.stdout.read() if self.proc.stdout else ""
        return True

    def lines(self, which: str, count: int) -> list[list[str]]:
        path = self.dir / f"{which}.log"

        def read() -> list[list[str]] | None:
            text = path.read_text() if path.exists() else ""
            found = [[part.strip() for part in line.split("|")] for line in text.splitlines()]
            return found if len(found) >= count else None

        return wait_until(read, timeout=30, what=f"{count} lines in rsyslog's {which}.log")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def rsyslog():
    server = Rsyslog()
    yield server
    server.stop()


def back_in_time(env: dict) -> dict:
    if LIBFAKETIME is None:
        pytest.fail("libfaketime is missing (apt-get install faketime); .ci/run installs it")
    return {**env, "LD_PRELOAD": LIBFAKETIME, "FAKETIME": f"-{DAYS_BACK}d", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def days_back(stamp: str) -> int:
    """How many days before today (this host's local date) rsyslog dated a line."""
    return (datetime.now().astimezone().date() - datetime.fromisoformat(stamp).astimezone().date()).days


def test_rsyslog_reads_the_default_lines_as_loggers(local_env, rsyslog):
    env = {**local_env, "LOCKRUN_SYSLOG_SOCKET": str(rsyslog.dir / "local.sock")}
    assert run_lockrun(back_in_time(env), "-n", "nightly", "--syslog", "--", "sh", "-c", "exit 3").returncode == 3
    assert run_lockrun(env, "-n", "nightly", "--syslog", "--", "true").returncode == 0
    assert run_lockrun(env, "pause", "nightly", "--for", "1h").returncode == 0
    assert run_lockrun(env, "-n", "nightly", "--syslog", "--", "true").returncode == 0  # a paused skip
    rows = list(reversed(history(env, "nightly")))
    assert [row["status"] for row in rows] == ["failed", "succeeded", "paused"]
    lines = rsyslog.lines("local", 3)
    for (host, _stamp, tag, program_name, procid, severity, facility, message), row, wanted in zip(
            lines, rows, ("warning", "info", "notice"), strict=True):
        assert (tag, program_name, procid) == (f"lockrun[{row['pid']}]:", "lockrun", str(row["pid"]))
        assert (severity, facility) == (wanted, "cron")
        assert host == RELAY_NAME  # the local socket: the daemon's name (it is this host's)
        assert f"host={os.uname().nodename}" in message and f"run_id={row['run_id']}" in message
        assert message.startswith("name=nightly ") and f"status={row['status']}" in message
    assert days_back(lines[0][1]) == DAYS_BACK and days_back(lines[1][1]) == 0  # the line's time


@pytest.mark.parametrize("form", ["rfc5424", "rfc3164"])
def test_a_relay_keeps_this_hosts_name_and_time(local_env, rsyslog, form):
    env = {**local_env, "LOCKRUN_SYSLOG_SOCKET": str(rsyslog.dir / "relay.sock"), "LOCKRUN_SYSLOG_FORMAT": form}
    before = time.time()
    assert run_lockrun(back_in_time(env), "-n", "relayed", "--syslog", "--", "sh", "-c", "exit 5").returncode == 5
    row = history(env)[0]
    [(host, stamp, tag, program_name, procid, severity, facility, message)] = rsyslog.lines("relay", 1)
    assert host == os.uname().nodename != RELAY_NAME
    assert (program_name, procid, severity, facility) == ("lockrun", str(row["pid"]), "warning", "cron")
    assert tag in (f"lockrun[{row['pid']}]", f"lockrun[{row['pid']}]:")
    assert message.startswith("name=relayed ") and "status=failed" in message
    assert days_back(stamp) == DAYS_BACK
    if form == "rfc5424":  # the full time, to the microsecond, with its zone
        moment = datetime.fromisoformat(stamp).timestamp() + DAYS_BACK * 86400
        assert abs(moment - before) < timedelta(minutes=5).total_seconds(), (stamp, before)
        assert "." in stamp
