"""How a run ended, in one table: what lockrun exits with and what the ledger says.

The inputs are how the command ended (its exit code or signal) and why lockrun stopped
it, if it did (a lost lease, a ``--replace`` by another run, ``--timeout``, a forwarded
signal that ran past ``--kill-after``); the result is lockrun's exit code (README "Exit codes"), the ledger
status (docs/operating.md "The run ledger") and a note. Pure: no process, no clock, no backend,
so the table can be checked without running anything.

The busy message is here too: it is what a busy outcome says, on the terminal and in a ping.
So is what a release's answer makes of an outcome (:func:`released_as`), which the runner and the
Python API (api/) share.
"""

from __future__ import annotations

import signal
from datetime import datetime, timezone
from typing import TYPE_CHECKING, NamedTuple

from lockrun.core.clock import age_s, exact_duration, human_duration, reading_clock
from lockrun.core.defaults import DEFAULT_KILL_AFTER
from lockrun.core.errors import ExitCode
from lockrun.core.record import Status

if TYPE_CHECKING:
    from lockrun.backends.values import Holder, TooSoon
    from lockrun.run.supervisor import ChildExit


class Outcome(NamedTuple):
    exit_code: int  # what lockrun exits with
    status: Status
    command_exit: int | None = None
    signal: int | None = None
    fencing_token: int | None = None
    error: str | None = None
    note: str | None = None
    holder: Holder | None = None  # who kept us out, for a busy outcome
    output_tail: str | None = None
    # The tail is a failed run's, kept by default: for this host's ledger only, never the fleet
    # record, pings or webhooks, which only --capture-tail sends it to (docs/operating.md "Output").
    tail_private: bool = False
    lease_lost: bool = False  # the lease was lost while the command ran (stopped for it or not)
    # The release found the lock no longer this run's (True), released it (False), or was not
    # made or did not reach the backend (None): docs/guarantees.md "A run that lost its lock says so".
    lock_lost_at_release: bool | None = None

    def noted(self, note: str) -> Outcome:
        """This outcome with ``note`` added after the note it has."""
        return self._replace(note=f"{self.note}; {note}" if self.note else note)


class Stop(NamedTuple):
    """Why lockrun stopped the command, as the main loop (watch.py) saw it."""

    reason: Status | None = None  # LOST (a lost lease or a --replace) or TIMEOUT; None: it ended by itself or of
    # a forwarded signal
    lost_note: str | None = None  # the lease was lost and the command went on (--on-lost continue), or was lost
    # after the command exited, while what it left behind was being stopped
    escalated_after: int | None = None  # the forwarded signal after which SIGKILL was scheduled


def command_outcome(
    child: ChildExit,
    stop: Stop,
    *,
    preempted: bool = False,
    fencing_token: int | None = None,
    kill_after: float = DEFAULT_KILL_AFTER,
    backstop_error: str | None = None,
    output_tail: str | None = None,
    strays_note: str | None = None,
    success_exits: tuple[int, ...] = (),
) -> Outcome:
    """The outcome of a command that ran under the lease.

    ``preempted``: the keeper found a ``--replace`` request, so a lost lease reads
    ``preempted``. ``backstop_error``: why the run had no backstop timer, noted on the row.
    ``strays_note``: what the command left behind (or that left its group) and lockrun stopped
    before the release (strays.py); noted, and never a change of exit code: that is the command's.
    ``success_exits`` (``--success-exit``): exit codes that count as success; the row keeps the
    command's code, lockrun exits 0 (docs/operating.md "Retries and jitter").
    """
    exit_code: int
    note = stop.lost_note
    if stop.reason == Status.LOST:
        exit_code, status, note = ExitCode.LOST, Status.PREEMPTED if preempted else Status.LOST, None
    elif stop.reason == Status.TIMEOUT:
        exit_code, status, note = ExitCode.TIMEOUT, Status.TIMEOUT, None
    elif child.signal is not None:
        exit_code, status = child.shell_code, Status.KILLED
    elif child.returncode in success_exits:
        exit_code, status = ExitCode.OK, Status.SUCCEEDED
    else:
        exit_code, status = child.shell_code, Status.SUCCEEDED if child.returncode == 0 else Status.FAILED
    outcome = Outcome(exit_code, status, command_exit=child.returncode, signal=child.signal,
                      fencing_token=fencing_token, note=note, output_tail=output_tail,
                      lease_lost=stop.reason == Status.LOST or stop.lost_note is not None)
    if stop.escalated_after is not None and child.signal == signal.SIGKILL:
        signum = stop.escalated_after
        outcome = outcome.noted(f"killed --kill-after {kill_after:g}s after signal {signum} was forwarded")
    if strays_note:
        outcome = outcome.noted(strays_note)
    if backstop_error:
        outcome = outcome.noted(f"no backstop timer: {backstop_error}")
    return outcome


#: The note of a run whose release found the lock no longer its own (docs/guarantees.md "A run that lost its
#: lock says so"); a run whose lease was already lost says that in its status or note instead.
LOST_AT_RELEASE_NOTE = ("the lock was no longer this run's at its release (expired, evicted, stolen or cleared):"
                        " another run may have overlapped it")


def released_as(outcome: Outcome, released: bool | None) -> Outcome:
    """``outcome`` as a release that answered ``released`` leaves it (None: no answer)."""
    if released is None:
        return outcome
    if released:
        return outcome._replace(lock_lost_at_release=False)
    lost = outcome._replace(lock_lost_at_release=True)
    return lost if outcome.lease_lost else lost.noted(LOST_AT_RELEASE_NOTE)


def busy_message(holder: Holder, backend: str | None = None) -> str:
    """The line operators ask for on a skip: who, for how long, until when, how to clear it;
    ``backend`` (for -v) says where the lock lives, since `lockrun status` must look there too."""
    age = human_duration(age_s(holder.started_at, reading_clock(holder.heartbeat_at, holder.heartbeat_age_s)))
    run = f", run {holder.run_id[:8]}" if holder.run_id else ""
    busy = f"lock {holder.name!r} is busy" + (f" ({backend})" if backend else "")
    who = f"{busy}: held by {holder.host or '?'}:{holder.pid or '?'} for {age}{run}"
    if holder.slotted:
        who = f"{busy}: every --slots slot is taken, e.g. by {holder.host or '?'}:" \
              f"{holder.pid or '?'} for {age}{run}"
    if holder.problem:
        force = "" if holder.foreign else "--force "
        return (
            f"lock {holder.name!r} is busy, and what holds it is malformed ({holder.problem});"
            f" see lockrun status {holder.name}; lockrun unlock {force}{holder.name} clears it"
        )
    if holder.cooling_until:
        return (
            f"{busy}: its last run is over, but --min-hold keeps it taken for another"
            f" {human_duration(holder.ttl_remaining_s)}; lockrun unlock {holder.name} ends that"
        )
    if holder.retry_at:  # --retry: its command failed and runs again at retry_at, under the same lock
        who += f", between --retry attempts (attempt {holder.attempt or '?'} at {holder.retry_at})"
    if holder.ttl_remaining_s is None:  # a kernel lock: it cannot outlive its holder
        return f"{who}; it is freed when that process exits"
    return (
        f"{who}, lease expires in {human_duration(holder.ttl_remaining_s)};"
        f" if that holder crashed: lockrun unlock {holder.name}"
    )


SECONDS_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # a note's times: to the second, as people read them


def too_soon_note(got: TooSoon, once_every: float) -> str:
    """The ledger note of a --once-every skip: the last success, and when the name is next due
    (both by the clock that judged it: the Redis server's, or this host's)."""
    started = datetime.fromtimestamp(got.success_at, timezone.utc).strftime(SECONDS_FORMAT)
    due = datetime.fromtimestamp(got.success_at + once_every, timezone.utc).strftime(SECONDS_FORMAT)
    age = got.now - got.success_at
    # A clock set back since the success puts it in the future: still recent (never run early), said so.
    when = f"{human_duration(age)} ago" if age >= 0 else f"{human_duration(-age)} in the future: a clock was set back"
    return f"--once-every {exact_duration(once_every)}: the last success started {started} ({when}); next due {due}"
