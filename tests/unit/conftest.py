"""Fixtures of the unit layer: no Redis, no process, no real time (see fakes.py)."""

from __future__ import annotations

import pytest

from tests.unit.fakes import FakeBackend, FakeClock, Reports


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend(clock: FakeClock) -> FakeBackend:
    return FakeBackend(clock)


@pytest.fixture
def reports() -> Reports:
    return Reports()
