"""Output for people and scripts: JSON, and rich tables (rich is imported only here, only when drawing)."""

from __future__ import annotations

import json
import os
import sys


def print_json(value) -> None:
    sys.stdout.write(json.dumps(value, indent=2) + "\n")


def _console():
    from rich.console import Console

    # rich already honours NO_COLOR and drops colour when stdout is not a terminal.
    return Console(no_color="NO_COLOR" in os.environ, highlight=False)


def _short(command: list[str] | None, width: int = 40) -> str:
    text = " ".join(command or [])
    return text if len(text) <= width else text[: width - 1] + "…"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    value = float(value)
    if value < 60:
        return f"{value:.1f}s"
    if value < 3600:
        return f"{value / 60:.1f}m"
    if value < 86400:
        return f"{value / 3600:.1f}h"
    return f"{value / 86400:.1f}d"


def status_table(backend: str, where: str, locks: list[dict]) -> None:
    from rich.table import Table

    console = _console()
    console.print(f"backend: {backend}" + (f" ({where})" if where else ""))
    if not locks:
        console.print("no locks are held")
        return
    table = Table(box=None, pad_edge=False)
    for column in ("NAME", "STATE", "HOLDER", "STARTED", "TTL LEFT", "HEARTBEAT", "COMMAND", "LAST RUN"):
        table.add_column(column)
    for lock in locks:
        last = lock.get("last_run")
        last_text = f"{last['status']} ({last['exit_code']}) {last['ended_at'] or ''}" if last else "-"
        holder = f"{lock['host']}:{lock['pid']}" if lock["host"] else "-"
        state_style = {"held": "green", "zombie": "bold red", "free": "dim"}.get(lock["state"], "")
        table.add_row(
            lock["name"],
            f"[{state_style}]{lock['state']}[/]" if state_style else lock["state"],
            holder,
            lock["started_at"] or "-",
            _seconds(lock["ttl_remaining_s"]),
            _seconds(lock["heartbeat_age_s"]) + (" ago" if lock["heartbeat_age_s"] is not None else ""),
            _short(lock["command"]),
            last_text,
        )
    console.print(table)


def history_table(rows: list[dict]) -> None:
    from rich.table import Table

    console = _console()
    if not rows:
        console.print("no runs recorded")
        return
    table = Table(box=None, pad_edge=False)
    for column in ("WHEN", "NAME", "STATUS", "EXIT", "DURATION", "HOST", "RUN ID", "COMMAND"):
        table.add_column(column)
    colours = {"succeeded": "green", "failed": "red", "lost": "bold red", "timeout": "red", "abandoned": "yellow"}
    for row in rows:
        exit_text = str(row["exit_code"]) if row["exit_code"] is not None else (
            f"sig {row['signal']}" if row["signal"] is not None else "-"
        )
        style = colours.get(row["status"])
        table.add_row(
            row["started_at"],
            row["name"],
            f"[{style}]{row['status']}[/]" if style else row["status"],
            exit_text,
            _seconds(row["duration_s"]),
            row["host"],
            row["run_id"][:8],
            _short(row["command"]),
        )
    console.print(table)
