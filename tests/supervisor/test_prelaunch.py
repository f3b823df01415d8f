"""The fork server launched before the supervisor's heavy imports, with what it inherits."""

from __future__ import annotations

import logging
import os
import resource
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from agentpool.config.settings import DiagnosticsSettings
from agentpool.errors import ConfigError
from agentpool.supervisor.forkclient import SERVER_MODULE
from agentpool.supervisor.prelaunch import node_capacity, prelaunch

READY_S = 120.0
"""The preload takes about a second here; two minutes is for a loaded CI box."""


def _fork_servers() -> list[psutil.Process]:
    return [
        child for child in psutil.Process().children()
        if SERVER_MODULE in " ".join(child.cmdline())
    ]


def test_the_fork_server_inherits_the_metrics_dir_and_is_stopped_with_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    (tmp_path / "gauge_livesum_old.db").write_bytes(b"stale")
    early = prelaunch(str(tmp_path))
    try:
        assert early.fork_server.wait_ready(READY_S)
        server = psutil.Process(early.fork_server.pid)
        assert server.environ()["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path)
        assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path)
        assert not list(tmp_path.glob("*.db"))  # the last run's files are gone
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert early.capacity == node_capacity(soft)
        assert early.private_metrics is False
    finally:
        early.close()
    assert not server.is_running()
    assert tmp_path.is_dir()  # configured: never removed


def test_the_fork_server_lays_out_its_heap_as_the_diagnostics_say(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    off = DiagnosticsSettings(pack_code=False, immortalize=False, fill_holes=False)
    with caplog.at_level(logging.INFO, logger="agentpool.supervisor.forkclient"):
        early = prelaunch(None, off)
        try:
            assert early.fork_server.wait_ready(READY_S)
        finally:
            early.close()
    report = [r.getMessage().partition("): ")[2] for r in caplog.records]
    assert "code packing skipped: AGENTPOOL_PACK_CODE=false" in report
    assert "immortal heap skipped: AGENTPOOL_IMMORTALIZE=false" in report
    assert not [line for line in report if line.startswith("holes ")]
    assert report[-1].startswith("heap frozen: ")


def test_a_private_metrics_dir_is_removed_on_close(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    early = prelaunch(None)
    try:
        assert early.private_metrics
        assert Path(early.metrics_dir).is_dir()
    finally:
        early.close()
    assert not Path(early.metrics_dir).exists()
    assert not _fork_servers()


def test_an_unusable_metrics_dir_fails_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    with pytest.raises(ConfigError) as caught:
        prelaunch(str(blocker / "metrics"))
    assert caught.value.variable == "PROMETHEUS_MULTIPROC_DIR"
    assert not _fork_servers()
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ


def test_the_fork_server_runs_before_the_kubernetes_client_is_imported() -> None:
    # What makes the overlap: the command line imports this module, and the server runs,
    # before the supervisor's heavy imports begin. In a fresh interpreter, as a pod starts.
    script = (
        "import sys\n"
        "from agentpool.supervisor.prelaunch import prelaunch\n"
        "early = prelaunch(None)\n"
        "print('kubernetes' in sys.modules, early.fork_server.pid is not None)\n"
        "early.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=READY_S).stdout.split()
    assert out == ["False", "True"]
