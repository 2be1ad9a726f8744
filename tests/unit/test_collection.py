"""The collector held off during the command's start-up, and only then (system/collection.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from lockrun.system import collection


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()
    collection._held = False


def test_start_up_holds_the_collector_off_then_freezes_what_it_made_and_resumes() -> None:
    collection.hold_for_startup()
    assert not gc.isenabled()
    made_at_start_up = [object()]
    collection.resume_after_startup()
    assert gc.isenabled() and gc.get_freeze_count() > 0
    assert made_at_start_up  # frozen, not freed
    frozen = gc.get_freeze_count()
    collection.resume_after_startup()  # a second resume (a --retry attempt's backend) changes nothing
    assert gc.get_freeze_count() == frozen


def test_a_process_that_never_held_it_off_is_left_as_it_is() -> None:
    collection.resume_after_startup()  # lockrun as a library: no freeze, the collector untouched
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()  # a program that turned it off itself keeps it off
    collection.hold_for_startup()
    collection.resume_after_startup()
    assert not gc.isenabled() and gc.get_freeze_count() == 0
