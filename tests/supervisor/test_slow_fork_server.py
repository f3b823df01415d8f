"""The supervisor's loop against a real fork server made slow: no turn waits past the bound.

The supervisor, its worker table and the fork server are real, and so are the
workers; the informers are not (their events are fed in), and the nodes have
no status to write.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agentpool.config.options import AgentMode
from agentpool.config.settings import Settings
from agentpool.kube.api import Resource
from agentpool.kube.informer import Relisted
from agentpool.sim.polling import wait_until
from agentpool.sim.throttle import SlowForks
from agentpool.supervisor.clusterview import ClusterView
from agentpool.supervisor.collaborators import Cluster, Reporting, Spawning
from agentpool.supervisor.echoes import EventFeed
from agentpool.supervisor.forkclient import ForkServer
from agentpool.supervisor.handles import ForkServerLauncher
from agentpool.supervisor.lifecycle import WorkerState
from agentpool.supervisor.loop import MAX_STARTS_PER_TURN, Supervisor
from agentpool.supervisor.loopio import LoopIO
from agentpool.supervisor.selfmetrics import ApiCounters, SupervisorCollector
from agentpool.worker.nodefiles import NodeFiles
from tests.support.fakeworkers import MANAGED, node
from tests.support.forking import widen_late_answers

DEADLINE_S = 60.0
"""64 workers start in about 2 s on a loaded 2-core box."""


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ForkServer]:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "metrics"))
    (tmp_path / "metrics").mkdir()
    fork_server = ForkServer()
    assert fork_server.wait_ready(DEADLINE_S)
    try:
        yield fork_server
    finally:
        fork_server.stop()


def test_a_slow_fork_server_holds_no_turn_past_the_spawn_bound(
    server: ForkServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = widen_late_answers(monkeypatch)  # resumed by SlowForks' thread: see the helper
    settings = Settings(mode=AgentMode.POOL, reconcile_interval_s=5.0, shutdown_timeout_s=10.0)
    (tmp_path / "state").mkdir()
    files = NodeFiles(str(tmp_path / "metrics"), str(tmp_path / "state"))
    io = LoopIO()
    supervisor = Supervisor(
        settings,
        Cluster(ClusterView(settings), EventFeed(io.wake), lambda: True),
        Spawning(ForkServerLauncher(server, settings.worker(), files), files),
        Reporting(SupervisorCollector(ApiCounters())),
        io,
    )
    names = [f"n{i:02d}" for i in range(MAX_STARTS_PER_TURN)]
    supervisor.feed(Relisted(Resource.NODES, [node(n, **MANAGED) for n in names]))
    pid = server.pid
    assert pid is not None
    try:
        # A fork takes 0.3 s: the first turn's batch of 64 would have held the loop for
        # about 20 s, and so would the next turn's restarts of the deferred nodes, one
        # spawn each. Every turn returns within the bound, and the server, slow but not
        # stuck, is kept.
        with SlowForks(pid, period_s=0.3):
            for _ in range(3):
                began = time.monotonic()
                supervisor.turn()
                took = time.monotonic() - began
                assert took < bound + 1.0, took
        handles = supervisor.workers
        assert set(handles) == set(names)
        assert any(h.state is WorkerState.DEFERRED for h in handles.values())
        assert server.pid == pid
        # Forking freely again, the deferred nodes start at the next turns, none counted as
        # failed or restarted, and every worker reports its first tick.
        wait_until(lambda: supervisor.turn() or all(
            h.state is WorkerState.RUNNING for h in handles.values()), DEADLINE_S)
        assert all((h.policy.failures, h.policy.restarts) == (0, 0) for h in handles.values())
    finally:
        supervisor.signals.put(signal.SIGTERM)
        supervisor.run()
        io.close()
    assert psutil.Process(pid).children() == []
