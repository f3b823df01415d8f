"""Acceptance of the elastic pool (docs/modes.md: elastic pool) with real agent processes.

Real ``agentpool`` supervisors in lease mode, each with its worker processes,
against the API server (the emulator, and a real kube-apiserver where the
envtest binaries exist) and the power simulator. The pool's StatefulSet is
scaled 2 -> 3 -> 5 -> 2 (pods are started and stopped by the test, as the
StatefulSet controller would); after each change every node must be
controlled by exactly one pod, the one the assignment names, within 30 s,
and at no sampled instant (every 100 ms, from the simulator's request log
by User-Agent and from the pods' ``/metrics``) by two. Then a pod is
SIGKILLed: its nodes are controlled again within the documented bound, and
nothing is doubly controlled when it returns.

The issue asks for 200 nodes; the suite uses 40 so that it stays within a
couple of minutes on 2 busy cores (five supervisors and their 40 worker
processes); ``bench/elastic.py`` runs the same scenario at 200.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentpool.config.options import Membership
from agentpool.config.settings import ElasticSettings
from agentpool.pool.assignment import Assignment, owner_of
from agentpool.pool.fence import grace_for
from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from agentpool.sim.poolwatch import MetricsSampler, Timings, request_overlaps, worker_nodes
from agentpool.sim.poolwatch import PoolDriver as Pool
from agentpool.supervisor.elastic import takeover_bound_s

# Real processes and servers: minutes on 2 busy cores, above the default per-test limit.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NODES = [f"kwok-node-{i}" for i in range(40)]
LEASE_S, RENEW_S, SHUTDOWN_S, INTERVAL_S = 8.0, 1.0, 3.0, 1.0
CONVERGE_S = 30.0
"""The issue's bound for every node to have exactly one controller after a change."""


@pytest.fixture
def cluster(sim_cluster: SimCluster) -> SimCluster:
    for node in NODES:
        sim_cluster.add_node(node)
    return sim_cluster


@pytest.fixture
def pool(cluster: SimCluster) -> Iterator[Pool]:
    made = Pool(cluster, NODES, Timings(LEASE_S, RENEW_S, SHUTDOWN_S, INTERVAL_S))
    try:
        yield made
    finally:
        made.cleanup()


def view_of(agent: AgentProcess) -> tuple[list[str], float] | None:
    """(members this pod assigns over, its disagreement gauge) from its /metrics."""
    try:
        text = agent.metrics()
    except OSError:
        return None
    members, disagreement = [], -1.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "agentpool_pool_view_member":
                members.append(sample.labels["member"])
            elif sample.name == "agentpool_pool_view_disagreement":
                disagreement = sample.value
    return sorted(members), disagreement


def workers_of(agent: AgentProcess) -> set[str]:
    try:
        return worker_nodes(agent.metrics())
    except OSError:  # not listening yet
        return set()


def victim_note(pool: Pool) -> str:
    return f"taken over from pool pod {pool.name}-1"


def taken_over(cluster: SimCluster) -> set[tuple[str, str]]:
    """(node, note) of the NodeTakenOver events (events.k8s.io Events, on either server)."""
    kind = "events" if cluster.server is None else "event.events.k8s.io/v1"
    return {(e["regarding"]["name"], e["note"])
            for e in cluster.api.list(kind, namespace="kube-system")
            if e["reason"] == "NodeTakenOver"}


def wait_converged(pool: Pool, replicas: int, since: float) -> float:
    members = pool.members(replicas)
    try:
        wait_until(lambda: pool.converged(members, since), CONVERGE_S, interval=0.2)
    except TimeoutError:
        logs = "\n".join(f"--- {n}\n{a.logs()[-3000:]}" for n, a in pool.pods.items())
        raise AssertionError(f"not converged on {members} within {CONVERGE_S:g}s\n{logs}") from None
    return time.monotonic() - since


# The two longest runs (about 30 s each) on the real API server only; the emulator's
# handoff is exercised by the module's other tests.
REAL_ONLY = pytest.mark.parametrize("sim_cluster", ["envtest"], indirect=True)


@REAL_ONLY
def test_scaling_2_3_5_2_moves_every_node_to_one_pod_and_never_two(pool: Pool) -> None:
    sampler = MetricsSampler(pool.scrapers).start()  # type: ignore[arg-type]
    began = time.monotonic()
    took: list[float] = []
    scales = (2, 3, 5, 2)
    try:
        for replicas in scales:
            since = time.monotonic()
            pool.scale(replicas)
            for ordinal in range(replicas):
                if f"{pool.name}-{ordinal}" not in pool.pods:
                    pool.start(ordinal)
            took.append(wait_converged(pool, replicas, since))
            # A sample begun after it (the one in progress may have begun before).
            taken = len(sampler.samples)
            wait_until(lambda n=taken: len(sampler.samples) > n + 1, 30)  # type: ignore[misc]
            members = pool.members(replicas)
            # Every member reports the same view, with no disagreement left.
            wait_until(lambda m=members: all(  # type: ignore[misc]
                view_of(pool.pods[name]) == (m, 0.0) for name in m), CONVERGE_S)
            for name in [n for n in pool.pods if n not in pool.members(replicas)]:
                # Scaled away: its nodes were handed over while it ran; now the kubelet's SIGTERM.
                assert pool.pods.pop(name).terminate() == 0
    finally:
        sampler.stop()
    # The samples span every change: each converged assignment is among them. (How many
    # samples that takes depends on how fast the pods answer a scrape, which a loaded
    # machine slows several times; the simulator's request log below misses nothing.)
    held = [sample for _, sample in sampler.samples]
    for replicas in scales:
        members = pool.members(replicas)
        assert {n: {owner_of(n, members, Assignment.RENDEZVOUS)} for n in NODES} in held, members
    assert sampler.doubles() == []
    window = INTERVAL_S * 1.5
    assert request_overlaps(pool.cluster.power.requests(), window, since=began) == []
    print("converged after each change in " + ", ".join(f"{t:.1f}s" for t in took))


@REAL_ONLY
def test_a_sigkilled_pods_nodes_are_controlled_again_within_the_bound(pool: Pool) -> None:
    for ordinal in range(2):
        pool.start(ordinal)
    wait_converged(pool, 2, time.monotonic())
    sampler = MetricsSampler(pool.scrapers).start()  # type: ignore[arg-type]
    began = time.monotonic()
    try:
        victim = pool.pods.pop(f"{pool.name}-1")
        lost = workers_of(victim)
        assert lost
        victim.kill()
        killed_at = time.monotonic()
        # Still a member as far as replicas go: only the lease's expiry lets its nodes move.
        took = wait_converged(pool, 1, killed_at)
        # Each says so on its Node, for kubectl describe node.
        wanted = {(node, victim_note(pool)) for node in lost}
        wait_until(lambda: taken_over(pool.cluster) >= wanted, 30)
        elastic = ElasticSettings(Membership.LEASE, lease_duration_s=LEASE_S, renew_s=RENEW_S)
        bound = takeover_bound_s(elastic, grace_for(SHUTDOWN_S))
        # Never before the lease expired plus the grace (minus one renew period, as seen from
        # another pod); the upper bound with 5x headroom for a loaded 2-core machine.
        assert took >= LEASE_S + grace_for(SHUTDOWN_S) - RENEW_S
        assert took < 5 * bound, took
        pool.start(1)  # back under the same name
        wait_converged(pool, 2, time.monotonic())
    finally:
        sampler.stop()
    assert sampler.doubles() == []
    assert request_overlaps(pool.cluster.power.requests(), INTERVAL_S * 1.5, since=began) == []
    print(f"taken over {took:.1f}s after SIGKILL (documented bound {bound:g}s)")


def test_a_worker_slow_to_stop_delays_its_nodes_new_owner_instead_of_overlapping(
    pool: Pool,
) -> None:
    for ordinal in range(2):
        pool.start(ordinal)
    wait_converged(pool, 2, time.monotonic())
    # The nodes pod 2 will take: make their old workers slow to stop (every request hangs
    # until the client's 2 s timeout, and a worker finishes its request before it stops).
    moving = [n for n in NODES if owner_of(n, pool.members(3), Assignment.RENDEZVOUS)
              == f"{pool.name}-2"]
    assert moving
    for node in moving:
        pool.cluster.power.set_fault(node, "hang", hang_seconds=10)
    sampler = MetricsSampler(pool.scrapers).start()  # type: ignore[arg-type]
    try:
        wait_until(lambda: bool(sampler.samples), 30)  # it has seen the nodes where they are
        since = time.monotonic()
        pool.scale(3)
        pool.start(2)
        newcomer = pool.pods[f"{pool.name}-2"]
        wait_until(lambda: set(moving) <= workers_of(newcomer), CONVERGE_S)
        for node in moving:
            pool.cluster.power.set_fault(node, None)
        wait_converged(pool, 3, since)
        # A sample begun after it, too (the one in progress may have begun before).
        taken = len(sampler.samples)
        wait_until(lambda: len(sampler.samples) > taken + 1, 30)
    finally:
        sampler.stop()
    # The samples saw the handoff they are about: each moving node held by its old pod
    # alone, then by the newcomer alone. (How many samples that takes depends on how fast
    # the pods answer a scrape, which a loaded machine slows several times.)
    for node in moving:
        old = owner_of(node, pool.members(2), Assignment.RENDEZVOUS)
        held = [sample.get(node) for _, sample in sampler.samples]
        assert {old} in held, (node, held)
        assert {f"{pool.name}-2"} in held[held.index({old}):], (node, held)
    assert sampler.doubles() == []
