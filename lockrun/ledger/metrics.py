"""Prometheus text exposition of the ledger: one family per question an alert asks.

- when did NAME last run, and last succeed? (alert: "has not succeeded for 2 h")
- how long did it take, and how did it end?
- how many runs ended in each status? (alert: rate of failed/lost/busy)
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any, NamedTuple

from lockrun.core.clock import parse_iso
from lockrun.core.record import Status
from lockrun.ledger.store import Ledger
from lockrun.system.safefs import write_atomically

FAMILIES = (
    ("lockrun_last_run_timestamp_seconds", "gauge", "Start time of the newest finished run (Unix seconds)."),
    ("lockrun_last_success_timestamp_seconds", "gauge", "End time of the newest succeeded run (Unix seconds)."),
    ("lockrun_last_duration_seconds", "gauge", "Duration of the newest finished run."),
    ("lockrun_last_exit_code", "gauge", "Exit code of the newest finished run's command (absent: none, e.g. killed)."),
    ("lockrun_last_exit_status", "gauge",
     "What lockrun exited with in the newest finished run, as cron saw it (124 timeout, 76 lost, 128+N signal)."),
    ("lockrun_runs_total", "counter", "Finished runs by final status, pruned ones included."),
    ("lockrun_lock_lost_at_release_total", "counter",
     "Runs whose release found the lock no longer theirs (expired, evicted, stolen or cleared): each may have"
     " overlapped another run."),
    ("lockrun_slow_runs_total", "counter", "Runs still running after their --warn-after, pruned ones included."),
    # docs/operating.md "Declaring a cadence", "Pausing a job": `lockrun metrics` only (not --metrics-file).
    ("lockrun_next_due_timestamp_seconds", "gauge",
     "When the next start is due by the declared cadence (--every/--schedule; Unix seconds)."),
    ("lockrun_overdue", "gauge",
     "1 when the due start plus --grace passed with no start (never while paused), else 0."),
    ("lockrun_paused", "gauge", "1 while the name is paused (lockrun pause), else 0."),
)
#: The run flags counted per name (a field of the run row that is true, or slow: --warn-after), and their families.
FLAG_FAMILIES = {"lock_lost_at_release": "lockrun_lock_lost_at_release_total", "slow": "lockrun_slow_runs_total"}


def escape_label(value: str) -> str:
    """Label values per the exposition format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _unix(iso: str | None) -> float | None:
    moment = parse_iso(iso)
    return moment.timestamp() if moment else None


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class JobFacts(NamedTuple):
    """What the metrics say about one lock name, from this host's ledger or the fleet record."""

    name: str
    last: dict[str, Any] | None  # the newest finished run, as history --json shows it
    last_success_at: str | None  # ISO end time of the newest succeeded run
    counts: dict[str, int]  # runs by final status
    flags: dict[str, int] | None = None  # runs by flag (FLAG_FAMILIES): how many releases found the lock lost
    # The flags this source counts (None: all of FLAG_FAMILIES). The fleet record does not count
    # slow runs: it shows no lockrun_slow_runs_total rather than a 0 that is not true.
    counted_flags: tuple[str, ...] | None = None
    # Where known (`lockrun metrics`, not --metrics-file): the declared cadence's next due start
    # (Unix seconds; None: none declared), whether it is overdue, and whether the name is paused.
    next_due_at: float | None = None
    overdue: bool | None = None
    paused: bool | None = None


def ledger_facts(ledger: Ledger) -> list[JobFacts]:
    """This host's view: its ledger's runs and counts."""
    counts: dict[str, dict[str, int]] = {}
    for name, status, count in ledger.run_counts():
        counts.setdefault(name, {})[status] = count
    flags: dict[str, dict[str, int]] = {}
    for name, flag, count in ledger.flag_counts():
        flags.setdefault(name, {})[flag] = count
    for name, count in ledger.abandoned_counts().items():  # derived at read time: no stored count
        counts.setdefault(name, {})[Status.ABANDONED.value] = count
    found = []
    for name in sorted(counts):
        success = ledger.last_with_status(name, Status.SUCCEEDED)
        found.append(JobFacts(name, ledger.last_finished(name), success["ended_at"] if success else None,
                              counts[name], flags.get(name, {})))
    return found


def exposition(facts: list[JobFacts]) -> str:
    samples: dict[str, list[str]] = {family: [] for family, _, _ in FAMILIES}
    for job in sorted(facts, key=lambda job: job.name):
        label = f'name="{escape_label(job.name)}"'
        last = job.last
        if last is not None:
            if (started := _unix(last["started_at"])) is not None:
                samples["lockrun_last_run_timestamp_seconds"].append(f"{{{label}}} {_number(started)}")
            if last["duration_s"] is not None:
                samples["lockrun_last_duration_seconds"].append(f"{{{label}}} {_number(last['duration_s'])}")
            if last["exit_code"] is not None:
                samples["lockrun_last_exit_code"].append(f"{{{label}}} {last['exit_code']}")
            if last.get("exit_status") is not None:
                samples["lockrun_last_exit_status"].append(f"{{{label}}} {last['exit_status']}")
        if (ended := _unix(job.last_success_at)) is not None:
            samples["lockrun_last_success_timestamp_seconds"].append(f"{{{label}}} {_number(ended)}")
        for status, count in sorted(job.counts.items()):
            samples["lockrun_runs_total"].append(f'{{{label},status="{escape_label(status)}"}} {count}')
        for flag, family in FLAG_FAMILIES.items():  # 0 too: a counter that exists before it first counts
            if job.counted_flags is not None and flag not in job.counted_flags:
                continue
            samples[family].append(f"{{{label}}} {(job.flags or {}).get(flag, 0)}")
        if job.next_due_at is not None:
            samples["lockrun_next_due_timestamp_seconds"].append(f"{{{label}}} {_number(job.next_due_at)}")
        if job.overdue is not None:
            samples["lockrun_overdue"].append(f"{{{label}}} {int(job.overdue)}")
        if job.paused is not None:
            samples["lockrun_paused"].append(f"{{{label}}} {int(job.paused)}")
    lines = []
    for family, kind, help_text in FAMILIES:
        lines += [f"# HELP {family} {help_text}", f"# TYPE {family} {kind}"]
        lines += [f"{family}{sample}" for sample in samples[family]]
    return "\n".join(lines) + "\n"


def write_file(path: Path, text: str) -> None:
    """Replace ``path`` atomically: node_exporter must never read half a file.

    The temporary file beside it is created afresh (never through a link) and removed
    on any failure; a directory at ``path`` is refused before anything is written.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", str(path))
    write_atomically(path, text.encode("utf-8"), mode=0o644)  # node_exporter reads it as another user
