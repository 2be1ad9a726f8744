"""What ``lockrun status`` knows about each lock: the holder, its liveness, the last run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

from lockrun.backends.pause import Paused
from lockrun.backends.protocol import Backend
from lockrun.backends.values import Holder
from lockrun.core.errors import BackendUnavailable, LedgerError
from lockrun.core.record import Status
from lockrun.ledger.store import Ledger
from lockrun.system import host
from lockrun.views import fleet, health

if TYPE_CHECKING:
    from lockrun.config.settings import Settings


class LockEntry(TypedDict):
    """One lock (one holder of it, under --slots) as ``status --json`` lists it (docs/operating.md "Operating it")."""

    name: str
    state: str  # free, held, retrying, zombie, cooling, malformed; unknown when the backend could not be asked
    token: str | None
    run_id: str | None
    host: str | None
    pid: int | None
    child_pid: int | None
    command: Sequence[str] | None
    started_at: str | None
    heartbeat_at: str | None
    heartbeat_age_s: float | None
    ttl_remaining_s: float | None
    problem: str | None
    last_run: dict[str, Any] | None  # the newest finished run, as history --json shows it
    # The declared cadence (docs/operating.md "Declaring a cadence"): every_s or schedule and tz,
    # grace_s; None: none declared. next_due: the first due start after the newest one (ISO 8601
    # UTC); overdue_s: how long past it, once the grace is over too, with no start since (None: not).
    cadence: dict[str, Any] | None
    next_due: str | None
    overdue_s: float | None
    # The name's pause (lockrun pause; docs/operating.md "Pausing a job"): who, where, when, until, reason,
    # problem (a malformed one, which runs do not honour); None: not paused.
    paused: dict[str, str | None] | None
    attempt: int | None  # --retry: the holder's attempt (while retrying: the next one)
    retry_at: str | None  # --retry: while the holder pauses between attempts, when the next starts


#: Holder fields that say where its process ran: an unusable value in any of them means the
#: record cannot say, and nothing is concluded from its pid or boot.
IDENTITY_FIELDS = frozenset({"host", "boot_id", "machine_id", "pid_ns"})


def renewal_margin(ttl: float) -> float:
    """How late a renewal may be before it counts as missed."""
    return max(0.5, 0.1 * ttl)


def zombie_reason(holder: Holder) -> str | None:
    """Why a holder is certainly dead, or has missed two renewals and a margin; None if it looks alive.

    When in doubt the answer is None: a live lock cleared by mistake is a double run.
    """
    return proven_dead_reason(holder) or stale_heartbeat_reason(holder)


def proven_dead_reason(holder: Holder) -> str | None:
    """Why a holder is certainly dead (nothing runs under it); None when nothing proves it.

    Only what the kernel or the server vouches for counts: a kernel lock (the local backend) has
    a live holder; a pid is evidence only where it means the same process to us (this machine,
    this boot, this PID namespace); a heartbeat's age is measured on the clock that stamped it
    (the Redis server's), and counts only with a machine id that says the holder ran here in an
    earlier boot. When in doubt the answer is None: a live lock cleared by mistake is a double run.
    """
    if holder.foreign:
        return f"no lockrun run can hold it ({holder.problem})"
    if holder.kernel_held:
        return None  # the kernel says a process holds it, whatever its namespace: alive
    # Most holders name another machine: nothing of theirs but the heartbeat can be judged here.
    if (holder.machine_id or "") != host.machine_id():
        return None
    # The holder's fields are parsed already (Holder.from_fields): no need for Origin.of.
    origin = host.Origin(boot_id=holder.boot_id or "",
                         machine_id=holder.machine_id or "", pid_ns=holder.pid_ns, pid=holder.pid,
                         pid_start=holder.pid_start, doubtful=bool(IDENTITY_FIELDS.intersection(holder.unusable)))
    return _silent_since_an_earlier_boot(holder, origin) or _process_gone(origin)


def _silent_since_an_earlier_boot(holder: Holder, origin: host.Origin) -> str | None:
    age = holder.heartbeat_age_s
    ttl = holder.ttl_ms / 1000.0 if holder.ttl_ms else None
    if (origin.earlier_boot() and age is not None and ttl is not None and age > host.uptime_s() + 1.0
            and age > ttl / 3 + renewal_margin(ttl)):
        # Its machine id is ours, its boot is not, and it fell silent before this boot began
        # (ages by the server's clock, uptime by our kernel's) and missed a renewal: so a live
        # clone that copied /etc/machine-id is not mistaken for our own past.
        return (f"its lockrun ran on this machine in an earlier boot (boot id {origin.boot_id[:8]}…);"
                f" its last heartbeat was {age:.1f}s ago, before this boot")
    return None


def _process_gone(origin: host.Origin) -> str | None:
    if not origin.process_gone():  # only a pid of our machine, boot and PID namespace can say so
        return None
    return f"its lockrun process {origin.pid} no longer runs (this machine, boot and PID namespace)"


def stale_heartbeat_reason(holder: Holder) -> str | None:
    """Why a holder looks dead by its heartbeat alone (two renewals and a margin missed, by the
    server's clock), or None. That proves nothing: a holder cut off from Redis goes on until its
    own deadline, which is why ``unlock`` clears such a holder only with --force."""
    if holder.foreign or holder.kernel_held:
        return None
    age = holder.heartbeat_age_s
    ttl = holder.ttl_ms / 1000.0 if holder.ttl_ms else None
    if age is None or ttl is None:
        return None
    if age > 2 * ttl / 3 + renewal_margin(ttl):
        return (f"its last heartbeat was {age:.1f}s ago by the server's clock"
                f" (renewals are due every {ttl / 3:.1f}s)")
    return None


def lock_state(holder: Holder) -> str:
    """``malformed`` (data lockrun did not write), ``cooling``, ``zombie``, ``retrying`` or ``held``."""
    if holder.problem:
        return "malformed"
    if holder.cooling_until:
        return "cooling"  # the run is over; --min-hold keeps the lock taken a while longer
    if zombie_reason(holder):
        return "zombie"
    # --retry: between two attempts, the lock kept (docs/operating.md "Retries and jitter")
    return "retrying" if holder.retry_at else "held"


def lock_entry(name: str, holder: Holder | None, last_run: dict[str, Any] | None) -> LockEntry:
    """One lock as ``status --json`` lists it (docs/operating.md "Operating it")."""
    if holder is None:
        return {
            "name": name, "state": "free", "token": None, "run_id": None, "host": None, "pid": None,
            "child_pid": None, "command": None, "started_at": None, "heartbeat_at": None,
            "heartbeat_age_s": None, "ttl_remaining_s": None, "problem": None, "last_run": last_run, "paused": None,
            "cadence": None, "next_due": None, "overdue_s": None, "attempt": None, "retry_at": None,
        }
    return {
        "name": name,
        "state": lock_state(holder),
        "token": holder.token,
        "run_id": holder.run_id,
        "host": holder.host,
        "pid": holder.pid,
        "child_pid": holder.child_pid,
        "command": holder.command,
        "started_at": holder.started_at,
        "heartbeat_at": holder.heartbeat_at,
        "heartbeat_age_s": holder.heartbeat_age_s,
        "ttl_remaining_s": holder.ttl_remaining_s,
        "problem": holder.problem,
        "last_run": last_run,
        "paused": None,
        "cadence": None,
        "next_due": None,
        "overdue_s": None,
        "attempt": holder.attempt,
        "retry_at": holder.retry_at,
    }


def newer_run(mine: dict[str, Any] | None, theirs: dict[str, Any] | None) -> dict[str, Any] | None:
    """The newer of this host's last finished run and the fleet's (by when it ended)."""
    if mine is None or theirs is None:
        return mine or theirs
    if mine["run_id"] == theirs["run_id"]:
        return mine  # the same run: this host's row is the fuller one
    ours_ended = mine["ended_at"] or mine["started_at"] or ""
    return theirs if (theirs["ended_at"] or theirs["started_at"] or "") > ours_ended else mine


def lock_states(
    backend: Backend, ledger: Ledger | None, names: list[str] | None, notes: list[str] | None = None,
    every_name: bool = False,
) -> list[LockEntry]:
    """Held and paused locks (or exactly the named ones, held or free; ``every_name``: every name
    the backend or the ledger knows, ``status --all``), each with its last finished run: the newer
    of this host's ledger and the fleet record (a shared backend's memory of every host), its
    pause and its declared cadence. ``notes`` gets a line for each holder the operator should know
    more about (another PID namespace)."""
    held = _holders_by_name(backend, names, notes)
    pauses = backend.pauses(names)  # a paused name is listed, held or not
    wanted = sorted({*held, *pauses}) if names is None else list(dict.fromkeys(names))
    if every_name and names is None:
        wanted = sorted({*wanted, *backend.known_names(), *_ledger_names(ledger)})
    record = backend.fleet_record()
    fleet_last = fleet.last_runs(record, wanted) if record is not None and wanted else {}
    entries: list[LockEntry] = []
    slow = _slow_running(ledger) if held else {}
    for name in wanted:
        mine = _last_finished(ledger, name) if ledger is not None else None
        last_run = newer_run(mine, fleet_last.get(name))
        holders: list[Holder | None] = [*held.get(name, [])] or [None]  # None: a named lock that is free
        entries += [_entry(name, one, last_run, slow, pauses.get(name)) for one in holders]
    add_due_times(entries, health.declared_cadences(backend, ledger, wanted))
    return entries


def _holders_by_name(backend: Backend, names: list[str] | None, notes: list[str] | None) -> dict[str, list[Holder]]:
    """The holders of each name (--slots: several, one entry each); a line in ``notes`` for each
    holder the operator should know more about."""
    held: dict[str, list[Holder]] = {}
    for holder in backend.holders(names):
        held.setdefault(holder.name, []).append(holder)
        if holder.note and notes is not None:
            notes.append(f"{holder.name}: {holder.host or '?'}:{holder.pid or '?'}: {holder.note}")
    return held


def _entry(name: str, holder: Holder | None, last_run: dict[str, Any] | None, slow: dict[str, str],
           pause: Paused | None) -> LockEntry:
    entry = lock_entry(name, holder, last_run)
    if entry["state"] == "held" and holder is not None and holder.run_id in slow:
        entry["state"] = "slow"  # --warn-after: still running past it (this host's runs)
    if pause is not None:
        entry["paused"] = pause.as_json()
    return entry


def _slow_running(ledger: Ledger | None) -> dict[str, str]:
    """This host's running runs that --warn-after found slow (run_id -> since when)."""
    if ledger is None:
        return {}
    try:
        return ledger.slow_running()
    except LedgerError:
        return {}


def add_due_times(entries: list[LockEntry], declared: dict[str, health.Declared]) -> None:
    """Each entry's cadence, next due time and overdue (docs/operating.md "Declaring a cadence")."""
    by_name: dict[str, list[LockEntry]] = {}
    for entry in entries:
        by_name.setdefault(entry["name"], []).append(entry)
    for name, group in by_name.items():
        found = declared.get(name)
        if found is None:
            continue
        paused = any(entry["paused"] and not entry["paused"].get("problem") for entry in group)
        # A run in progress is the job doing its work (a long one is check's WARNING, not overdue).
        running = any(entry["state"] in ("held", "slow", "cooling") for entry in group)
        last = group[0]["last_run"]
        starts = [entry["started_at"] for entry in group] + [last.get("started_at") if last else None]
        fields = health.due_fields(found, starts, paused or running)
        for entry in group:
            entry["cadence"], entry["next_due"], entry["overdue_s"] = fields


def _ledger_names(ledger: Ledger | None) -> list[str]:
    if ledger is None:
        return []
    try:
        return ledger.known_names()
    except LedgerError:
        return []


def ledger_view(ledger: Ledger | None, names: list[str] | None) -> list[LockEntry]:
    """What the ledger alone knows, for when the backend cannot be asked.

    Runs in progress on this host are listed with state ``unknown``: without the
    backend nobody can tell whether their leases still hold.
    """
    if ledger is None:
        return []
    try:
        running = ledger.history(statuses={Status.RUNNING}, limit=100000)
    except LedgerError:
        return []
    by_name = {row["name"]: row for row in reversed(running)}
    wanted = sorted(by_name) if names is None else list(dict.fromkeys(names))
    entries = []
    for name in wanted:
        entry = lock_entry(name, None, _last_finished(ledger, name))
        row = by_name.get(name)
        entry["state"] = "unknown"
        if row is not None:
            entry["run_id"], entry["host"], entry["pid"] = row["run_id"], row["host"], row["pid"]
            entry["command"], entry["started_at"] = row["command"], row["started_at"]
        entries.append(entry)
    return entries


class StatusView(NamedTuple):
    """What ``status`` shows: the locks, why the backend could not be asked (None if it could),
    and notes about holders (lines under the table)."""

    locks: list[LockEntry]
    unreachable: BackendUnavailable | None
    notes: tuple[str, ...] = ()


def status_view(backend: Backend, ledger: Ledger | None, names: list[str] | None,
                every_name: bool = False) -> StatusView:
    """The locks as the backend knows them; when it cannot be reached, what the ledger alone knows."""
    notes: list[str] = []
    try:
        return StatusView(lock_states(backend, ledger, names, notes, every_name), None, tuple(notes))
    except BackendUnavailable as exc:
        return StatusView(ledger_view(ledger, names), exc)


def _last_finished(ledger: Ledger, name: str) -> dict[str, Any] | None:
    try:
        return ledger.last_finished(name)
    except LedgerError:
        return None


class StatusReport(NamedTuple):
    """Everything ``status`` prints, gathered before anything is printed."""

    backend: str  # "redis" or "local"
    view: StatusView
    evicting: list[str]  # one warning line per Redis server that may evict keys
    hint: str | None  # this host's runs used another backend than this shell
    ledger_warning: str | None  # the ledger exists but cannot be read


def status_report(resolved: Settings, names: list[str] | None, every_name: bool = False) -> StatusReport:
    """Ask the backend, then the ledger for each lock's last run (docs/operating.md "Operating it")."""
    from lockrun.backends.connect import open_backend
    from lockrun.views.reading import backend_hint, open_ledger_or_warning

    backend = open_backend(resolved, resolved.socket_timeout or 5.0, resolved.connect_timeout)
    book, ledger_warning = open_ledger_or_warning(resolved.ledger_path)
    evicting: list[str] = []
    try:
        view = status_view(backend, book, names, every_name)
        if view.unreachable is None:
            evicting = evicting_servers(backend)
    finally:
        backend.close()
        hint = backend_hint(book, resolved, names)
        if book is not None:
            book.close()
    return StatusReport(backend.name, view, evicting, hint, ledger_warning)


def evicting_servers(backend: Backend) -> list[str]:
    """One warning line per Redis server that may evict keys (docs/guarantees.md "A Redis that evicts keys"):
    one INFO memory per server, after the locks were read."""
    return backend.eviction_warnings()
