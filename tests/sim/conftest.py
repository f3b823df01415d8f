"""Fixtures the API server tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sim.recorder import Recorder


@pytest.fixture
def recorders() -> Iterator[list[Recorder]]:
    started: list[Recorder] = []
    yield started
    for rec in started:
        rec.stop()
