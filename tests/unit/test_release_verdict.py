"""What a release's answer does to a run's outcome and to its fleet row (README "A run that lost its
lock says so"), and the split row the release script chooses from."""

from __future__ import annotations

import json

from lockrun.core.record import RELEASE_DECIDES, Status, row_json_parts
from lockrun.run.outcome import LOST_AT_RELEASE_NOTE, Outcome, released_as


def test_a_release_that_found_the_lock_gone_flags_and_notes_the_run() -> None:
    ran = Outcome(0, Status.SUCCEEDED, note="--min-hold keeps the lock taken until then")
    assert released_as(ran, None) == ran  # no answer: nothing is claimed either way
    assert released_as(ran, True).lock_lost_at_release is False
    lost = released_as(ran, False)
    assert lost.lock_lost_at_release is True and lost.exit_code == 0 and lost.status == Status.SUCCEEDED
    assert lost.note == f"--min-hold keeps the lock taken until then; {LOST_AT_RELEASE_NOTE}"


def test_a_lease_already_lost_is_flagged_but_not_noted_again() -> None:
    continued = Outcome(0, Status.SUCCEEDED, note="lease lost at 2026-12-01T00:00:00Z: ...", lease_lost=True)
    assert released_as(continued, False) == continued._replace(lock_lost_at_release=True)


def test_the_row_splits_where_the_release_decides() -> None:
    row: dict[str, object] = {"run_id": "r1", "name": "n", "backend": "redis", "status": "succeeded",
                              "fencing_token": 1796118933621548, "note": None, "lock_lost_at_release": False,
                              "duration_s": 0.25}
    lost_row = {**row, "note": "gone", "lock_lost_at_release": True}
    head, kept = row_json_parts(row)
    lost_head, lost = row_json_parts(lost_row)
    assert head == lost_head
    whole = json.loads(head + kept)
    assert {k: v for k, v in whole.items() if v is not None} == {
        k: v for k, v in row.items() if v is not None and k not in ("name", "backend")}  # the lock's key names both
    assert whole["lock_lost_at_release"] is False
    assert json.loads(head + lost) == {**json.loads(head + kept), "note": "gone", "lock_lost_at_release": True}
    assert json.loads(head + lost)["fencing_token"] == 1796118933621548  # exact: no JSON library in Lua
    assert set(RELEASE_DECIDES) <= set(json.loads(head + kept))
    assert not any(json.loads("".join(row_json_parts({}))).values())  # a row of nothing is still one object
