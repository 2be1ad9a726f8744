"""How a block's end becomes a run's outcome (api/ending.py): the ledger status, the exit status the
CLI would give the same end, and a note that names the exception's type, never its message."""

from __future__ import annotations

import pytest

from lockrun.api.ending import NotStarted, block_outcome, type_name
from lockrun.core.record import Status


class SyncError(Exception):
    pass


def outcome_of(error: BaseException | None, lost: str | None = None, *, flag: bool = False,
               lost_raised: bool = False) -> tuple[Status, int, int | None, int | None, str | None, bool]:
    o = block_outcome(error, lost=lost, raise_on_lost=not flag, lost_raised=lost_raised, fencing_token=7)
    assert o.fencing_token == 7
    return o.status, o.exit_code, o.command_exit, o.signal, o.note, o.lease_lost


@pytest.mark.parametrize(("error", "expected"), [
    (None, (Status.SUCCEEDED, 0, 0, None, None, False)),
    (SystemExit(0), (Status.SUCCEEDED, 0, 0, None, None, False)),
    (SystemExit(None), (Status.SUCCEEDED, 0, 0, None, None, False)),
    (ValueError("password=hunter2"), (Status.FAILED, 1, 1, None, "raised ValueError", False)),
    (SyncError("x"), (Status.FAILED, 1, 1, None, "raised tests.unit.test_api_ending.SyncError", False)),
    (SystemExit(3), (Status.FAILED, 3, 3, None, "raised SystemExit(3)", False)),
    (SystemExit(256 + 4), (Status.FAILED, 4, 4, None, "raised SystemExit(4)", False)),
    (SystemExit("bye"), (Status.FAILED, 1, 1, None, "raised SystemExit(1)", False)),
    (KeyboardInterrupt(), (Status.KILLED, 130, None, 2, "KeyboardInterrupt", False)),
])
def test_a_block_that_kept_its_lease(error: BaseException | None, expected: tuple[object, ...]) -> None:
    assert outcome_of(error) == expected


def test_a_block_given_up_as_it_got_the_lock_is_no_failure() -> None:
    # lock_async: the task was cancelled while the acquire's answer was on its way; nothing ran.
    outcome = block_outcome(NotStarted(), lost=None, raise_on_lost=True, lost_raised=False, fencing_token=7)
    assert (outcome.status, outcome.command_exit, outcome.fencing_token) == (Status.ERROR, None, 7)
    assert outcome.error == "cancelled before the block started (lock_async)"


def test_a_lost_lease_is_lost_whatever_the_block_did_after() -> None:
    assert outcome_of(None, "gone") == (Status.LOST, 76, None, None, "lease lost: gone", True)
    assert outcome_of(SyncError(), "gone") == (
        Status.LOST, 76, None, None, "lease lost: gone; the block raised tests.unit.test_api_ending.SyncError", True)
    assert outcome_of(KeyboardInterrupt(), "gone")[0] == Status.LOST


def test_on_lost_flag_records_what_the_block_did_and_that_the_lease_was_lost() -> None:
    # --on-lost continue's row: the block's own end, with a note.
    assert outcome_of(None, "gone", flag=True) == (Status.SUCCEEDED, 0, 0, None, "lease lost: gone", True)
    assert outcome_of(ValueError(), "gone", flag=True) == (
        Status.FAILED, 1, 1, None, "raised ValueError; lease lost: gone", True)
    # ... unless it stopped for it: its check() raised the lease's LeaseLost.
    assert outcome_of(ValueError(), "gone", flag=True, lost_raised=True)[:2] == (Status.LOST, 76)


def test_type_names() -> None:
    assert type_name(KeyError()) == "KeyError"
    assert type_name(SyncError()) == "tests.unit.test_api_ending.SyncError"
