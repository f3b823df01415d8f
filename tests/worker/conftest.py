"""Fixtures of the worker's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentpool.supervisor.forkclient import ForkServer


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ForkServer]:
    """A ready fork server; it and its workers inherit the environment, so the workers'
    metrics go to this test's directory."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    fork_server = ForkServer()
    assert fork_server.wait_ready(60.0)
    try:
        yield fork_server
    finally:
        fork_server.stop()
