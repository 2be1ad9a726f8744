"""``lockrun check``: a Nagios/Icinga/Sensu plugin over what ``status --all`` knows (docs/operating.md
"Monitoring: lockrun check"). Each name is judged on its own, the worst judgement is the plugin's:

- OK (0): nothing below; a paused name is OK, "paused until ...", whatever else it shows;
- WARNING (1): a zombie or malformed lock, a run of this host still going past its --warn-after,
  a malformed pause, or a Redis that may evict keys;
- CRITICAL (2): overdue (a declared cadence: --every/--schedule), the last run failed (any of the
  failures: failed, timeout, lost, killed, abandoned, error, unavailable), or, for a name with no
  declaration, ``--max-age`` since its last success passed;
- UNKNOWN (3): the backend or the ledger cannot be read, or a named name lockrun knows nothing of.

CRITICAL wins over UNKNOWN, UNKNOWN over WARNING (SEVERITY).

The answer is one first line (``LOCKRUN CRITICAL - nightly overdue 3h12m (last success 27h ago on
app-2)``) with perfdata (``| nightly_age=97200s;;86700``: seconds since each name's last success,
and the age at which it is critical when that is known), then one line per name that is not OK.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from lockrun.core.cadence import overdue_text
from lockrun.core.clock import age_s, human_duration, parse_iso
from lockrun.core.errors import BackendUnavailable, LedgerError
from lockrun.core.printable import printable
from lockrun.core.readers import text_of
from lockrun.core.record import FAILURE_STATUSES, Status

if TYPE_CHECKING:
    from lockrun.backends.protocol import Backend
    from lockrun.config.settings import Settings
    from lockrun.ledger.store import Ledger
    from lockrun.views.status import LockEntry

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
#: The plugin states by exit code (the Nagios plugin guidelines).
STATE_NAMES = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL", UNKNOWN: "UNKNOWN"}
#: Which state wins when names differ: CRITICAL over UNKNOWN over WARNING (a failed job must not
#: hide behind a name nobody knows).
SEVERITY = {OK: 0, WARNING: 1, UNKNOWN: 2, CRITICAL: 3}
#: How many names' reasons the first line names before "and N more".
FIRST_LINE_NAMES = 3
_PLAIN_LABEL = re.compile(r"[A-Za-z0-9_.-]+")
#: The reason of a name check found nothing about (a free lock of a name nothing else is known of).
NO_RECORD = "no record"
_LABEL_UNSAFE = re.compile("[=\u00a6]")


class NameCheck(NamedTuple):
    """One name's judgement, as ``check --json`` lists it."""

    name: str
    state: int
    reasons: tuple[str, ...]
    age_s: float | None  # since the last success (None: none known)
    critical_age_s: float | None  # the age at which it is critical (cadence + grace, or --max-age)
    last_success_at: str | None
    entries: tuple[LockEntry, ...]

    def as_json(self) -> dict[str, Any]:
        first = self.entries[0] if self.entries else None
        return {
            "name": self.name, "status": STATE_NAMES[self.state], "reasons": list(self.reasons),
            "age_s": self.age_s, "critical_age_s": self.critical_age_s, "last_success_at": self.last_success_at,
            "paused": first["paused"] if first else None, "cadence": first["cadence"] if first else None,
            "next_due": first["next_due"] if first else None, "overdue_s": first["overdue_s"] if first else None,
            "states": [entry["state"] for entry in self.entries],
            "last_run": first["last_run"] if first else None,
        }


class CheckReport(NamedTuple):
    state: int
    first_line: str
    details: tuple[str, ...]  # the lines after the first: one per name that is not OK, and warnings
    names: tuple[NameCheck, ...]
    perfdata: str

    def as_json(self) -> dict[str, Any]:
        # The summary without its perfdata, which has a field of its own (plugin_text keeps a "|"
        # out of the text: the first " | " starts the perfdata).
        summary = self.first_line.partition(" | ")[0]
        return {"status": STATE_NAMES[self.state], "exit_code": self.state, "summary": summary,
                "details": list(self.details), "perfdata": self.perfdata,
                "names": [name.as_json() for name in self.names]}


def unknown(why: str) -> CheckReport:
    """The plugin's answer when it cannot judge at all."""
    return CheckReport(UNKNOWN, f"LOCKRUN UNKNOWN - {plugin_text(why)}", (), (), "")


def plugin_text(text: str) -> str:
    """Text of the plugin's lines as Nagios can take it: names and reasons may come from records
    lockrun did not write, and a newline would start another line, a ``|`` the perfdata (on any
    line, the Nagios plugin API): control characters escaped, ``|`` shown as ``¦``."""
    return printable(text).replace("|", "\u00a6")


def check_report(resolved: Settings, names: list[str] | None, max_age_s: float | None) -> CheckReport:
    """Ask the backend and the ledger, and judge every name (or exactly the named ones)."""
    read = _read(resolved, names)
    if isinstance(read, CheckReport):
        return read
    entries, successes, evicting = read
    report = judge_all(entries, successes, evicting, names, max_age_s)
    if names is None and not any(check.reasons != (NO_RECORD,) for check in report.names) and not evicting:
        # Nothing to judge is no OK: a monitoring user whose settings are not the jobs' (another
        # state directory, no Redis URL) would see a green check for ever.
        return _nothing_to_check(resolved)
    return report


def _read(resolved: Settings, names: list[str] | None) -> (
        tuple[list[LockEntry], dict[str, tuple[str, str | None]], list[str]] | CheckReport):
    """The names' locks, last successes and evicting servers; UNKNOWN when they cannot be read."""
    from lockrun.backends.connect import open_backend
    from lockrun.views.reading import open_ledger_or_warning
    from lockrun.views.status import evicting_servers, lock_states

    backend = open_backend(resolved, resolved.socket_timeout or 5.0, resolved.connect_timeout)
    book, ledger_warning = open_ledger_or_warning(resolved.ledger_path)
    try:
        if ledger_warning:
            return unknown(ledger_warning.removeprefix("warning: "))
        try:
            entries = lock_states(backend, book, names, every_name=names is None)
            successes = last_successes(backend, book, sorted({entry["name"] for entry in entries}))
            return entries, successes, evicting_servers(backend)
        except BackendUnavailable as exc:
            return unknown(f"backend unreachable: {exc}")
        except LedgerError as exc:
            return unknown(f"cannot read the run ledger: {exc}")
    finally:
        backend.close()
        if book is not None:
            book.close()


def _nothing_to_check(resolved: Settings) -> CheckReport:
    where = (f"redis {resolved.backend_where}" if resolved.redis_url
             else f"the local backend in {resolved.state_dir}")
    return unknown(f"nothing to check: no run, lock, pause or declaration in the ledger {resolved.ledger_path}"
                   f" or {where}; name the jobs, or give check the settings their runs use (--ledger,"
                   " --redis-url, LOCKRUN_STATE_DIR)")


def last_successes(backend: Backend, ledger: Ledger | None, names: list[str]) -> dict[str, tuple[str, str | None]]:
    """Each name's last success: (when it ended, on which host if known), the newer of the fleet
    record's and this host's ledger's."""
    found = _fleet_successes(backend, names)
    if ledger is not None:
        for name in names:
            success = _ledger_success(ledger, name)
            if success is not None and success[0] >= found.get(name, ("", None))[0]:
                found[name] = success
    return found


def _ledger_success(ledger: Ledger, name: str) -> tuple[str, str | None] | None:
    """When this host's ledger's last success of ``name`` ended (else started), and where."""
    row = ledger.last_with_status(name, Status.SUCCEEDED) or {}
    when = row.get("ended_at") or row.get("started_at")
    return (when, row.get("host")) if isinstance(when, str) and parse_iso(when) is not None else None


def _fleet_successes(backend: Backend, names: list[str]) -> dict[str, tuple[str, str | None]]:
    """The fleet record's last success of each name (no host: the record's is not this host's word)."""
    found: dict[str, tuple[str, str | None]] = {}
    record = backend.fleet_record()
    if record is None or not names:
        return found
    for name, (_row, success_at) in record.lasts(names).items():
        text = text_of(success_at) if success_at is not None else ""
        if parse_iso(text) is not None:
            found[name] = (text, None)
    return found


def judge_all(entries: list[LockEntry], successes: dict[str, tuple[str, str | None]], evicting: list[str],
              names: list[str] | None, max_age_s: float | None, now: datetime | None = None) -> CheckReport:
    moment = now or datetime.now(timezone.utc)
    groups: dict[str, list[LockEntry]] = {}
    for entry in entries:
        groups.setdefault(entry["name"], []).append(entry)
    checks = [judge_name(name, groups.get(name, []), successes.get(name), max_age_s, moment, named=names is not None)
              for name in (list(dict.fromkeys(names)) if names is not None else sorted(groups))]
    state = max([check.state for check in checks] + [WARNING if evicting else OK], key=SEVERITY.__getitem__)
    return CheckReport(state, first_line(state, checks, evicting), _details(checks, evicting), tuple(checks),
                       perfdata(checks))


def _details(checks: list[NameCheck], evicting: list[str]) -> tuple[str, ...]:
    """The lines after the first: each name that is not OK, and each server that may evict keys."""
    details = [plugin_text(f"{check.name}: {STATE_NAMES[check.state]}: {'; '.join(check.reasons)}")
               for check in checks if check.state != OK]
    return (*details, *(plugin_text(line) for line in evicting))


def judge_name(name: str, entries: list[LockEntry], success: tuple[str, str | None] | None,
               max_age_s: float | None, now: datetime, named: bool) -> NameCheck:
    """One name's state and why: CRITICAL when any critical reason holds, else WARNING when a
    warning does (each reason named, the critical ones first)."""
    success_at, success_host = success if success else (None, None)
    age = age_s(success_at, now) if success_at else None
    first = entries[0] if entries else None
    if first is None or not _known(first, entries):
        return _not_known(name, entries, age, success_at, named)
    paused = _paused(name, entries, age, success_at)
    if paused is not None:
        return paused
    critical = _critical_reasons(name, first, _since(age, success_host), age, max_age_s, now)
    warning = _warning_reasons(name, entries, first["paused"])
    state = CRITICAL if critical else WARNING if warning else OK
    return NameCheck(name, state, tuple(critical + warning), age, _critical_age(first["cadence"], max_age_s),
                     success_at, tuple(entries))


def _paused(name: str, entries: list[LockEntry], age: float | None, success_at: str | None) -> NameCheck | None:
    """A paused name is OK at any age: no threshold a perfdata reader would see it past (a malformed
    pause is not honoured: None, judged as any name)."""
    pause = entries[0]["paused"]
    if pause and not pause.get("problem"):
        return NameCheck(name, OK, (f"{name} paused until {pause.get('until')}",), age, None, success_at,
                         tuple(entries))
    return None


def _not_known(name: str, entries: list[LockEntry], age: float | None, success_at: str | None,
               named: bool) -> NameCheck:
    """A name lockrun knows nothing of: UNKNOWN if it was named, else OK (it is only a success)."""
    reason = f"{name} unknown to lockrun (no run, lock, pause or declaration)" if named else NO_RECORD
    return NameCheck(name, UNKNOWN if named else OK, (reason,), age, None, success_at, tuple(entries))


def _known(first: LockEntry, entries: list[LockEntry]) -> bool:
    """lockrun knows something of the name: a run, a declaration, a pause or a lock that is not free."""
    return any((first["last_run"], first["cadence"], first["paused"],
                any(entry["state"] != "free" for entry in entries)))


def _critical_reasons(name: str, first: LockEntry, since: str, age: float | None, max_age_s: float | None,
                      now: datetime) -> list[str]:
    """Overdue, the last run failed, or (no cadence declared) older than --max-age."""
    reasons = (_overdue(name, first, since), _failed(name, first, since, now), _too_old(name, first, since, age,
                                                                                          max_age_s))
    return [reason for reason in reasons if reason is not None]


def _overdue(name: str, first: LockEntry, since: str) -> str | None:
    if first["overdue_s"] is None:
        return None
    return f"{name} overdue {overdue_text(first['overdue_s'])} ({since})"


def _failed(name: str, first: LockEntry, since: str, now: datetime) -> str | None:
    last = first["last_run"]
    if not last or last.get("status") not in FAILURE_STATUSES:
        return None
    ago = age_s(last.get("ended_at") or last.get("started_at"), now)
    when = f" {human_duration(ago)} ago" if ago is not None else ""
    return f"{name} last run {last['status']} on {last.get('host') or '?'}{when} ({since})"


def _too_old(name: str, first: LockEntry, since: str, age: float | None, max_age_s: float | None) -> str | None:
    if first["cadence"] is None and max_age_s is not None and (age is None or age > max_age_s):
        return f"{name} {since}, more than --max-age {human_duration(max_age_s)}"
    return None


def _warning_reasons(name: str, entries: list[LockEntry], pause: dict[str, str | None] | None) -> list[str]:
    """A zombie, malformed or slow lock; a malformed pause."""
    warning = [reason for entry in entries if (reason := _lock_warning(name, entry)) is not None]
    if pause and pause.get("problem"):
        warning.append(f"{name} has a malformed pause, not honoured ({pause['problem']})")
    return warning


def _lock_warning(name: str, entry: LockEntry) -> str | None:
    holder = f"{entry['host'] or '?'}:{entry['pid'] if entry['pid'] is not None else '?'}"
    if entry["state"] in ("zombie", "malformed"):
        what = f": {entry['problem']}" if entry["problem"] else ""
        return f"{name} lock is {entry['state']} (held by {holder}{what})"
    if entry["state"] == "slow":  # --warn-after found this host's run slow (views/status.py)
        return f"{name} is slow: still running past its --warn-after (held by {holder})"
    return None


def _since(age: float | None, host: str | None) -> str:
    if age is None:
        return "no success recorded"
    return f"last success {human_duration(age)} ago" + (f" on {host}" if host else "")


def _critical_age(cadence: dict[str, Any] | None, max_age_s: float | None) -> float | None:
    if cadence is None:
        return max_age_s
    if cadence.get("every_s") is not None:
        return float(cadence["every_s"]) + float(cadence.get("grace_s") or 0)
    return None  # a schedule's gaps differ: no one age


def first_line(state: int, checks: list[NameCheck], evicting: list[str]) -> str:
    """``LOCKRUN CRITICAL - nightly overdue 3h12m (...)``, naming the worst names first."""
    line = f"LOCKRUN {STATE_NAMES[state]} - {plugin_text(_summary(state, checks, evicting))}"
    data = perfdata(checks)
    return f"{line} | {data}" if data else line


def _summary(state: int, checks: list[NameCheck], evicting: list[str]) -> str:
    """The first reasons of the worst names; else the eviction warning; else how many names were
    checked, after the pauses."""
    worst = _first_reasons(state, checks)
    if worst:
        more = len(worst) - FIRST_LINE_NAMES
        return "; ".join(worst[:FIRST_LINE_NAMES]) + (f"; and {more} more" if more > 0 else "")
    if state == WARNING and evicting:
        return evicting[0]
    return _quiet_summary(checks)


def _first_reasons(state: int, checks: list[NameCheck]) -> list[str]:
    """The first reason of each name in ``state``, unless that is OK."""
    if state == OK:
        return []
    return [check.reasons[0] for check in checks if check.state == state and check.reasons]


def _quiet_summary(checks: list[NameCheck]) -> str:
    paused = [check.reasons[0] for check in checks if check.reasons and check.state == OK and "paused" in
              check.reasons[0]]
    text = f"{len(checks)} name{'s' if len(checks) != 1 else ''} checked"
    return "; ".join([*paused[:FIRST_LINE_NAMES], text]) if paused else text


def _label(name: str) -> str:
    label = f"{name}_age"
    if _PLAIN_LABEL.fullmatch(label):
        return label
    # a label may hold neither ' nor = (quoted or not); | and a newline would end the perfdata
    return "'" + _LABEL_UNSAFE.sub("_", plugin_text(label).replace("'", "")) + "'"


def perfdata(checks: list[NameCheck]) -> str:
    """``name_age=97200s;;86700;0`` per name judged: seconds since its last success, no warning
    threshold, the critical age where one is known, and the minimum 0 (the Nagios plugin
    guidelines' ``'label'=value[UOM];[warn];[crit];[min];[max]``). A name with no success known
    gets ``U`` ("the actual value couldn't be determined"), so its graph shows a gap, not 0."""
    parts = []
    for check in checks:
        if check.reasons == (NO_RECORD,):
            continue
        value = f"{check.age_s:.0f}s" if check.age_s is not None else "U"
        critical = f"{check.critical_age_s:.0f}" if check.critical_age_s is not None else ""
        parts.append(f"{_label(check.name)}={value};;{critical};0")
    return " ".join(parts)
