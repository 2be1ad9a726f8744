"""One status vocabulary (record.Status): every status is drawn, and the derived sets agree."""

from __future__ import annotations

from lockrun.config.values import NOTIFY_STATUSES
from lockrun.core.record import FINAL_STATUSES, IN_PROGRESS, NOT_A_RUN, Status
from lockrun.render.tables import STATUS_STYLES, STYLE_HEX


def test_every_status_has_a_style_and_every_style_a_colour() -> None:
    assert set(STATUS_STYLES) == set(Status)
    assert {STATUS_STYLES[status] for status in Status} <= set(STYLE_HEX)


def test_the_statuses_a_run_can_end_in() -> None:
    assert set(Status) - set(FINAL_STATUSES) == {Status.RUNNING, Status.UNLOCKED, Status.ABANDONED}
    assert len(FINAL_STATUSES) == len(set(FINAL_STATUSES))
    assert tuple(status.value for status in FINAL_STATUSES) == NOTIFY_STATUSES
    assert {Status.BUSY, Status.DUPLICATE, Status.UNLOCKED, Status.PAUSED} == NOT_A_RUN
    assert {Status.RUNNING, Status.ABANDONED} == IN_PROGRESS


def test_a_status_reads_as_its_stored_word() -> None:
    assert f"{Status.PREEMPTED}" == "preempted"
    assert str(Status.FAILED) == "failed"
    assert Status("timeout") is Status.TIMEOUT
