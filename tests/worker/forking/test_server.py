"""The lean fork server with real workers: exit codes, a dead server, stopping it."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection, Pipe
from pathlib import Path

import psutil
import pytest

from agentpool.config.settings import Settings
from agentpool.sim.polling import wait_until
from agentpool.supervisor.forkclient import (
    LOST_EXIT_CODE,
    SPAWN_TIMEOUT_S,
    ForkedWorker,
    ForkServer,
    ForkServerStarting,
)
from agentpool.worker.protocol import Stopped, StopWorker, TickReport

DEADLINE_S = 30.0
"""A worker forks and ticks in well under a second here; 30 s is for a loaded CI box."""


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ForkServer]:
    # The server and its workers inherit the environment: the workers' metrics go here.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    fork_server = ForkServer()
    assert fork_server.wait_ready(60.0)
    try:
        yield fork_server
    finally:
        fork_server.stop()


def spawn(server: ForkServer, node: str) -> tuple[ForkedWorker, Connection]:
    ours, theirs = Pipe(duplex=True)
    try:
        settings = Settings(reconcile_interval_s=0.2).worker()
        worker = server.spawn(node, settings, None, None, theirs.fileno())
    finally:
        theirs.close()
    return worker, ours


def first_report(conn: Connection) -> TickReport:
    assert conn.poll(DEADLINE_S)
    report = conn.recv()
    assert isinstance(report, TickReport)
    return report


def exit_code(worker: ForkedWorker) -> int:
    ready, _, _ = select.select([worker.sentinel], [], [], DEADLINE_S)
    assert ready, "the sentinel never fired"
    code = worker.exitcode
    assert code is not None
    return code


def test_a_worker_ticks_and_its_exit_status_comes_back(server: ForkServer) -> None:
    worker, conn = spawn(server, "n1")
    assert first_report(conn).node == "n1"
    assert worker.exitcode is None
    assert psutil.Process(worker.pid).ppid() == server.pid
    conn.send(StopWorker())
    assert exit_code(worker) == 0
    assert isinstance(conn.recv(), Stopped)
    worker.close()

    killed, conn2 = spawn(server, "n2")
    first_report(conn2)
    killed.kill()
    assert exit_code(killed) == -signal.SIGKILL
    killed.close()
    # The server reaped both: no zombie left behind under it.
    assert psutil.Process(server.pid).children() == []


def test_a_dead_fork_server_takes_its_workers_and_is_replaced(server: ForkServer) -> None:
    worker, conn = spawn(server, "n1")
    first_report(conn)
    old = server.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    # The status pipe closes with the server: reported as lost, like multiprocessing did.
    assert exit_code(worker) == LOST_EXIT_CODE
    # The worker itself follows on its parent-death signal.
    pid = worker.pid
    assert pid is not None
    wait_until(lambda: not psutil.pid_exists(pid) or _zombie(pid), DEADLINE_S)
    # The next spawn starts a new server, which is not ready at once: no spawn waits for it.
    with pytest.raises(ForkServerStarting):
        spawn(server, "n1")
    assert server.wait_ready(60.0)
    again, conn2 = spawn(server, "n1")
    assert server.pid != old
    first_report(conn2)
    again.terminate()
    assert exit_code(again) == 0  # SIGTERM: restores the host, exits cleanly


def test_stop_ends_the_server(server: ForkServer) -> None:
    pid = server.pid
    assert pid is not None
    server.stop()
    assert server.pid is None
    assert not psutil.pid_exists(pid)  # reaped, not a zombie


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_stuck_fork_server_cannot_stall_a_spawn_and_is_replaced(server: ForkServer) -> None:
    # A server that stops answering (here SIGSTOP; a fork that never returns looks the
    # same): the spawn gives up within its timeout instead of waiting forever, and the
    # server is killed so that a new one takes over.
    old = server.pid
    assert old is not None
    os.kill(old, signal.SIGSTOP)
    try:
        began = time.monotonic()
        with pytest.raises(OSError, match="no answer within"):
            spawn(server, "n1")
        assert time.monotonic() - began < 5 * SPAWN_TIMEOUT_S
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(old, signal.SIGCONT)
    wait_until(lambda: not psutil.pid_exists(old) or _zombie(old), DEADLINE_S)
    assert server.wait_ready(60.0)
    assert server.pid != old
    worker, conn = spawn(server, "n1")
    first_report(conn)
    worker.terminate()
    assert exit_code(worker) == 0


def test_the_ready_message_carries_the_preload_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setenv("AGENTPOOL_IMMORTALIZE", "0")
    fresh = ForkServer()
    with caplog.at_level(logging.INFO, logger="agentpool.supervisor.forkclient"):
        try:
            assert fresh.wait_ready(60.0)
        finally:
            fresh.stop()
    lines = [r.getMessage() for r in caplog.records]
    assert any("warm-up: every tick path taken" in line for line in lines), lines
    assert any("immortal heap skipped: AGENTPOOL_IMMORTALIZE=0" in line for line in lines)
    assert any("heap frozen" in line for line in lines)
