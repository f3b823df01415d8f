"""A lease pod whose supervisor is stopped, on a real kube-apiserver (issue: fencing).

Two lease pods, real ``agentpool`` processes, HTTP controls at the power
simulator. The supervisor process of one of them, and only it, is sent
SIGSTOP, as a loop stuck in a system call would look; its workers and fork
server run on. The other pod takes its nodes over once its lease expired
plus its published grace. Judged from the simulator's request log, by
User-Agent: after the takeover of a node, no request for it comes from the
stopped pod; after SIGCONT the pod rejoins without one request interleaving
with the other's; and when the stopped pod is killed instead (as a liveness
restart would), none of its processes writes a node that has a new owner.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import psutil
import pytest

from agentpool.pool.assignment import Assignment, owner_of
from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from agentpool.sim.poolwatch import PoolDriver, Timings, pod_of, request_overlaps, worker_nodes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NODES = [f"fence-{i}" for i in range(16)]
TIMINGS = Timings(lease_s=8.0, renew_s=1.0, shutdown_s=3.0, interval_s=1.0)
TAKEOVER_WAIT_S = 90.0
"""Measured about 13 s (lease 8 s + grace 4 s + a cycle); the rest is for a loaded box."""


@pytest.fixture
def pool(envtest_server: EnvtestServer) -> Iterator[PoolDriver]:
    with SimCluster(server=envtest_server) as cluster:
        for node in NODES:
            cluster.add_node(node, mode="dvfs")  # a worker holds a throttle: a restore posts
        driver = PoolDriver(cluster, NODES, TIMINGS)
        try:
            yield driver
        finally:
            for agent in driver.pods.values():
                if agent.process.poll() is None:
                    os.kill(agent.pid, signal.SIGCONT)
            driver.cleanup()


def requests_from(pool: PoolDriver, pod: str) -> list[tuple[str, float]]:
    return [(r.node, r.monotonic) for r in pool.cluster.power.requests()
            if r.node is not None and pod_of(r.user_agent) == pod]


def first_requests(pool: PoolDriver, pod: str, nodes: set[str], since: float) -> dict[str, float]:
    first: dict[str, float] = {}
    for node, at in requests_from(pool, pod):
        if node in nodes and at >= since and node not in first:
            first[node] = at
    return first


def start_two(pool: PoolDriver) -> tuple[str, str, set[str]]:
    for ordinal in range(2):
        pool.start(ordinal)
    members = pool.members(2)
    since = time.monotonic()
    wait_until(lambda: pool.converged(members, since), 60, interval=0.2)
    survivor, victim = members
    taken = {n for n in NODES if owner_of(n, members, Assignment.RENDEZVOUS) == victim}
    assert taken
    return survivor, victim, taken


def stop_and_await_takeover(pool: PoolDriver, survivor: str, victim: str,
                            taken: set[str]) -> dict[str, float]:
    """SIGSTOP the victim's supervisor; when the survivor took each node over."""
    os.kill(pool.pods[victim].pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    wait_until(lambda: first_requests(pool, survivor, taken, stopped_at).keys() == taken,
               TAKEOVER_WAIT_S, interval=0.2)
    takeover = first_requests(pool, survivor, taken, stopped_at)
    print(f"taken over {max(takeover.values()) - stopped_at:.1f}s after SIGSTOP")
    # Watch a few more of the survivor's ticks on every taken node.
    def ticked() -> bool:
        last = max(takeover.values())
        counts = [sum(1 for n, at in requests_from(pool, survivor) if n == node and at > last)
                  for node in taken]
        return min(counts) >= 3
    wait_until(ticked, 60, interval=0.2)
    return takeover


def late_requests(pool: PoolDriver, victim: str, takeover: dict[str, float]) -> list[str]:
    return [f"{node} +{at - takeover[node]:.1f}s" for node, at in requests_from(pool, victim)
            if node in takeover and at >= takeover[node]]


def test_a_stopped_supervisors_workers_stop_before_the_takeover_and_it_rejoins_cleanly(
    pool: PoolDriver,
) -> None:
    survivor, victim, taken = start_two(pool)
    began = time.monotonic()
    takeover = stop_and_await_takeover(pool, survivor, victim, taken)
    late = late_requests(pool, victim, takeover)
    print(f"requests from the stopped pod after the takeover: {len(late)}")
    assert late == []
    # It stopped writing before the survivor could start: no instant with both.
    for node in taken:
        mine = [at for n, at in requests_from(pool, victim) if n == node and at >= began]
        assert not mine or max(mine) < takeover[node]

    resumed_at = time.monotonic()
    os.kill(pool.pods[victim].pid, signal.SIGCONT)
    members = pool.members(2)
    wait_until(lambda: pool.converged(members, resumed_at), 90, interval=0.2)
    logs = pool.pods[victim].logs()
    assert "stopped on its own" in logs, logs[-6000:]
    assert request_overlaps(pool.cluster.power.requests(), TIMINGS.interval_s * 1.5,
                            since=began) == []


def test_a_stopped_pod_killed_after_the_takeover_writes_no_restore(pool: PoolDriver) -> None:
    survivor, victim, taken = start_two(pool)
    agent = pool.pods[victim]
    descendants = psutil.Process(agent.pid).children(recursive=True)
    assert len(descendants) > len(taken)  # the fork server and a worker per node
    takeover = stop_and_await_takeover(pool, survivor, victim, taken)
    agent.kill()  # SIGKILL, as the kubelet's liveness restart: its processes are on their own
    wait_until(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                               for p in descendants), 30, interval=0.2)
    assert late_requests(pool, victim, takeover) == []
    assert worker_nodes(pool.pods[survivor].metrics()) == set(NODES)
