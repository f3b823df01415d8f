"""The lean fork server with real workers: exit codes, a dead server, stopping it."""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Iterator
from multiprocessing.connection import Connection, Pipe
from pathlib import Path

import psutil
import pytest

from agentpool.config.settings import Settings
from agentpool.sim.polling import wait_until
from agentpool.supervisor.forkclient import LOST_EXIT_CODE, ForkedWorker, ForkServer
from agentpool.worker.protocol import Stopped, StopWorker, TickReport

DEADLINE_S = 30.0
"""A worker forks and ticks in well under a second here; 30 s is for a loaded CI box."""


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ForkServer]:
    # The server and its workers inherit the environment: the workers' metrics go here.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    fork_server = ForkServer()
    fork_server.ensure_running()
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
