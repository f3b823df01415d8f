"""Fault 6 of issue 43: the wall clock steps back an hour, then forward two, while the agent runs.

Every process of the agent (supervisor, fork server, workers) reads its wall clock
through :mod:`tests.faults.wallclock`, a preloaded library that stands in for
stepping the host's clock (which would step it for everything on this machine).
The power simulator and this test keep the true clock. What users expect: the tick
grid, the restart backoff and the fences run on the monotonic clock and do not
notice (no tick early, none missing, no restart sooner or an hour later, no worker
stopping on its own); the timestamps the agent writes (status ``updatedAt``, the
control requests' ``ts``) follow the wall clock it was given.
"""

from __future__ import annotations

import itertools
import math
import os
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from agentpool.sim.power.model import RecordedRequest
from agentpool.worker.cadence import early_s
from tests.faults.wallclock import SteppedClock, compiler
from tests.support.agents import live_worker_pid, restarts, worker_pids

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(compiler() is None, reason="needs a C compiler for the clock library"),
]

HOUR = 3600.0
INTERVAL_S = 1.0
"""The agent's reconcile interval."""
STAMP_SLACK_S = 30.0
"""How far a stamp may be from the stepped clock: the agent writes it within a second
or two of the test's reading; 30 s tells the stepped hour from the true time."""


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _controls(cluster: SimCluster, node: str, since: float) -> list[RecordedRequest]:
    return [r for r in cluster.power.requests(node=node, kind="control") if r.monotonic > since]


def _steady(cluster: SimCluster, node: str, since: float, count: int) -> list[float]:
    """When the node's next ``count`` control requests (one per tick) arrived."""
    wait_until(lambda: len(_controls(cluster, node, since)) >= count, 30)
    return [r.monotonic for r in _controls(cluster, node, since)][:count]


def _grid_times(arrivals: list[float]) -> list[int]:
    """The grid time (a whole number of intervals on the monotonic clock) each request's
    tick was for. A tick runs at its grid time, or up to a quarter interval
    before it when its worker is woken anyway (cadence.early_s); its request arrives here
    after it, late by however long the machine keeps the worker and this process waiting
    (under three quarters of an interval)."""
    return [math.floor((at + early_s(INTERVAL_S)) / INTERVAL_S) for at in arrivals]


def _restart_after_kill(agent_pid_of: dict[str, int], cluster: SimCluster, node: str,
                        agent: object) -> float:
    """SIGKILL the node's worker; seconds until its successor's first control request."""
    pid = agent_pid_of[node]
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: _controls(cluster, node, killed + 0.2), 30)
    return _controls(cluster, node, killed + 0.2)[0].monotonic - killed


def test_a_stepped_wall_clock_moves_the_stamps_and_nothing_else(tmp_path: Path) -> None:
    clock = SteppedClock(tmp_path / "clock")
    with SimCluster() as cluster:
        cluster.add_node("steady")
        cluster.add_node("changed")
        agent = cluster.start_agent({**clock.env(), "RECONCILE_INTERVAL": f"{INTERVAL_S:g}s"})
        agent.wait_ready()
        for node in ("steady", "changed"):
            wait_until(lambda n=node: cluster.status(n).get("result") == "applied", 20)
        steady_pid = live_worker_pid(agent, "steady")
        cap = 130.0  # the nodes start at 120 W
        for offset in (-HOUR, +HOUR):
            clock.step_to(offset)
            stepped = time.monotonic()
            # Stamps follow the clock the agent was given.
            cap += 20
            cluster.set_cap("changed", cap)
            wait_until(lambda c=cap: cluster.status("changed").get("observed", {})
                       .get("capWatts") == c, 20)
            updated = _epoch(cluster.status("changed")["updatedAt"])
            assert abs(updated - (time.time() + offset)) < STAMP_SLACK_S, (updated, offset)
            sent = [_epoch(r.body["ts"]) - r.wall for r in _controls(cluster, "changed", stepped)]
            assert sent, "no control request since the step"
            assert all(abs(s - offset) < STAMP_SLACK_S for s in sent), (sent, offset)
            # The grid does not notice: a tick a second, none early, none missing.
            arrivals = _steady(cluster, "steady", stepped, 6)
            gaps = [b - a for a, b in itertools.pairwise(arrivals)]
            print(f"\nticks after a step to {offset:+.0f}s: gaps {[round(g, 2) for g in gaps]}")
            # One tick per grid time: an early one (more than a quarter interval) would share
            # the grid time of the tick before it. Gaps measured 1.0 s (the interval); 5 s
            # keeps 5x headroom.
            grid = _grid_times(arrivals)
            assert len(set(grid)) == len(grid), (grid, gaps)
            assert max(gaps) < 5.0, gaps
            # A dead worker's restart waits out its backoff on the monotonic clock: about
            # 1 s, then 2 s (plus up to 0.5 s of jitter), neither at once nor an hour on.
            before = restarts(agent, "changed")
            took = _restart_after_kill(worker_pids(agent), cluster, "changed", agent)
            print(f"restart after the step to {offset:+.0f}s came {took:.2f}s after the kill")
            assert 1.0 <= took < 20.0, took
            wait_until(lambda b=before: restarts(agent, "changed") == b + 1, 10)
        # The untouched worker ran through both steps: no fence passed, nothing restarted.
        assert worker_pids(agent)["steady"] == steady_pid
        assert restarts(agent, "steady") == 0.0
        assert "stopped on its own" not in agent.logs()
        assert agent.terminate() == 0
