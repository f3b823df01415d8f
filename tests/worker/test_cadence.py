"""When workers tick (agentpool/worker/cadence.py): on the grid every worker shares.

The rule itself, then real workers forked by the fork server 0.4 and 0.7 s
after a grid time: after their first tick, which is at once, their
ticks arrive just after the grid's times, not at their own start's phase.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import statistics
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, Pipe, wait
from pathlib import Path

import pytest

from agentpool.config.options import AgentMode
from agentpool.config.settings import Settings
from agentpool.pool.fence import FenceTimes
from agentpool.sim.sysfs.trees import intel_2socket
from agentpool.supervisor.forkclient import ForkedWorker, ForkServer
from agentpool.worker.cadence import early_s, next_tick
from agentpool.worker.protocol import Fence, StopWorker, Ticked, TickReport
from tests.worker.fence import DEADLINE_S, inputs

INTERVAL_S = 1.0
SPAWN_PHASES = (0.4, 0.7)
"""Where in the interval the workers start: far from the grid, so that a worker keeping
its own phase would tick 0.4 or 0.7 s after each grid time."""
LATE_S = 0.25
"""How long after its grid time a tick's report usually arrives here. Measured: 2 to 8 ms
(a host tick, its report, the reading thread's wake-up; 8 beside a CI run); thirty times
that is still well short of the spawn phases. On a loaded machine a few reports come later
than that: the grid is judged by the median tick, which a worker keeping its own phase
would put 0.4 or 0.7 s after the grid time."""
ATTEMPTS = 3
"""Grid times a fence scenario is tried at. A loaded machine can leave the test's thread
or the worker unscheduled past the moment a scenario needs (a fence read inside the window
instead of before it, or after the tick instead of inside the window); such a try shows
nothing either way and the next grid time is used. A worker that breaks the rule fails
every try."""


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


def test_a_worker_woken_anyway_ticks_early_by_at_most_a_quarter_interval_and_a_second() -> None:
    assert early_s(20.0) == 1.0
    assert early_s(2.0) == 0.5
    assert early_s(0.2) == pytest.approx(0.05)
    assert early_s(0.0) == 0.0  # the warm-up rehearsal: never early
    for interval in (0.2, 1.0, 2.0, 20.0):  # a tick that early keeps the next on the grid
        grid = 7 * interval
        assert next_tick(grid - early_s(interval), interval) == grid + interval


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
            ready = wait([process.sentinel], DEADLINE_S)
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
        assert statistics.median(phases) < LATE_S, phases
        gaps = [b - a for a, b in itertools.pairwise(later)]
        assert math.isclose(statistics.median(gaps), INTERVAL_S, abs_tol=LATE_S), gaps
        # One tick per grid time: none between them (a report held up by the machine's
        # load arrives late, but in its own interval).
        span = later[-1] - later[0]
        assert len(later) <= round(span / INTERVAL_S) + 1, later


def test_a_fence_just_before_the_tick_wakes_the_worker_to_tick_and_one_well_before_does_not(
    server: ForkServer, tmp_path: Path
) -> None:
    settings = Settings(mode=AgentMode.POOL, reconcile_interval_s=INTERVAL_S,
                        sysfs_root=str(tmp_path / "{node}")).worker()
    window = early_s(INTERVAL_S)  # 0.25 s
    with intel_2socket(tmp_path / "early-0"):
        ours, theirs = Pipe(duplex=True)
        try:
            process = server.spawn("early-0", settings, None, inputs(120, "early-0"),
                                   theirs.fileno())
        finally:
            theirs.close()
        arrivals = Arrivals(ours)
        arrivals.start()
        far = FenceTimes(time.monotonic() + 3600.0, None)
        try:
            wait_for(lambda: len(arrivals.times) >= 2)  # at once, then on the grid
            # Twice the window before its tick: read, and slept on until the grid time. A
            # tick before the window opened cannot be the rule's (the fence was read before
            # it); one inside it means the fence was read late, inside the window.
            tries = []
            for _ in range(ATTEMPTS):
                grid = lead_up(arrivals, 2 * window)
                tick = tick_after_fence(ours, arrivals, far)
                tries.append(round(tick - grid, 3))
                assert tick >= grid - window, f"ticked {grid - tick:.3f} s before its time"
                if tick >= grid:
                    break
            print(f"fence {2 * window:.2f} s before: ticks {tries} s from the grid time")
            assert tries[-1] >= 0, f"the fence was read inside the window at every try: {tries}"
            # Half the window before its tick: it ticks at once, not at the grid time.
            tries = []
            for _ in range(ATTEMPTS):
                grid = lead_up(arrivals, window / 2)
                tick = tick_after_fence(ours, arrivals, far)
                tries.append(round(tick - grid, 3))
                if tick < grid:
                    break
            print(f"fence {window / 2:.3f} s before: ticks {tries} s from the grid time")
            assert tries[-1] < 0, tries
        finally:
            ours.send(StopWorker())
            ready = wait([process.sentinel], DEADLINE_S)
            assert ready, "the worker did not stop"
            process.close()
            arrivals.join(DEADLINE_S)
            ours.close()


def lead_up(arrivals: Arrivals, lead: float) -> float:
    """Sleep until ``lead`` before the worker's next grid time; returns that grid time. A
    grid time the test comes to too late for (a loaded machine) is let go by: the next."""
    while True:
        seen = len(arrivals.times)
        # The last tick's grid time, whether it came early (a wake-up inside the window) or
        # late; the worker's next tick is at the grid time after it.
        grid = grid_after(arrivals.times[-1] + early_s(INTERVAL_S))
        left = grid - lead - time.monotonic()
        if left > 0:
            time.sleep(left)
            return grid
        wait_for(lambda seen=seen: len(arrivals.times) > seen)  # type: ignore[misc]


def tick_after_fence(conn: Connection, arrivals: Arrivals, fence: FenceTimes) -> float:
    """Send ``fence``; when the worker's next tick report arrived."""
    seen = len(arrivals.times)
    conn.send(Fence(fence))
    wait_for(lambda: len(arrivals.times) > seen)
    return arrivals.times[seen]


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "nothing came"
        time.sleep(0.005)


def grid_after(tick: float) -> float:
    """The grid time after the one a tick reported at ``tick`` (just after its own) ran at."""
    return (math.floor(tick / INTERVAL_S) + 1) * INTERVAL_S
