"""When workers tick (agentpool/worker/cadence.py): on the grid every worker shares.

The rule itself, then real workers forked by the fork server 0.4 and 0.7 s
after a grid time: after their first tick, which is at once, their
ticks arrive just after the grid's times, not at their own start's phase.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import select
import threading
import time
from multiprocessing.connection import Connection, Pipe
from pathlib import Path

import pytest

from agentpool.config.options import AgentMode
from agentpool.config.settings import Settings
from agentpool.sim.sysfs.trees import intel_2socket
from agentpool.supervisor.forkclient import ForkedWorker, ForkServer
from agentpool.worker.cadence import next_tick
from agentpool.worker.protocol import StopWorker, Ticked, TickReport

from .test_fence import DEADLINE_S, inputs

INTERVAL_S = 1.0
SPAWN_PHASES = (0.4, 0.7)
"""Where in the interval the workers start: far from the grid, so that a worker keeping
its own phase would tick 0.4 or 0.7 s after each grid time."""
LATE_S = 0.25
"""How long after its grid time a tick's report may arrive here. Measured: 2 to 8 ms (a
host tick, its report, the reading thread's wake-up; 8 beside a CI run); thirty times
that leaves room for a loaded machine and is still well short of the spawn phases."""


@pytest.mark.parametrize("interval", [0.5, 1.0, 20.0])
def test_the_next_tick_is_a_grid_time_between_half_and_one_and_a_half_intervals_on(
    interval: float,
) -> None:
    for started in (0.0, 3 * interval, 3.2 * interval, 3.5 * interval, 3.51 * interval,
                    1234.567, 10 ** 6 + 0.3):
        due = next_tick(started, interval)
        assert due / interval == pytest.approx(round(due / interval), abs=1e-6)
        assert interval / 2 < due - started <= 1.5 * interval + 1e-9


def test_on_time_ticks_keep_the_interval_and_a_late_one_skips_rather_than_bursts() -> None:
    assert next_tick(7.5, 0.0) == 7.5  # no interval (the warm-up rehearsal): at once
    assert next_tick(40.0, 20.0) == 60.0
    assert next_tick(40.001, 20.0) == 60.0  # a moment late: still the next grid time
    assert next_tick(51.0, 20.0) == 80.0  # more than half an interval late: one skipped
    assert next_tick(45.0, 20.0) == 60.0  # new inputs at 45 s ticked at once: 60 s next


class Arrivals(threading.Thread):
    """Reads a worker's pipe as it is written, noting when each tick's report arrives."""

    def __init__(self, conn: Connection) -> None:
        super().__init__(daemon=True)
        self.conn = conn
        self.times: list[float] = []

    def run(self) -> None:
        with contextlib.suppress(EOFError, OSError):
            while True:
                if isinstance(self.conn.recv(), TickReport | Ticked):
                    self.times.append(time.monotonic())


def test_two_workers_started_apart_tick_on_the_same_grid(
    server: ForkServer, tmp_path: Path
) -> None:
    settings = Settings(mode=AgentMode.POOL, reconcile_interval_s=INTERVAL_S,
                        sysfs_root=str(tmp_path / "{node}")).worker()
    workers: list[tuple[Connection, ForkedWorker, Arrivals]] = []
    trees = contextlib.ExitStack()
    try:
        for index, phase in enumerate(SPAWN_PHASES):
            node = f"cadence-{index}"
            trees.enter_context(intel_2socket(tmp_path / node))
            time.sleep((phase - time.monotonic() % INTERVAL_S) % INTERVAL_S)
            ours, theirs = Pipe(duplex=True)
            try:
                process = server.spawn(node, settings, None, inputs(120, node), theirs.fileno())
            finally:
                theirs.close()
            arrivals = Arrivals(ours)
            arrivals.start()
            workers.append((ours, process, arrivals))
        time.sleep(4 * INTERVAL_S)  # the ticks to look at, not a wait for anything
    finally:
        for conn, process, _ in workers:
            conn.send(StopWorker())
            ready, _, _ = select.select([process.sentinel], [], [], DEADLINE_S)
            assert ready, "a worker did not stop"
            process.close()
        trees.close()
    for index, (conn, _, arrivals) in enumerate(workers):
        arrivals.join(DEADLINE_S)  # the pipe closes as the worker exits
        conn.close()
        later = arrivals.times[1:]  # the first tick is at the spawn's moment
        assert len(later) >= 3, f"worker {index} ticked {len(arrivals.times)} times"
        phases = [t % INTERVAL_S for t in later]
        print(f"worker {index}: ticks arrived {', '.join(f'{p:.3f}' for p in phases)} s after "
              "a grid time")
        assert all(p < LATE_S for p in phases), phases
        gaps = [b - a for a, b in itertools.pairwise(later)]
        assert all(math.isclose(g, INTERVAL_S, abs_tol=LATE_S) for g in gaps), gaps
