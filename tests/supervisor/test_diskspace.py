"""The directories the agent writes, watched for room (rules: supervisor/diskspace.py).

"Full" is a threshold above what the filesystem has free; tests/faults/test_disk.py
fills a real tmpfs under the running agent.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agentpool.supervisor.diskspace import DiskSpace, WatchedDir
from tests.support.agents import series

HUGE = 1 << 62


def _metrics(disk: DiskSpace) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(disk)
    return series(generate_latest(registry).decode())


def test_a_full_directory_is_said_once_and_exported_until_it_has_room(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    watched = WatchedDir("STATE_DIR", str(tmp_path), HUGE, "nodes stay uncapped")
    gone = WatchedDir("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "gone"), 0, "")
    disk = DiskSpace([watched, gone])
    caplog.set_level(logging.INFO, "agentpool.supervisor.diskspace")
    disk.look()
    disk.look()
    full = [r for r in caplog.records if "is full" in r.getMessage()]
    assert len(full) == 1, caplog.text
    assert f"STATE_DIR {tmp_path} is full" in full[0].getMessage()
    assert "nodes stay uncapped" in full[0].getMessage()
    read = _metrics(disk)
    assert read[("agentpool_dir_full", (("dir", "STATE_DIR"),))] == 1.0
    assert read[("agentpool_dir_free_bytes", (("dir", "STATE_DIR"),))] > 0
    # A directory that cannot be looked at is not called full, and has no free figure.
    assert read[("agentpool_dir_full", (("dir", "PROMETHEUS_MULTIPROC_DIR"),))] == 0.0
    assert ("agentpool_dir_free_bytes", (("dir", "PROMETHEUS_MULTIPROC_DIR"),)) not in read

    disk.dirs = [WatchedDir("STATE_DIR", str(tmp_path), 0, "")]
    disk.look()
    assert f"STATE_DIR {tmp_path} has room again" in caplog.text
    assert _metrics(disk)[("agentpool_dir_full", (("dir", "STATE_DIR"),))] == 0.0
