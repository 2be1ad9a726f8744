"""Prometheus text exposition of the ledger: one family per question an alert asks.

- when did NAME last run, and last succeed? (alert: "has not succeeded for 2 h")
- how long did it take, and how did it end?
- how many runs ended in each status? (alert: rate of failed/lost/busy)

``lockrun metrics`` prints every name's series; a run's ``--metrics-file`` holds its own name's
(:func:`write_job_file`), so that one file per job in node_exporter's textfile directory never
repeats a series another file holds (node_exporter refuses the whole directory when one does:
"was collected before"). docs/operating.md "Metrics for Prometheus" says how it is used.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from lockrun.core.clock import parse_iso
from lockrun.core.record import Status
from lockrun.ledger.store import Ledger
from lockrun.system.safefs import directory_locked, read_small, write_atomically

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


def ledger_facts(ledger: Ledger, names: Collection[str] | None = None) -> list[JobFacts]:
    """This host's view: its ledger's runs and counts (of ``names`` only, when given)."""
    counts = _by_name(ledger.run_counts())
    flags = _by_name(ledger.flag_counts())
    for name, count in ledger.abandoned_counts().items():  # derived at read time: no stored count
        counts.setdefault(name, {})[Status.ABANDONED.value] = count
    return [_job_facts(ledger, name, counts[name], flags.get(name, {}))
            for name in sorted(counts) if names is None or name in names]


def _by_name(counted: Iterable[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    """(name, what, count) as each name's counts by what."""
    found: dict[str, dict[str, int]] = {}
    for name, what, count in counted:
        found.setdefault(name, {})[what] = count
    return found


def _job_facts(ledger: Ledger, name: str, counts: dict[str, int], flags: dict[str, int]) -> JobFacts:
    success = ledger.last_with_status(name, Status.SUCCEEDED)
    return JobFacts(name, ledger.last_finished(name), success["ended_at"] if success else None, counts, flags)


def exposition(facts: list[JobFacts]) -> str:
    return _rendered(_samples(facts))


def _samples(facts: list[JobFacts]) -> dict[str, list[str]]:
    """Each family's samples, as ``{labels} value``, names in order."""
    samples: dict[str, list[str]] = {family: [] for family, _, _ in FAMILIES}
    for job in sorted(facts, key=lambda job: job.name):
        label = f'name="{escape_label(job.name)}"'
        for family, value in _gauges(job):
            if value is not None:
                samples[family].append(f"{{{label}}} {value}")
        for status, count in sorted(job.counts.items()):
            samples["lockrun_runs_total"].append(f'{{{label},status="{escape_label(status)}"}} {count}')
        for family, count in _flag_counts(job):
            samples[family].append(f"{{{label}}} {count}")
    return samples


def _flag_counts(job: JobFacts) -> Iterator[tuple[str, int]]:
    """Each flag's family and count (0 too: a counter that exists before it first counts), but for
    the flags the job's runs are not counted by."""
    for flag, family in FLAG_FAMILIES.items():
        if job.counted_flags is None or flag in job.counted_flags:
            yield family, (job.flags or {}).get(flag, 0)


def _gauges(job: JobFacts) -> list[tuple[str, str | None]]:
    """A job's gauges, each with its value as exposed (None: no sample): its newest run's, its
    last success, its cadence's next due start, overdue and paused."""
    found = [
        ("lockrun_last_success_timestamp_seconds", _shown(_unix(job.last_success_at), _number)),
        ("lockrun_next_due_timestamp_seconds", _shown(job.next_due_at, _number)),
        ("lockrun_overdue", _shown(job.overdue, _zero_or_one)),
        ("lockrun_paused", _shown(job.paused, _zero_or_one)),
    ]
    last = job.last
    if last is not None:
        found += [
            ("lockrun_last_run_timestamp_seconds", _shown(_unix(last["started_at"]), _number)),
            ("lockrun_last_duration_seconds", _shown(last["duration_s"], _number)),
            ("lockrun_last_exit_code", _shown(last["exit_code"], str)),
            ("lockrun_last_exit_status", _shown(last.get("exit_status"), str)),
        ]
    return found


def _shown(value: Any, text: Callable[[Any], str]) -> str | None:
    return None if value is None else text(value)


def _zero_or_one(flag: bool) -> str:
    return str(int(flag))


def _rendered(samples: dict[str, list[str]], first_lines: tuple[str, ...] = (), every_family: bool = True) -> str:
    """The exposition: each family's HELP and TYPE, then its samples; without ``every_family``, a
    family with no sample is left out (a job's file: promtool and node_exporter take either)."""
    lines = list(first_lines)
    for family, kind, help_text in FAMILIES:
        if every_family or samples[family]:
            lines += [f"# HELP {family} {help_text}", f"# TYPE {family} {kind}"]
            lines += [f"{family}{sample}" for sample in samples[family]]
    return "\n".join(lines) + "\n"


# -- a run's --metrics-file ---------------------------------------------------------------------------

#: The first line of a --metrics-file: the names whose runs write it. One file per job names one;
#: a file several jobs name (a config file's ``metrics_file``) keeps each one's series, replaced by
#: its own runs. A file without this line (another program's) keeps nothing but the writing run's
#: name.
WRITERS = "# lockrun --metrics-file of:"
#: How long a run waits for another run writing a file in the same directory (a write takes
#: milliseconds): past that the file is left as it is, with a warning.
LOCK_WAIT_S = 5.0
_NAME_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/\-]{0,199}")
#: A sample line this module writes: ``family{name="…"[,status="…"]} value``.
_SAMPLE = re.compile(r'(?P<family>lockrun_[a-z_]+)(?P<rest>\{name="(?P<label>(?:[^"\\\n]|\\[\\"n])*)"'
                     r'(?:,status="[a-z_]+")?\} (?:-?[0-9][0-9.e+-]*|NaN|[+-]Inf))')


def job_file_text(name: str, facts: list[JobFacts], previous: str | None) -> str:
    """The file after a run of ``name``: its own series from ``facts``, and, of a file that names
    its writers (WRITERS), the other writers' series as they were. Only lines of the shape this
    module writes are kept; anything else in ``previous`` is dropped."""
    own = _samples([job for job in facts if job.name == name])
    writers = {name}
    first, _, rest = (previous or "").partition("\n")
    if first.startswith(WRITERS + " "):
        others = {token for token in first[len(WRITERS):].split() if _NAME_TOKEN.fullmatch(token)} - {name}
        _keep_series(own, rest, others)
        writers |= others
    for family in own:  # one order, whoever wrote which line: by name, then by the rest
        own[family].sort()
    return _rendered(own, (f"{WRITERS} {' '.join(sorted(writers))}",), every_family=False)


def _keep_series(own: dict[str, list[str]], lines: str, others: set[str]) -> None:
    """Add to ``own`` the other writers' series among ``lines``, as they were."""
    kept_labels = {escape_label(other) for other in others}
    families = set(own)
    for line in lines.splitlines():
        match = _SAMPLE.fullmatch(line)
        if match and match["family"] in families and match["label"] in kept_labels:
            own[match["family"]].append(match["rest"])


def write_job_file(path: Path, name: str, facts: Callable[[], list[JobFacts]]) -> None:
    """Rewrite the ``--metrics-file`` of a run of ``name`` whole: node_exporter never reads half
    a file (a temporary file beside it, renamed over it), and never an older count. The ledger is
    read (``facts``) and the file replaced under one lock, held by every run that writes a file in
    that directory, so two runs finishing together leave the later count, and a counter never goes
    back. A directory or anything else but a regular file at ``path`` is refused and left alone.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", str(path))
    with directory_locked(path.parent, LOCK_WAIT_S):
        previous = read_small(path)
        text = job_file_text(name, facts(), previous.decode("utf-8", "replace") if previous is not None else None)
        write_atomically(path, text.encode("utf-8"), mode=0o644)  # node_exporter reads it as another user
