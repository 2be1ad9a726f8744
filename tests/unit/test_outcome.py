"""The outcome table (outcome.py): how the command ended and why lockrun stopped it -> lockrun's
exit code, the ledger status and the note; and where that lands in the run's row (exit_status)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockrun.core.errors import ExitCode
from lockrun.core.record import Status
from lockrun.ledger.store import RunRecord
from lockrun.render.tables import exit_text
from lockrun.run.journal import RunJournal
from lockrun.run.outcome import Outcome, Stop, command_outcome
from lockrun.run.supervisor import ChildExit
from tests.unit.fakes import Reports

EXIT_0 = ChildExit(returncode=0, signal=None)
EXIT_3 = ChildExit(returncode=3, signal=None)
BY_TERM = ChildExit(returncode=None, signal=15)
BY_KILL = ChildExit(returncode=None, signal=9)
CHILDREN = {"exit 0": EXIT_0, "exit 3": EXIT_3, "SIGTERM": BY_TERM, "SIGKILL": BY_KILL}

# (why lockrun stopped it, how it ended, preempted) -> (lockrun's exit code, ledger status)
TABLE: dict[tuple[Status | None, str, bool], tuple[int, Status]] = {
    (None, "exit 0", False): (0, Status.SUCCEEDED),
    (None, "exit 3", False): (3, Status.FAILED),
    (None, "SIGTERM", False): (143, Status.KILLED),
    (None, "SIGKILL", False): (137, Status.KILLED),
    # A --replace request seen under --on-lost continue: the command's own ending counts.
    (None, "exit 0", True): (0, Status.SUCCEEDED),
    (None, "exit 3", True): (3, Status.FAILED),
    (None, "SIGTERM", True): (143, Status.KILLED),
    (None, "SIGKILL", True): (137, Status.KILLED),
    # Stopped for a lost lease: however it ended.
    (Status.LOST, "exit 0", False): (76, Status.LOST),
    (Status.LOST, "exit 3", False): (76, Status.LOST),
    (Status.LOST, "SIGTERM", False): (76, Status.LOST),
    (Status.LOST, "SIGKILL", False): (76, Status.LOST),
    (Status.LOST, "exit 0", True): (76, Status.PREEMPTED),
    (Status.LOST, "exit 3", True): (76, Status.PREEMPTED),
    (Status.LOST, "SIGTERM", True): (76, Status.PREEMPTED),
    (Status.LOST, "SIGKILL", True): (76, Status.PREEMPTED),
    # Stopped for --timeout: however it ended.
    (Status.TIMEOUT, "exit 0", False): (124, Status.TIMEOUT),
    (Status.TIMEOUT, "exit 3", False): (124, Status.TIMEOUT),
    (Status.TIMEOUT, "SIGTERM", False): (124, Status.TIMEOUT),
    (Status.TIMEOUT, "SIGKILL", False): (124, Status.TIMEOUT),
    (Status.TIMEOUT, "exit 0", True): (124, Status.TIMEOUT),
    (Status.TIMEOUT, "exit 3", True): (124, Status.TIMEOUT),
    (Status.TIMEOUT, "SIGTERM", True): (124, Status.TIMEOUT),
    (Status.TIMEOUT, "SIGKILL", True): (124, Status.TIMEOUT),
}


@pytest.mark.parametrize("case", list(TABLE), ids=lambda case: f"{case[0]}-{case[1]}-preempted={case[2]}")
def test_every_combination(case: tuple[Status | None, str, bool]) -> None:
    reason, ending, preempted = case
    child = CHILDREN[ending]
    outcome = command_outcome(child, Stop(reason), preempted=preempted, fencing_token=7)
    assert (outcome.exit_code, outcome.status) == TABLE[case]
    # The command's own ending is kept as it was, whatever lockrun exits with.
    assert (outcome.command_exit, outcome.signal) == (child.returncode, child.signal)
    assert outcome.fencing_token == 7
    assert outcome.lease_lost is (reason == Status.LOST)
    assert outcome.note is None
    assert outcome.error is None


def test_the_exit_codes_are_the_documented_ones() -> None:
    assert (ExitCode.OK, ExitCode.USAGE, ExitCode.UNAVAILABLE, ExitCode.BUSY, ExitCode.LOST, ExitCode.CONFIG,
            ExitCode.TIMEOUT, ExitCode.INTERNAL, ExitCode.NOT_EXECUTABLE, ExitCode.NOT_FOUND,
            ExitCode.SIGNAL_BASE) == (0, 2, 69, 75, 76, 78, 124, 125, 126, 127, 128)


def test_on_lost_continue_keeps_the_commands_result_and_notes_the_loss() -> None:
    note = "lease lost at 2026-11-29T08:57:03.000000Z: no renewal succeeded for 21.9s (Connection refused)"
    outcome = command_outcome(EXIT_0, Stop(None, lost_note=note))
    assert (outcome.exit_code, outcome.status, outcome.note, outcome.lease_lost) == (0, Status.SUCCEEDED, note, True)
    failed = command_outcome(EXIT_3, Stop(None, lost_note=note))
    assert (failed.exit_code, failed.status, failed.lease_lost) == (3, Status.FAILED, True)


def test_a_kill_after_a_forwarded_signal_is_noted() -> None:
    outcome = command_outcome(BY_KILL, Stop(None, escalated_after=15), kill_after=2.5)
    assert (outcome.exit_code, outcome.status) == (137, Status.KILLED)
    assert outcome.note == "killed --kill-after 2.5s after signal 15 was forwarded"


def test_a_command_that_died_of_the_forwarded_signal_itself_has_no_note() -> None:
    outcome = command_outcome(BY_TERM, Stop(None, escalated_after=15))
    assert (outcome.exit_code, outcome.status, outcome.note) == (143, Status.KILLED, None)


def test_a_run_without_a_backstop_says_so_after_any_other_note() -> None:
    outcome = command_outcome(EXIT_0, Stop(None, lost_note="lease lost at X: why"),
                              backstop_error="timer_create failed: Operation not permitted")
    assert outcome.note == "lease lost at X: why; no backstop timer: timer_create failed: Operation not permitted"
    alone = command_outcome(EXIT_0, Stop(None), backstop_error="timer_create failed: EPERM")
    assert alone.note == "no backstop timer: timer_create failed: EPERM"


def test_the_output_tail_goes_with_the_outcome() -> None:
    assert command_outcome(EXIT_3, Stop(None), output_tail="last words\n").output_tail == "last words\n"


def test_noted_appends() -> None:
    outcome = Outcome(exit_code=0, status=Status.SUCCEEDED)
    assert outcome.noted("first").note == "first"
    assert outcome.noted("first").noted("second").note == "first; second"
    assert outcome.note is None  # an outcome is a value: noted makes a new one


# -- into the run's row: exit_status is what cron saw -----------------------------------------------


@pytest.fixture
def journal(tmp_path: Path) -> RunJournal:
    record = RunRecord(run_id="ab" * 16, name="nightly", command=["backup"], backend="local",
                       started_at="2026-11-29T08:57:03.000000Z")
    return RunJournal(tmp_path / "never-opened.db", record, report=Reports())


@pytest.mark.parametrize("outcome,row,shown", [
    (command_outcome(BY_TERM, Stop(Status.TIMEOUT)), ("timeout", None, 15, 124), "124 (sig 15)"),
    (command_outcome(EXIT_0, Stop(Status.LOST)), ("lost", 0, None, 76), "76 (cmd 0)"),
    (command_outcome(EXIT_3, Stop(None)), ("failed", 3, None, 3), "3"),
    (command_outcome(BY_KILL, Stop(None)), ("killed", None, 9, 137), "137 (sig 9)"),
    (Outcome(exit_code=75, status=Status.BUSY, note="held by web2:4242"), ("busy", None, None, 75), "75"),
    (Outcome(exit_code=0, status=Status.DUPLICATE), ("duplicate", None, None, 0), "0"),
    (Outcome(exit_code=69, status=Status.UNAVAILABLE, error="Connection refused"),
     ("unavailable", None, None, 69), "69"),
], ids=["timeout", "lost", "failed", "killed", "busy", "duplicate", "unavailable"])
def test_the_row_keeps_the_commands_code_and_lockruns_exit_status(
    journal: RunJournal, outcome: Outcome, row: tuple[str, int | None, int | None, int], shown: str,
) -> None:
    written = journal.row(outcome)
    assert (written["status"], written["exit_code"], written["signal"], written["exit_status"]) == row
    assert exit_text(written) == shown  # the history table's EXIT column
    assert written["note"] == outcome.note and written["error"] == outcome.error
    assert written["duration_s"] is None  # the command never started in this journal
