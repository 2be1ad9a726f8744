"""Every crontab line in the README and docs/, run by Debian's real cron daemon, as written.

The README's crontab lines are extracted (tests/readme_crontab.py) and installed with only these
changes: every schedule fires every minute (``@reboot`` stays), ``/usr/local/bin`` is the test's
install of lockrun, ``/opt/app/bin/X`` are small scripts that behave as the line's scenario below
asks, and the README's other paths and endpoints are the test's own. Each line is installed once
per backend (a real redis-server of the test's, and the local backend) with its own state
directory, Redis prefix and MAILTO, after cron's default ``PATH=/usr/bin:/bin`` is restored: a
line gets what cron gives it plus the ``NAME=value`` lines of its own README block, nothing else.

cron runs in a private mount namespace (``unshare --mount``): its crontab spool, /etc/cron.d and
/etc/crontab are the test's, so the machine's crontabs neither run here nor see these lines; /run
is private (pid file, @reboot marker); /usr/sbin/sendmail is a stand-in that files each mail by
recipient; /dev/log is a socket the test reads cron's own log from (``CMD``, ``END``, ``failed
with exit status N``), so the exit status cron saw is compared with each ledger row's
``exit_status``.

Each line fires at two minute boundaries (``@reboot`` once, at start-up): about two minutes. The
scenario makes the two firings different (a holder the test keeps, a failing second run, a lease
cleared under it, a Redis that dies...) and the test asserts, per firing: cron ran it, lockrun
started (one ledger row), the row's status and exit status are what the README says, cron logged
that same exit status, and the mail: none for success, busy and duplicate; exactly one
``lockrun:`` line for trouble lockrun reports; the command's own output, in its order, for a
failing command.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import NamedTuple

import pytest

from lockrun.config.once import once_key_for_period
from lockrun.ledger.store import Ledger
from tests.conftest import LOCKRUN, RedisServer, isolated_env, run_lockrun, spawn_lockrun, wait_until
from tests.readme_crontab import CrontabLine, crontab_lines
from tests.test_metrics import samples
from tests.test_notify import Receiver

pytestmark = pytest.mark.slow

CRON = "/usr/sbin/cron"
UNSHARE = shutil.which("unshare")
LOCKRUN_LINE = "<one lockrun: line>"  # the mail is exactly one line that lockrun printed


class Expect(NamedTuple):
    status: str
    exit_status: int
    mail: str | None = None  # None: no mail; LOCKRUN_LINE; or the exact text the command printed


class Scenario(NamedTuple):
    """How the test plays one README line. ``match`` picks the line: for a run, the lock name
    and what follows it; for another lockrun command, a part of it. ``scripts`` are the
    /opt/app/bin programs (shell; ``$n`` counts their runs); ``expect`` the firings in order, by
    backend when they differ; ``plan`` what the test does around them (see drive and
    scenario_checks)."""

    match: str
    scripts: dict[str, str]
    expect: dict[str, list[Expect]]
    plan: str = ""
    kind: str = "run"  # or "command": a lockrun command that records no run (metrics, status...)


def both(*firings: Expect) -> dict[str, list[Expect]]:
    return {"local": list(firings), "redis": list(firings)}


OK, DONE = Expect("succeeded", 0), Expect("duplicate", 0)
QUIET = Expect("", 0)  # a command that is not a run: no ledger row, exit 0, no mail
SCENARIOS = [
    # Success first; then the command fails: cron mails its own words, lockrun adds none.
    Scenario("sync-invoices --ttl 120", {"sync-invoices": '[ "$n" = 1 ] && exit 0\n'
                                         'echo "sync-invoices: the ERP refused the batch" >&2; exit 3'},
             both(OK, Expect("failed", 3, "sync-invoices: the ERP refused the batch\n"))),
    # The test holds the lock at the first firing: a quiet busy skip that exits 0 (-E 0).
    Scenario("poll-queue -E 0", {"poll-queue": "exit 0"}, both(Expect("busy", 0), OK), plan="hold-until-busy"),
    # The test holds the lock when the first firing comes, and lets go a second later: it waits.
    Scenario("hourly-report --wait", {"report": "exit 0"}, both(OK, OK), plan="hold-while-it-waits"),
    Scenario("payroll --once-per day", {"payroll": "exit 0"}, both(OK, DONE), plan="once-per day"),
    # The pipeline runs; the second dump hangs, and `unlock --force` takes the lease from under it.
    Scenario("nightly-dump", {"pg_dump": 'echo "-- dump $n"; [ "$n" = 1 ] || exec sleep 300'},
             both(OK, Expect("lost", 76, LOCKRUN_LINE)), plan="force-unlock-second"),
    # The second firing comes minutes after the first's success: a quiet skip, exit 0.
    Scenario("nightly-report --once-every", {"nightly-report": "exit 0"}, both(OK, DONE)),
    Scenario("refresh-cache -E 0 --once-per hour", {"refresh-cache": "exit 0"}, both(OK, DONE),
             plan="once-per hour"),
    Scenario("hourly-export --min-hold 5m", {"export": "exit 0"}, both(OK, Expect("busy", 75))),
    Scenario("nightly-billing --once", {"bill": "exit 0"}, both(OK, DONE), plan="once billing-%Y-%m-%d"),
    # A holder the test started is replaced by the @reboot run (it exits 76, "preempted").
    Scenario("warm-cache --replace", {"warm-cache": "exit 0"}, both(OK), plan="replace-holder"),
    # The script is not there at the first firing: 127, one line mailed; the test then installs it.
    Scenario("thumbnails --slots 3", {}, both(Expect("error", 127, LOCKRUN_LINE), OK), plan="install-after-first"),
    # o1, e1 (stderr), o2 in one go: cron's mail, the ping body and the webhook's tail keep that order.
    Scenario("sync-invoices --capture-tail", {"sync-invoices": '[ "$n" = 1 ] && exit 0\n'
                                              'echo o1; echo e1 >&2; echo o2; exit 3'},
             both(OK, Expect("failed", 3, "o1\ne1\no2\n")), plan="notify"),
    # On Redis the line has a server of its own, which dies after the first firing.
    Scenario("sync-invoices --metrics-file", {"sync-invoices": "exit 0"},
             {"local": [OK, OK], "redis": [OK, Expect("unavailable", 69, LOCKRUN_LINE)]}, plan="metrics"),
    # The fleet's metrics, written each minute: here the fleet is the first line's runs.
    Scenario("metrics --fleet", {}, both(QUIET, QUIET), plan="fleet-metrics", kind="command"),
]
FLEET_OF = "sync-invoices --ttl 120"  # the line whose runs the fleet-metrics line reads

SCRIPT_PREAMBLE = """#!/bin/sh
job=$(cd "$(dirname "$0")/../.." && pwd)
n=$(( $(cat "$job/count" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$job/count"
echo "$LOCKRUN_NAME $LOCKRUN_RUN_ID $LOCKRUN_FENCING_TOKEN" >> "$job/env.log"
"""

# cron's own log lines (Debian cron -L 15): CMD and END carry the job's pid, a failure its status.
CMD_RE = re.compile(r"\((?P<user>[^)]*)\) CMD \(\[(?P<pid>\d+)\] (?P<command>.*)\)$")
END_RE = re.compile(r"\((?P<user>[^)]*)\) END \(\[(?P<pid>\d+)\] ")
FAILED_RE = re.compile(r"grandchild #(?P<pid>\d+) (?:failed with exit status (?P<status>\d+)|"
                       r"terminated by signal (?P<signal>\d+))")


def scenario_for(line: CrontabLine) -> Scenario:
    found = [s for s in SCENARIOS if (f"-n {s.match}" if s.kind == "run" else s.match) in line.command]
    assert len(found) == 1, (
        f"{line.where} ({line.text!r}) has {len(found)} scenarios in tests/test_cron.py;"
        " a crontab line in the README or docs/ must be run by this test: give it exactly one"
    )
    return found[0]


# --- cron's log and mail ----------------------------------------------------------------------------


class CronLog:
    """A /dev/log socket for the cron daemon: its firings and the exit status of each."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                self.lines.append(self.sock.recv(65536).decode("utf-8", "replace"))
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()

    def firings(self) -> dict[int, dict]:
        """pid -> {command, status (None until END), ended}."""
        found: dict[int, dict] = {}
        for line in list(self.lines):
            if match := CMD_RE.search(line):
                found[int(match["pid"])] = {"command": match["command"], "status": None, "ended": False}
            elif match := FAILED_RE.search(line):
                entry = found.setdefault(int(match["pid"]), {"command": "", "status": None, "ended": False})
                entry["status"] = int(match["status"]) if match["status"] else 128 + int(match["signal"])
            elif match := END_RE.search(line):
                entry = found.get(int(match["pid"]))
                if entry is not None:
                    entry["ended"] = True
                    if entry["status"] is None:
                        entry["status"] = 0
        return found


def read_mails(folder: Path) -> dict[str, list[str]]:
    """recipient -> the bodies cron mailed to it (headers dropped)."""
    mails: dict[str, list[str]] = {}
    for path in sorted(folder.iterdir()):
        recipient = path.name.split(".", 1)[0]
        text = path.read_text(errors="replace")
        mails.setdefault(recipient, []).append(text.split("\n\n", 1)[1] if "\n\n" in text else "")
    return mails


# --- one README line on one backend -------------------------------------------------------------------


class Job:
    def __init__(self, index: int, line: CrontabLine, backend: str, root: Path, redis_url: str | None,
                 reads: Job | None = None) -> None:
        self.index, self.line, self.backend = index, line, backend
        self.scenario = scenario_for(line)
        self.id = f"j{index:02d}{backend[0]}"  # also its MAILTO: short and safe for cron
        self.dir = root / self.id
        self.redis_url = redis_url
        self.reads = reads or self  # whose ledger and Redis keys its lockrun uses
        self.holders: list[subprocess.Popen] = []
        self.notes: list[str] = []
        for sub in ("app/bin", "usr-local-bin", "backup", "textfile"):
            (self.dir / sub).mkdir(parents=True)
        (self.dir / "usr-local-bin" / "lockrun").symlink_to(LOCKRUN)
        for name, body in self.scenario.scripts.items():
            self.install_script(name, body)

    @property
    def lock_name(self) -> str | None:
        words = self.line.command.split()
        return words[words.index("-n") + 1] if "-n" in words[:-1] else None

    def install_script(self, name: str, body: str) -> None:
        path = self.dir / "app" / "bin" / name
        path.write_text(SCRIPT_PREAMBLE + body + "\n")
        path.chmod(0o755)

    @property
    def expected(self) -> list[Expect]:
        return self.scenario.expect[self.backend]

    @property
    def ledger_path(self) -> Path:
        return self.dir / "state" / "ledger.db"

    def settings(self, config: Path) -> dict[str, str]:
        """Its own state, and its own Redis keys. A crontab's NAME=value lines hold for every line
        after them, so a local job empties what a Redis job before it set (empty is unset)."""
        owner = self.reads
        return {"LOCKRUN_STATE_DIR": str(owner.dir / "state"), "LOCKRUN_CONFIG": str(config),
                "LOCKRUN_REDIS_URL": self.redis_url or "",
                "LOCKRUN_PREFIX": f"lr-{owner.id}:" if self.redis_url else ""}

    def env(self, config: Path) -> dict[str, str]:
        """For lockrun commands the test runs against this job's locks and ledger."""
        return {**isolated_env(self.dir), **{k: v for k, v in self.settings(config).items() if v}}

    def mapped(self, text: str, receiver_url: str) -> str:
        """The README's text with its paths and endpoints made this job's."""
        replacements = {
            "/usr/local/bin": str(self.dir / "usr-local-bin"),
            "/opt/app/bin/": f"{self.dir}/app/bin/",
            "/backup/": f"{self.dir}/backup/",
            "/var/lib/prometheus/node-exporter/": f"{self.dir}/textfile/",
            "https://hc-ping.com/your-check-uuid": f"{receiver_url}/ping/{self.id}",
            "https://hooks.slack.com/services/T000/B000/XXXX": f"{receiver_url}/hook/{self.id}",
        }
        for old, new in replacements.items():
            text = text.replace(old, new)
        return re.sub(r"(?<![\w/])pg_dump(?= )", f"{self.dir}/app/bin/pg_dump", text)

    def crontab(self, config: Path, receiver_url: str) -> list[str]:
        when = "@reboot" if self.line.when == "@reboot" else "* * * * *"
        lines = [f"# {self.id}: {self.line.where}", "PATH=/usr/bin:/bin"]
        lines += [self.mapped(env, receiver_url) for env in self.line.env]
        lines += [f"{key}={value or chr(34) * 2}" for key, value in self.settings(config).items()]  # "": unset
        lines += [f"MAILTO={self.id}", f"{when} {self.mapped(self.line.command, receiver_url)}"]
        return lines

    def rows(self) -> list[dict]:
        """Rows of cron's runs, oldest first (not the test's holders, not its unlocks)."""
        if self.scenario.kind != "run" or not self.ledger_path.exists():
            return []
        ledger = Ledger(self.ledger_path).open(create=False)
        try:
            rows = ledger.history(limit=1000)
        finally:
            ledger.close()
        mine = {proc.pid for proc in self.holders}
        return [row for row in reversed(rows) if row["pid"] not in mine and row["status"] != "unlocked"]

    def finished(self) -> bool:
        """Every firing's run is over (for a command: cron having no child left says so)."""
        rows = self.rows()
        if self.scenario.kind != "run":
            return True
        return len(rows) == len(self.expected) and all(row["status"] != "running" for row in rows)


# --- the harness ---------------------------------------------------------------------------------------


NAMESPACE_SCRIPT = """set -e
T={root}
mount --bind "$T/spool" /var/spool/cron/crontabs
mount --bind "$T/cron.d" /etc/cron.d
if [ -e /etc/crontab ]; then mount --bind "$T/system-crontab" /etc/crontab; fi
mount -t tmpfs -o mode=755 tmpfs /run
mount --bind /usr/sbin "$T/sbin.real"
mount -t tmpfs -o mode=755 tmpfs /usr/sbin
for f in "$T"/sbin.real/*; do ln -s "$f" /usr/sbin/; done
rm -f /usr/sbin/sendmail; ln -s "$T/sendmail" /usr/sbin/sendmail
mount --rbind /dev "$T/dev.real"
mount -t tmpfs -o mode=755 tmpfs /dev
for f in "$T"/dev.real/*; do ln -s "$f" /dev/; done
ln -s "$T/log.sock" /dev/log
exec "$T/sbin.real/cron" -f -L 15
"""

SENDMAIL = """#!/bin/sh
# cron's MTA: sendmail -FCronDaemon -i -B8BITMIME -oem RECIPIENT < message
for recipient; do :; done
cat > "{mail}/$recipient.$(date +%s%N).$$"
"""


def processes(predicate) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if predicate(int(entry)):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def children_of(pid: int) -> list[int]:
    def child(candidate: int) -> bool:
        with open(f"/proc/{candidate}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1]) == pid
    return processes(child)


def carrying(marker: bytes) -> list[int]:
    def marked(candidate: int) -> bool:
        with open(f"/proc/{candidate}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    return processes(marked)


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def started_local(row: dict) -> float:
    return datetime.fromisoformat(row["started_at"].replace("Z", "+00:00")).timestamp()


@pytest.mark.timeout(480)
def test_every_readme_crontab_line_runs_under_a_real_cron(redis_server):
    if os.geteuid() != 0:
        if os.environ.get("LOCKRUN_REQUIRE_CRON_TEST"):
            pytest.fail("the real-cron test needs root (cron runs jobs as users, mounts need CAP_SYS_ADMIN)")
        pytest.skip("the real-cron test needs root; .ci/run runs it (LOCKRUN_REQUIRE_CRON_TEST=1)")
    if not os.path.exists(CRON) or not UNSHARE:
        pytest.fail("Debian's cron and util-linux's unshare are needed (apt-get install cron); .ci/run installs them")
    assert LOCKRUN, "the lockrun script is not installed in this venv (pip install -e .)"

    lines = crontab_lines()
    unique: list[CrontabLine] = []
    for line in lines:  # the README repeats its first example: run each distinct line once
        if all(" ".join(line.text.split()) != " ".join(seen.text.split()) for seen in unique):
            unique.append(line)
    assert len(unique) >= 10, f"the README's crontab lines were not found: {lines}"

    root = Path(tempfile.mkdtemp(prefix="lr-cron-"))  # short: crontab lines and socket paths
    for sub in ("spool", "cron.d", "sbin.real", "dev.real", "mail"):
        (root / sub).mkdir()
    (root / "system-crontab").write_text("")
    config = root / "empty.toml"
    config.write_text("")
    sendmail = root / "sendmail"
    sendmail.write_text(SENDMAIL.format(mail=root / "mail"))
    sendmail.chmod(0o755)
    marker = f"LOCKRUN_CRON_TEST={uuid.uuid4().hex}"

    receiver = Receiver()
    own_redis = RedisServer().start()  # the metrics line's server on Redis, which dies midway
    log = CronLog(root / "log.sock")
    jobs: list[Job] = []
    cron: subprocess.Popen | None = None
    passed = False
    try:
        for index, line in enumerate(unique, 1):
            for backend in ("local", "redis"):
                url = None
                if backend == "redis":
                    url = own_redis.url if scenario_for(line).plan == "metrics" else redis_server.url
                fleet = [job for job in jobs if job.backend == backend and job.scenario.match == FLEET_OF]
                reads = fleet[0] if scenario_for(line).plan == "fleet-metrics" and fleet else None
                jobs.append(Job(index, line, backend, root, url, reads))
        crontab = [marker, "# one tick a minute: the test's clock", f"* * * * * echo tick >> {root}/ticks"]
        for job in jobs:
            crontab += job.crontab(config, receiver.url)
        spool = root / "spool" / "root"
        spool.write_text("\n".join(crontab) + "\n")
        spool.chmod(0o600)

        prepare_holders(jobs, config, root)
        with open(root / "cron.out", "wb") as cron_out:
            cron = subprocess.Popen(
                [UNSHARE, "--mount", "--propagation", "private", "/bin/sh", "-c", NAMESPACE_SCRIPT.format(root=root)],
                stdout=cron_out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        wait_until(lambda: cron.poll() is not None or any("Running @reboot jobs" in line for line in log.lines),
                   timeout=30, what="cron to start")
        assert cron.poll() is None, f"cron did not start: {(root / 'cron.out').read_text()}"
        refused = [line for line in log.lines if "Error" in line or "ERROR" in line]
        assert not refused, f"cron refused the crontab built from the README: {refused}"

        drive(jobs, log, config, root, own_redis)
        # Two firings each are enough: an emptied crontab, renamed into place (cron notices the
        # spool directory's new mtime before the next minute), fires nothing more.
        emptied = root / "crontab.emptied"
        emptied.write_text(f"{marker}\n")
        emptied.chmod(0o600)
        os.replace(emptied, spool)
        try:
            wait_until(lambda: all(job.finished() for job in jobs) and not children_of(cron.pid)
                       and all(h.poll() is not None for job in jobs for h in job.holders),
                       timeout=90, interval=0.25, what="every firing to end and its mail to be sent")
        except AssertionError as exc:
            state = [f"{job.id} L{job.line.line_no} rows {[(r['status'], r['exit_status']) for r in job.rows()]}"
                     f" expected {len(job.expected)}; holders {[h.poll() for h in job.holders]}" for job in jobs]
            raise AssertionError(f"{exc}; cron's children {children_of(cron.pid)}\n" + "\n".join(state)) from None
        leftovers = carrying(marker.encode())
        assert not leftovers, f"processes left running after their cron jobs ended: {leftovers}"
        check(jobs, log, root, receiver)
        passed = True
    finally:
        if cron is not None and cron.poll() is None:
            for pid in children_of(cron.pid):
                kill(pid)
            cron.terminate()
            try:
                cron.wait(10)
            except subprocess.TimeoutExpired:
                cron.kill()
                cron.wait()
        for pid in carrying(marker.encode()):
            kill(pid)
        for job in jobs:
            for holder in job.holders:
                if holder.poll() is None:
                    holder.kill()
                    holder.wait()
        log.close()
        (root / "cron.log").write_text("\n".join(log.lines) + "\n")
        receiver.close()
        own_redis.cleanup()
        # The namespace's mounts went with its last process; never delete through one.
        # A failed run leaves its crontab, ledgers, mails and cron's log behind for a look.
        mounted = any(os.path.ismount(root / sub) for sub in ("sbin.real", "dev.real", "spool", "cron.d"))
        if passed and not mounted:
            shutil.rmtree(root, ignore_errors=True)
        elif not passed:
            print(f"\nthe real-cron test left {root} for a look")


def prepare_holders(jobs: list[Job], config: Path, root: Path) -> None:
    """Locks the test takes before cron starts, for the scenarios that need one held."""
    for job in jobs:
        name = job.lock_name
        if job.scenario.plan in ("hold-until-busy", "hold-while-it-waits"):
            hold = job.dir / "hold"
            hold.touch()
            command = ["sh", "-c", f"while [ -e {hold} ]; do sleep 0.05; done"]
            job.holders.append(spawn_lockrun(job.env(config), "-n", name, "--", *command))
        elif job.scenario.plan == "replace-holder":
            job.holders.append(spawn_lockrun(job.env(config), "-n", name, "--ttl", "30", "--", "sleep", "300"))
    for job in jobs:
        if job.holders:
            wait_until(lambda job=job: holder_row(job) is not None, timeout=30,
                       what=f"{job.id}'s holder to take its lock")


def holder_row(job: Job) -> dict | None:
    if not job.ledger_path.exists():
        return None
    ledger = Ledger(job.ledger_path).open(create=False)
    try:
        rows = [r for r in ledger.history(limit=100) if r["pid"] == job.holders[0].pid]
    finally:
        ledger.close()
    return rows[0] if rows and rows[0]["fencing_token"] is not None else None


def ticks(root: Path) -> int:
    path = root / "ticks"
    return len(path.read_text().split()) if path.exists() else 0


def drive(jobs: list[Job], log: CronLog, config: Path, root: Path, own_redis: RedisServer) -> None:
    """Play each scenario's part between the firings, until the second minute's firings began."""
    done: set[tuple[str, str]] = set()

    def once(job: Job, step: str) -> bool:
        if (job.id, step) in done:
            return False
        done.add((job.id, step))
        return True

    steps = {"hold-until-busy": {"release"}, "hold-while-it-waits": {"release"}, "install-after-first": {"install"},
             "force-unlock-second": {"backup", "unlock"}}
    required = {(job.id, step) for job in jobs for step in steps.get(job.scenario.plan, ())}
    required |= {(job.id, "kill-redis") for job in jobs if job.scenario.plan == "metrics" and job.backend == "redis"}
    deadline = time.monotonic() + 200
    while True:
        for job in jobs:
            rows = job.rows()
            plan = job.scenario.plan
            if plan == "hold-until-busy" and rows and rows[0]["status"] == "busy" and once(job, "release"):
                (job.dir / "hold").unlink()
            if plan == "hold-while-it-waits" and rows and once(job, "release"):
                # A deliberate hold: the first firing waits for the lock. Its wait starts at its first
                # attempt, which comes after its "running" row (seen here) and its start-up: more
                # than a second later when cron starts every job of the minute at once.
                time.sleep(2.0)
                job.notes.append(datetime.now(timezone.utc).isoformat())  # when the holder let go
                (job.dir / "hold").unlink()
            if plan == "install-after-first" and rows and rows[0]["status"] != "running" and once(job, "install"):
                job.install_script("thumbnails", "exit 0")
            if plan == "force-unlock-second" and len(rows) == 1 and rows[0]["status"] == "succeeded" \
                    and once(job, "backup"):
                job.notes.append(gzip.decompress((job.dir / "backup" / "app.sql.gz").read_bytes()).decode())
            if plan == "force-unlock-second" and len(rows) == 2 and rows[1]["fencing_token"] is not None \
                    and once(job, "unlock"):
                result = run_lockrun(job.env(config), "unlock", job.lock_name, "--force", "--yes")
                assert result.returncode == 0, result.stdout + result.stderr
            if plan == "metrics" and job.backend == "redis" and rows and rows[0]["status"] != "running" \
                    and once(job, "kill-redis"):
                prom = job.dir / "textfile" / "lockrun-sync-invoices.prom"  # written just after the row is final
                job.notes.append(wait_until(lambda prom=prom: prom.exists() and prom.read_text(),
                                            what="the metrics file"))
                own_redis.kill()
        if ticks(root) >= 2 and required <= done:
            return
        assert time.monotonic() < deadline, (
            f"cron fired {ticks(root)} minute(s) in 200 s, the test's part still to play: {sorted(required - done)};"
            f" cron's log ends: {log.lines[-5:]}")
        time.sleep(0.2)


def check(jobs: list[Job], log: CronLog, root: Path, receiver: Receiver) -> None:
    """Per firing: cron ran it, lockrun recorded it as expected, cron saw that exit status, the mail."""
    firings = log.firings()
    mails = read_mails(root / "mail")
    problems: list[str] = []
    summary: list[str] = []
    outcomes: dict[str, set[int]] = {}
    for job in jobs:
        where = f"{job.id} ({job.line.where}, {job.backend}: {job.line.text})"
        fired = [(pid, f) for pid, f in firings.items() if str(job.dir) + "/" in f["command"]]  # as cron logged
        rows = job.rows()
        statuses = [f["status"] for _, f in fired]
        if len(fired) != len(job.expected):
            problems.append(f"{where}: cron fired it {len(fired)} times, expected {len(job.expected)}")
        # Counts that differ are problems of their own (just above and below); the zips below
        # compare firing by firing as far as both lists go.
        if job.scenario.kind != "run":  # not a run: no row; cron saw what the README says
            problems += [f"{where} firing {number}: cron saw exit status {status}, expected {expect.exit_status}"
                         for number, (expect, status) in enumerate(zip(job.expected, statuses, strict=False), 1)
                         if status != expect.exit_status]
        elif len(rows) != len(fired):
            problems.append(f"{where}: {len(fired)} firings but {len(rows)} ledger rows (lockrun did not start?);"
                            f" mail: {mails.get(job.id)}")
        for number, (expect, row) in enumerate(zip(job.expected, rows, strict=False), 1):
            expect = adjusted(job, expect, row, rows)
            got = (row["status"], row["exit_status"])
            if got != (expect.status, expect.exit_status):
                problems.append(f"{where} firing {number}: ledger says {got}, expected {expect[:2]}; row {row}")
            if number <= len(statuses) and statuses[number - 1] != row["exit_status"]:
                problems.append(f"{where} firing {number}: cron saw exit status {statuses[number - 1]},"
                                f" the ledger's exit_status is {row['exit_status']}")
            outcomes.setdefault(row["status"], set()).add(row["exit_status"])
        wanted_mail = [adjusted(job, e, r, rows).mail for e, r in zip(job.expected, rows, strict=False)]
        if job.scenario.kind != "run":
            wanted_mail = [e.mail for e in job.expected]
        got_mail = mails.get(job.id, [])
        wanted_bodies = [m for m in wanted_mail if m is not None]
        if len(got_mail) != len(wanted_bodies):
            problems.append(f"{where}: {len(got_mail)} mails, expected {len(wanted_bodies)}: {got_mail}")
        for body, wanted in zip(got_mail, wanted_bodies, strict=False):
            if wanted == LOCKRUN_LINE:
                if not (body.count("\n") == 1 and body.startswith("lockrun: ")):
                    problems.append(f"{where}: the mail should be one lockrun line, it is {body!r}")
            elif body != wanted:
                problems.append(f"{where}: the mail should be {wanted!r}, it is {body!r}")
        problems += scenario_checks(job, rows, receiver)
        summary.append(f"{job.id} L{job.line.line_no:<3} {job.backend:5} fired {len(fired)}, rows "
                       + ", ".join(f"{r['status']}/{r['exit_status']}" for r in rows)
                       + f"; cron saw {statuses}; mails {len(got_mail)}")
    total_fired = sum(1 for f in firings.values() if str(root) + "/j" in f["command"])
    print(f"\nreal cron: {len(crontab_lines())} crontab lines in the README and docs/,"
          f" {len({j.line for j in jobs})} distinct,"
          f" x 2 backends = {len(jobs)} jobs;"
          f" {ticks(root)} ticks; {total_fired} firings; {sum(len(j.rows()) for j in jobs)} ledger rows;"
          f" {sum(len(v) for k, v in mails.items() if k.startswith('j'))} mails")
    for job in jobs:  # the holders the @reboot --replace runs took over
        if job.scenario.plan == "replace-holder":
            outcomes.setdefault("preempted (the test's holder)", set()).add(job.holders[0].returncode)
    print("exit_status by outcome: " + ", ".join(f"{s} {sorted(v)}" for s, v in sorted(outcomes.items())))
    print("\n".join(summary))
    assert not problems, "\n".join(problems)


def adjusted(job: Job, expect: Expect, row: dict, rows: list[dict]) -> Expect:
    """A --once key that changed between the two firings (midnight, the hour) runs again."""
    if expect.status == "duplicate" and rows and row is not rows[0] and row["once_key"] != rows[0]["once_key"]:
        return OK
    return expect


def scenario_checks(job: Job, rows: list[dict], receiver: Receiver) -> list[str]:
    """What each scenario shows beyond statuses: keys, waits, replacement, pings, metrics."""
    problems = []
    where = f"{job.id} ({job.backend}, {job.line.where})"
    plan = job.scenario.plan
    if job.scenario.kind == "run" and len(rows) != len(job.expected):
        return problems  # already reported
    if plan.startswith("once"):
        template = plan.split(" ", 1)[1]
        for row in rows:
            when = started_local(row)
            key = time.strftime(template, time.localtime(when)) if "%" in template else \
                once_key_for_period(template, when)
            if row["once_key"] != key:
                problems.append(f"{where}: once_key {row['once_key']!r}, expected {key!r} (the firing's period)")
    if plan == "hold-while-it-waits":
        # The first firing waited at least the hold; its started_at is the command's start, after
        # the holder let go, and its duration is the command's alone (ended_at - started_at).
        first = rows[0]
        let_go = datetime.fromisoformat(job.notes[0])
        started, ended = (datetime.fromisoformat(first[key].replace("Z", "+00:00"))
                          for key in ("started_at", "ended_at"))
        # It was trying when the holder let go: its first attempt (the command's start less the
        # wait, a little late by the spawn) came before that moment.
        attempt = started - timedelta(seconds=first["waited_s"] or 0.0)
        if not (first["waited_s"] and attempt <= let_go + timedelta(seconds=0.25) and started >= let_go
                and abs((ended - started).total_seconds() - first["duration_s"]) < 0.5):
            problems.append(f"{where}: the first firing waited for the lock; its row: {first}; let go {let_go}")
    if plan == "replace-holder":
        holder = job.holders[0]
        if holder.returncode != 76:
            problems.append(f"{where}: the replaced holder exited {holder.returncode}, expected 76")
        ledger = Ledger(job.ledger_path).open(create=False)
        try:
            mine = [r for r in ledger.history(limit=100) if r["pid"] == holder.pid]
        finally:
            ledger.close()
        if [(r["status"], r["exit_status"]) for r in mine] != [("preempted", 76)]:
            problems.append(f"{where}: the replaced holder's row: {mine}")
    if plan == "force-unlock-second" and job.notes != ["-- dump 1\n"]:
        problems.append(f"{where}: the first dump's backup holds {job.notes}")
    if plan == "notify":
        mine = [r for r in receiver.requests if f"/{job.id}" in r["path"]]
        ids = [row["run_id"] for row in rows]
        # A set: on a starved host a slow answer is tried again (two attempts within 5 s).
        paths = sorted({r["path"] for r in mine})
        wanted = sorted([f"/ping/{job.id}/start?rid={ids[0]}", f"/ping/{job.id}?rid={ids[0]}",
                         f"/ping/{job.id}/start?rid={ids[1]}", f"/ping/{job.id}/3?rid={ids[1]}", f"/hook/{job.id}"])
        if paths != wanted:
            problems.append(f"{where}: pings and webhooks {paths}, expected {wanted}")
        failed_ping = [r for r in mine if r["path"].startswith(f"/ping/{job.id}/3")]
        if failed_ping and failed_ping[0]["body"] != b"o1\ne1\no2\n":
            problems.append(f"{where}: the failure ping's tail is {failed_ping[0]['body']!r}")
        hook = [r for r in mine if r["path"] == f"/hook/{job.id}"]
        if hook and not (b"failed (exit 3)" in hook[0]["body"] and b"o1\\ne1\\no2" in hook[0]["body"]):
            problems.append(f"{where}: the Slack webhook says {hook[0]['body']!r}")
    if plan == "fleet-metrics":
        folder = job.dir / "textfile"
        found = sorted(p.name for p in folder.iterdir())
        text = (folder / "lockrun-fleet.prom").read_text() if found == ["lockrun-fleet.prom"] else ""
        got = samples(text) if text else {}
        succeeded = got.get(("lockrun_runs_total", (("name", "sync-invoices"), ("status", "succeeded"))), 0)
        if found != ["lockrun-fleet.prom"] or succeeded < 1 or "lockrun_last_exit_status" not in text:
            problems.append(f"{where}: the fleet's textfile: {found}, {text!r}")
    if plan == "metrics":
        text = (job.dir / "textfile" / "lockrun-sync-invoices.prom").read_text()
        last = rows[-1]["exit_status"]
        if f'lockrun_last_exit_status{{name="sync-invoices"}} {last}' not in text:
            problems.append(f"{where}: the metrics file lacks lockrun_last_exit_status {last}: {text}")
        if job.backend == "redis" and not (job.notes and 'lockrun_last_exit_status{name="sync-invoices"} 0'
                                           in job.notes[0]):
            problems.append(f"{where}: the metrics file after the first firing: {job.notes}")
    return problems
