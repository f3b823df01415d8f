"""A worker's fence (agentpool/worker/fence.py), in real workers forked by the fork server.

Each worker controls a sysfs-shaped RAPL tree (host control, as a pool node's
``SYSFS_ROOT/{node}``); the test plays the supervisor on the worker's pipe and
sends fences as it would, or stops sending them as a stopped supervisor does.
What is checked is the tree: a write that lands after the fence's write limit
would be one over another pod's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from multiprocessing.connection import Connection, Pipe, wait
from pathlib import Path
from typing import Any

import pytest

from agentpool.config.options import AgentMode, Membership
from agentpool.config.settings import ElasticSettings, Settings, WorkerSettings
from agentpool.pool.fence import FenceTimes
from agentpool.sim.sysfs.trees import intel_2socket
from agentpool.supervisor.forkclient import ForkedWorker, ForkServer
from agentpool.worker.protocol import EXIT_FENCED, Fence, Stopped, StopWorker, Ticked, TickReport
from tests.worker.fence import DEADLINE_S, NODE, inputs

PL1 = "devices/virtual/powercap/intel-rapl/intel-rapl:0/constraint_0_power_limit_uw"


def settings(root: Path, lease: bool) -> WorkerSettings:
    elastic = ElasticSettings(Membership.LEASE if lease else Membership.STATIC)
    return Settings(mode=AgentMode.POOL, reconcile_interval_s=0.2, elastic=elastic,
                    sysfs_root=str(root / "{node}"), pod_name="pool-1").worker()


class Worker:
    def __init__(self, server: ForkServer, root: Path, lease: bool) -> None:
        self.tree = intel_2socket(root / NODE)
        self.pl1 = root / NODE / PL1
        self.original = self.read()
        ours, theirs = Pipe(duplex=True)
        try:
            self.process: ForkedWorker = server.spawn(
                NODE, settings(root, lease), None, inputs(60), theirs.fileno())
        finally:
            theirs.close()
        self.conn: Connection = ours
        self.received: list[object] = []

    def read(self) -> int:
        return int(self.pl1.read_text())

    def fence(self, stop_in_s: float, write_for_s: float | None) -> FenceTimes:
        now = time.monotonic()
        times = FenceTimes(now + stop_in_s,
                           None if write_for_s is None else now + stop_in_s + write_for_s)
        self.conn.send(Fence(times))
        return times

    def drain(self, timeout: float = 0.0) -> None:
        while self.conn.poll(timeout):
            try:
                self.received.append(self.conn.recv())
            except EOFError:
                return
            timeout = 0.0

    def ticks(self) -> int:
        return sum(isinstance(m, TickReport | Ticked) for m in self.received)

    def wait_exit(self) -> int:
        ready = wait([self.process.sentinel], DEADLINE_S)
        assert ready, "the worker never exited"
        self.drain()
        code = self.process.exitcode
        assert code is not None
        return code

    def stopped(self) -> Stopped:
        (last,) = [m for m in self.received if isinstance(m, Stopped)]
        return last

    def close(self) -> None:
        self.conn.close()
        self.process.close()


@pytest.fixture
def make(server: ForkServer, tmp_path: Path) -> Iterator[Any]:
    made: list[Worker] = []

    def factory(lease: bool = True) -> Worker:
        worker = Worker(server, tmp_path, lease)
        made.append(worker)
        return worker

    yield factory
    for worker in made:
        if worker.process.exitcode is None:
            worker.process.kill()
        worker.close()


def test_a_lease_worker_does_nothing_before_its_first_fence(make: Any) -> None:
    worker = make(lease=True)
    worker.drain(1.0)
    assert worker.ticks() == 0
    assert worker.read() == worker.original
    worker.fence(stop_in_s=30.0, write_for_s=10.0)
    worker.drain(DEADLINE_S)
    assert worker.ticks() >= 1
    assert worker.read() == 60_000_000  # 60 W on each package
    worker.conn.send(StopWorker())
    assert worker.wait_exit() == 0
    assert worker.read() == worker.original  # a graceful stop restores


def test_past_its_fence_a_worker_restores_stops_ticking_and_says_why(make: Any) -> None:
    worker = make(lease=True)
    times = worker.fence(stop_in_s=1.5, write_for_s=10.0)
    worker.drain(DEADLINE_S)
    assert worker.read() == 60_000_000
    # No more fences come: the supervisor is stopped. The worker stops on its own.
    assert worker.wait_exit() == EXIT_FENCED
    assert time.monotonic() >= times.stop_at
    assert worker.read() == worker.original  # restored within its write limit
    stopped = worker.stopped()
    assert "fence passed" in stopped.reason
    assert stopped.problems == ()
    last_tick = max(i for i, m in enumerate(worker.received) if isinstance(m, TickReport | Ticked))
    assert last_tick < worker.received.index(stopped)


def test_a_fence_past_its_write_limit_writes_no_restore(make: Any) -> None:
    # The restore window is gone (another pod may own the node now): the cap stays as the
    # new owner may have set it, rather than be overwritten by a restore.
    worker = make(lease=True)
    worker.fence(stop_in_s=1.0, write_for_s=0.0)
    worker.drain(DEADLINE_S)
    assert worker.read() == 60_000_000
    assert worker.wait_exit() == EXIT_FENCED
    assert worker.read() == 60_000_000
    problems = worker.stopped().problems
    assert problems
    assert "not sent" in problems[0]


def test_a_worker_killed_after_its_write_limit_writes_no_restore(make: Any) -> None:
    # The stopped supervisor is killed (a liveness restart): its workers get SIGTERM from
    # their parent's death. One still running past its write limit must not restore.
    worker = make(lease=True)
    times = worker.fence(stop_in_s=30.0, write_for_s=0.0)
    worker.drain(DEADLINE_S)
    assert worker.read() == 60_000_000
    # Its write limit passed (here by a fence saying so; in life by the clock, during a
    # slow stop), and then the SIGTERM comes.
    worker.conn.send(Fence(FenceTimes(times.stop_at, time.monotonic() - 1.0)))
    worker.drain(0.5)
    worker.process.terminate()
    assert worker.wait_exit() == 0
    assert worker.read() == 60_000_000


def test_newer_fences_keep_it_going(make: Any) -> None:
    worker = make(lease=True)
    worker.fence(stop_in_s=1.0, write_for_s=5.0)
    began = time.monotonic()
    while time.monotonic() - began < 2.5:
        worker.fence(stop_in_s=1.0, write_for_s=5.0)  # renewals, every 0.2 s
        worker.drain(0.2)
    assert worker.process.exitcode is None
    assert worker.ticks() >= 3
    worker.conn.send(StopWorker())
    assert worker.wait_exit() == 0


def test_a_static_worker_whose_supervisor_went_silent_stops_acting(make: Any) -> None:
    worker = make(lease=False)
    worker.drain(DEADLINE_S)
    assert worker.ticks() >= 1  # a static worker acts before any fence
    worker.fence(stop_in_s=1.0, write_for_s=None)
    assert worker.wait_exit() == EXIT_FENCED
    assert worker.read() == worker.original  # nobody else can own it: restored
    assert "no word from the supervisor" in worker.stopped().reason
