"""Output for people and scripts: JSON, and rich tables (rich is imported only here, only when drawing)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lockrun.core.cadence import Cadence, overdue_text
from lockrun.core.clock import age_s, human_duration, reading_clock, seconds_since
from lockrun.core.defaults import DEFAULT_FAILURE_TAIL, DEFAULT_FAILURE_TAIL_TEXT
from lockrun.core.printable import command_line, printable
from lockrun.core.record import Row, Status

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from lockrun.views.status import LockEntry

#: A run as ``history --json`` prints it (docs/operating.md "The run ledger").

STATE_STYLES = {"held": "green", "slow": "yellow", "retrying": "yellow", "zombie": "bold red", "malformed": "bold red",
                "free": "dim", "unknown": "yellow"}
# One palette for every table and chart: ledger status -> rich style. The timeline's SVG
# draws the same colours (STYLE_HEX).
STATUS_STYLES: dict[str, str] = {
    Status.SUCCEEDED: "green",
    Status.FAILED: "red",
    Status.LOST: "bold bright_red",
    Status.PREEMPTED: "bold bright_red",
    Status.TIMEOUT: "magenta",
    Status.KILLED: "dark_orange",
    Status.ERROR: "blue",
    Status.UNAVAILABLE: "yellow",
    Status.ABANDONED: "bright_yellow",
    Status.BUSY: "dim",
    Status.DUPLICATE: "dim",
    Status.PAUSED: "dim",
    Status.UNLOCKED: "dim",
    Status.RUNNING: "cyan",
}
# The palette's styles as SVG colours.
STYLE_HEX = {
    "green": "#2f9e44",
    "red": "#e03131",
    "bold bright_red": "#9c1c1c",
    "magenta": "#ae3ec9",
    "dark_orange": "#e8590c",
    "blue": "#1971c2",
    "yellow": "#e6a700",
    "bright_yellow": "#c9a227",
    "cyan": "#1c9fc2",
    "dim": "#adb5bd",
}


def print_json(value: object) -> None:
    """Indented for a person at a terminal; compact for a pipe, where the C encoder is
    several times faster (json's indent= forces the pure-Python one)."""
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(value, indent=indent) + "\n")


def _console() -> Console:
    from rich.console import Console

    # rich honours NO_COLOR and FORCE_COLOR itself, and drops colour when stdout is
    # not a terminal. Piped tables must not be cut to 80 columns for grep and awk.
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS") or 0) or 250
    return Console(highlight=False, width=width, soft_wrap=False)


def _table(*columns: str) -> Table:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, no_wrap=True, overflow="ellipsis", max_width=48 if column == "COMMAND" else None)
    return table


def _styled(text: str, style: str | None) -> str:
    from rich.markup import escape

    shown = escape(printable(text))  # cells hold what other hosts wrote: no control characters
    return f"[{style}]{shown}[/]" if style else shown


def _when(iso: str | None) -> str:
    """``2026-11-29 08:57:03Z``: UTC like the ledger, to the second."""
    return f"{iso[:10]} {iso[11:19]}Z" if iso else "-"


def _command(command: Sequence[str] | None) -> str:
    return command_line(command)


def _exit_parts(row: Row) -> tuple[str, str | None]:
    """What cron saw, and how the command ended when that says more: ("124", "sig 15"),
    ("76", "sig 9"), ("3", None), ("75", None). Rows written before lockrun recorded its exit
    status have the command's code alone (or "sig N")."""
    command = None
    if row["signal"] is not None:
        command = f"sig {row['signal']}"
    elif row["exit_code"] is not None and row["exit_code"] != row.get("exit_status"):
        command = f"cmd {row['exit_code']}"
    if row.get("exit_status") is None:
        return (str(row["exit_code"]), None) if row["exit_code"] is not None else (command or "-", None)
    return str(row["exit_status"]), command


def exit_text(row: Row) -> str:
    """``124 (sig 15)``, ``3``, ``-``: the history table's EXIT column."""
    status, command = _exit_parts(row)
    return f"{status} ({command})" if command else status


def status_table(
    backend: str, where: str, locks: list[LockEntry], unreachable: bool = False, notes: Sequence[str] = (),
    every_name: bool = False,
) -> None:
    """``status``; ``every_name`` (``status --all``): every known name, with a NEXT DUE column."""
    console = _console()
    _print_status_head(console, backend, where, unreachable)
    if not locks:
        console.print(_nothing_held(unreachable, every_name))
        return
    columns = ["NAME", "STATE", "HOLDER", "AGE", "TTL LEFT", "HEARTBEAT", "COMMAND", "LAST RUN"]
    table = _table(*columns, *(["NEXT DUE"] if every_name else []))
    for lock in locks:
        table.add_row(*_status_cells(lock), *([_due_text(lock)] if every_name else []))
    console.print(table)
    for line in _status_lines(locks, notes):
        console.print(line)


def _print_status_head(console: Console, backend: str, where: str, unreachable: bool) -> None:
    """The backend, and whether what follows is the ledger's knowledge instead of the backend's."""
    from rich.markup import escape

    console.print(escape(f"backend: {backend}" + (f" {where}" if where else "")))
    if unreachable:
        console.print(_styled("the backend is unreachable: below is what the ledger on this host knows", "yellow"))


def _nothing_held(unreachable: bool, every_name: bool) -> str:
    if unreachable:
        return "the ledger knows of no run in progress"
    return "lockrun knows of no name yet" if every_name else "no locks are held"


def _status_cells(lock: LockEntry) -> list[str]:
    """One lock's row of ``status``, NEXT DUE aside."""
    heartbeat = lock["heartbeat_age_s"]
    last = lock.get("last_run")
    return [
        _styled(lock["name"], None),
        _state_cell(lock),
        _styled(f"{lock['host']}:{lock['pid'] if lock['pid'] is not None else '?'}" if lock["host"] else "-", None),
        # by the clock the heartbeat's age is on (a Redis server's TIME), else this host's
        human_duration(age_s(lock["started_at"], reading_clock(lock["heartbeat_at"], heartbeat))),
        human_duration(lock["ttl_remaining_s"]),
        f"{human_duration(heartbeat)} ago" if heartbeat is not None else "-",
        _styled(_command(lock["command"]), None),
        _styled(_last_run_text(last), STATUS_STYLES.get(last["status"]) if last else None),
    ]


def _state_cell(lock: LockEntry) -> str:
    """``held, paused, overdue 3.2h``: red when overdue, else the state's colour."""
    overdue = lock.get("overdue_s")
    state = _state_text(lock) + (", paused" if lock.get("paused") else "")
    state += f", overdue {overdue_text(overdue)}" if overdue is not None else ""
    return _styled(state, "red" if overdue is not None else STATE_STYLES.get(lock["state"]))


def _last_run_text(last: Row | None) -> str:
    """``failed (1) on app-2, 3.0h ago``, or ``-``."""
    if not last:
        return "-"
    ago = human_duration(age_s(last["ended_at"] or last["started_at"]))
    status, command = _exit_parts(last)
    how = f"{status}, {command}" if command else status
    return f"{last['status']} ({how}) on {last['host'] or '?'}, {ago} ago"


def _status_lines(locks: list[LockEntry], notes: Sequence[str]) -> list[str]:
    """What goes under the table: malformed records, pauses, notes about holders."""
    lines = [_styled(f"{lock['name']}: malformed: {lock['problem']}", STATE_STYLES["malformed"])
             for lock in locks if lock.get("problem")]  # data lockrun did not write: say what
    # The notes are about a holder: where its pid means something.
    return lines + _pause_lines(locks) + [_styled(note, None) for note in notes]


def _pause_lines(locks: list[LockEntry]) -> list[str]:
    """Each paused name's pause, once per name, whatever its holders (--slots)."""
    lines = []
    for name, pause in {lock["name"]: lock.get("paused") for lock in locks}.items():
        if pause:
            lines.append(_styled(f"{name}: {_pause_text(pause)}", STATE_STYLES["malformed"] if pause.get("problem")
                                 else None))
    return lines


def _due_text(lock: LockEntry) -> str:
    """``in 42.0m (every 1h)``, ``2.1h ago (0 3 * * * (UTC))``, ``-`` without a declared cadence."""
    declared = lock.get("cadence")
    if not declared or not lock.get("next_due"):
        return "-"
    cadence = Cadence(every_s=declared["every_s"], schedule=declared["schedule"], tz=declared["tz"],
                      grace_s=declared["grace_s"])
    return _styled(f"{_due_when(lock['next_due'])} ({cadence.describe()})", None)


def _due_when(next_due: str | None) -> str:
    """``in 42.0m`` or ``2.1h ago``; ``-`` for a time that cannot be read."""
    seconds = seconds_since(next_due)
    if seconds is None:
        return "-"
    return f"in {human_duration(-seconds)}" if seconds <= 0 else f"{human_duration(seconds)} ago"


def _pause_text(pause: dict[str, str | None]) -> str:
    """A status line for a name's pause (views/status: LockEntry's ``paused``)."""
    if pause.get("problem"):
        return f"a malformed pause, not honoured: {pause['problem']} (lockrun resume removes it)"
    text = f"paused until {pause.get('until')}"
    if pause.get("who") or pause.get("where"):
        text += f" by {pause.get('who') or '?'} on {pause.get('where') or '?'}"
    return text + (f" ({pause['reason']})" if pause.get("reason") else "")


def _state_text(lock: LockEntry) -> str:
    """``held``, or for a --retry run between attempts ``retrying (attempt 3 in 8s)``."""
    if lock["state"] != "retrying" or not lock.get("attempt"):
        return lock["state"]
    since = seconds_since(lock.get("retry_at"))  # negative: it is still ahead
    when = f" in {human_duration(max(0.0, -since))}" if since is not None else ""
    return f"retrying (attempt {lock['attempt']}{when})"


def _status_text(row: Row) -> str:
    """The ledger status, with the attempt of a --retry run: ``failed #2``."""
    attempt = row.get("attempt")
    return f"{row['status']} #{attempt}" if isinstance(attempt, int) else str(row["status"])


def history_table(rows: list[Row]) -> None:
    console = _console()
    if not rows:
        console.print("no runs recorded")
        return
    table = _table("WHEN", "NAME", "STATUS", "EXIT", "DURATION", "HOST", "RUN ID", "COMMAND")
    for row in rows:
        table.add_row(
            _styled(_when(row["started_at"]), None),  # rows from the fleet record may hold anything
            _styled(row["name"], None),
            _styled(_status_text(row), STATUS_STYLES.get(row["status"])),
            exit_text(row),
            human_duration(row["duration_s"]),
            _styled(row["host"] or "-", None),
            _styled((row["run_id"] or "-")[:8], None),
            _styled(_command(row["command"]), None),
        )
    console.print(table)


def run_details(row: Row, tail: str | None) -> None:
    """One run, field by field, then its output tail as it was (no markup)."""
    width = max(len(key) for key in row)
    sys.stdout.write("\n".join(_field_line(key, value, width) for key, value in row.items()) + "\n")
    _write_tail(tail)


def _field_line(key: str, value: Any, width: int) -> str:
    shown = command_line(value) if key == "command" else ("-" if value is None else value)
    return f"{key.ljust(width)}  {printable(str(shown))}"


def _write_tail(tail: str | None) -> None:
    """A run's output tail as it was kept, or why there is none."""
    if tail is None:
        sys.stdout.write(f"--- no output kept: a failed run keeps the last {DEFAULT_FAILURE_TAIL_TEXT} of its output"
                         " when lockrun's output is not a terminal; --capture-tail SIZE keeps the last SIZE of"
                         " every run's output ---\n")
    else:
        # Another host's output, perhaps: its lines and tabs as they were, escape sequences shown.
        size = len(tail.encode())
        sys.stdout.write(f"--- output tail ({size} bytes) ---\n{printable(tail, keep=chr(10) + chr(9))}")
        if tail and not tail.endswith("\n"):
            sys.stdout.write("\n")
        if size >= DEFAULT_FAILURE_TAIL:  # perhaps cut at its start (docs/operating.md "Output")
            sys.stdout.write("--- the output may have begun earlier: --capture-tail SIZE keeps the last SIZE ---\n")
