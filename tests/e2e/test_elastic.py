"""The elastic pool (``agent.pool.membership=lease``) on a real cluster: the StatefulSet
scaled with the API as ``kubectl scale`` does it, and rolled by ``helm upgrade``.

Two independent judges: each pod's own ``/metrics`` (which nodes it runs a worker
for, what its handoff still has to do) and the power simulator's request record,
where pod P controls node N from one of its requests to the next (at most a little
over an interval apart): no instant may have two pods controlling a node.
"""

from __future__ import annotations

import datetime
import itertools
from collections import defaultdict
from collections.abc import Iterator

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from agentpool.sim.poolwatch import pod_of, request_overlaps
from agentpool.sim.power.model import RequestKind

from . import timing
from .cluster import NAMESPACE, RELEASE, Cluster, wait_until
from .workloads import NodeHelper, Simulator, all_applied_on, metrics_of, profiles_for, ready_log

INTERVAL_S = 4.0
NODES = [f"e2e-lease-{i}" for i in range(8)]
STATEFULSET = f"{RELEASE}-agent-pool"
WINDOW_S = 1.5 * INTERVAL_S


def pod_metrics(cluster: Cluster, helper: NodeHelper) -> dict[str, dict[str, object]]:
    """Per live pod: its worker nodes and the handoff gauges, from its own /metrics."""
    out: dict[str, dict[str, object]] = {}
    for pod in cluster.agent_pods():
        if pod.metadata.deletion_timestamp is not None or not pod.status.pod_ip:
            continue
        (page,) = metrics_of(cluster, helper, f"http://{pod.status.pod_ip}:8080/metrics")
        workers: set[str] = set()
        gauges: dict[str, float] = {}
        for family in text_string_to_metric_families(page):
            for sample in family.samples:
                if sample.name == "agentpool_worker_pid":
                    workers.add(sample.labels["node"])
                elif sample.name.startswith("agentpool_pool_") and not sample.labels:
                    gauges[sample.name] = sample.value
        out[pod.metadata.name] = {"workers": workers, **gauges}
    return out


def converged(cluster: Cluster, helper: NodeHelper, replicas: int) -> dict[str, set[str]] | None:
    """Pod -> nodes, once ``replicas`` pods are Ready and agree, and the nodes are split."""
    if cluster.ready_agent_pods(replicas) is None:
        return None
    seen = pod_metrics(cluster, helper)
    if len(seen) != replicas:
        return None
    for gauges in seen.values():
        if (gauges.get("agentpool_pool_members_seen") != replicas
                or gauges.get("agentpool_pool_nodes_to_acquire")
                or gauges.get("agentpool_pool_nodes_to_release")
                or gauges.get("agentpool_pool_view_disagreement")):
            return None
    split = {pod: set(g["workers"]) for pod, g in seen.items()}  # type: ignore[call-overload]
    every = [n for nodes in split.values() for n in nodes]
    if sorted(every) != sorted(NODES):
        return None
    return split


def gaps(cluster: Cluster, simulator: Simulator, since: float) -> dict[str, float]:
    """Per node, the longest time without a control request (any pod) since ``since``."""
    times: dict[str, list[float]] = defaultdict(list)
    for r in simulator.requests():
        if r.kind is RequestKind.CONTROL and r.node in NODES and r.monotonic >= since:
            times[r.node].append(r.monotonic)
    return {node: max((b - a for a, b in itertools.pairwise([since, *times[node]])), default=0.0)
            for node in NODES}


@pytest.fixture(scope="module")
def elastic(cluster: Cluster, simulator: Simulator, helper: NodeHelper) -> Iterator[None]:
    cluster.add_fake_nodes(NODES)
    values = cluster.values(mode="pool", pool={"membership": "lease"},
                            env={"RECONCILE_INTERVAL": f"{INTERVAL_S:g}s"})
    cluster.install(values)
    try:
        for node in NODES:
            npp, tp = profiles_for(node, simulator.base_url, cap=150.0, mode="auto")
            cluster.apply_custom("nodepowerprofiles", npp)
            cluster.apply_custom("telemetryprofiles", tp)
        wait_until("the pool to take every node", lambda: converged(cluster, helper, 2), 180)
        wait_until("every node's status applied", lambda: all_applied_on(cluster, NODES), 120)
        for pod in cluster.agent_pods():
            timing.record("lease pool: helm install", pod, ready_log(cluster, pod.metadata.name))
        yield
    finally:
        cluster.remove_pool(NODES)


def scale(cluster: Cluster, replicas: int) -> None:
    """What ``kubectl scale statefulset`` does: the scale subresource."""
    cluster.apps.patch_namespaced_stateful_set_scale(
        STATEFULSET, NAMESPACE, {"spec": {"replicas": replicas}})


def test_scaling_2_3_2_hands_nodes_over_with_no_node_on_two_pods(
    cluster: Cluster, simulator: Simulator, helper: NodeHelper, elastic: None
) -> None:
    start = simulator.now()
    scale(cluster, 3)
    grown = wait_until("3 pods sharing the nodes", lambda: converged(cluster, helper, 3), 180)
    assert grown[f"{STATEFULSET}-2"], f"the new pod took no node: {grown}"
    newcomer = cluster.core.read_namespaced_pod(f"{STATEFULSET}-2", NAMESPACE)
    timing.record("lease pool: kubectl scale 2 -> 3", newcomer,
                  ready_log(cluster, f"{STATEFULSET}-2"))
    # Its start, not its end: the kubelet probes a container until it has seen it exit.
    assert cluster.unhealthy_events(cluster.agent_pods()) == []
    # Whole seconds, as the kubelet stamps its events: one in this second is not counted.
    told_to_stop = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    scale(cluster, 2)
    shrunk = wait_until("2 pods sharing the nodes again", lambda: converged(cluster, helper, 2),
                        180)
    assert set(shrunk) == {f"{STATEFULSET}-0", f"{STATEFULSET}-1"}
    records = simulator.requests()
    assert request_overlaps(records, WINDOW_S, since=start) == []
    # The simulator saw the newcomer act, and then only the two that stay.
    acted = {pod_of(r.user_agent) for r in records if r.monotonic >= start and r.node in NODES}
    assert f"{STATEFULSET}-2" in acted
    staying = [p for p in cluster.agent_pods() if p.metadata.name in shrunk]
    assert cluster.unhealthy_events(staying) == []
    # The one that left, until it was told to stop: the kubelet can probe a container once
    # more while it tears the pod's network down ("dial tcp ...: i/o timeout", seen in CI),
    # which says nothing about the agent.
    assert cluster.unhealthy_events([newcomer], before=told_to_stop) == []


def test_helm_upgrade_rolls_the_pods_with_no_node_controlled_twice_or_left_long(
    cluster: Cluster, simulator: Simulator, helper: NodeHelper, elastic: None
) -> None:
    before = {p.metadata.name: p.metadata.uid for p in cluster.agent_pods()}
    (page,) = metrics_of(cluster, helper,
                         f"http://{cluster.agent_pods()[0].status.pod_ip}:8080/metrics")
    bound = next(s.value for f in text_string_to_metric_families(page) for s in f.samples
                 if s.name == "agentpool_pool_takeover_bound_seconds")
    start = simulator.now()
    values = cluster.values(mode="pool", pool={"membership": "lease"},
                            env={"RECONCILE_INTERVAL": f"{INTERVAL_S:g}s"},
                            podAnnotations={"agentpool.e2e/revision": "2"})
    cluster.upgrade(values)  # waits for the rollout

    def rolled() -> dict[str, set[str]] | None:
        pods = cluster.agent_pods()
        if {p.metadata.name: p.metadata.uid for p in pods}.items() & before.items():
            return None
        return converged(cluster, helper, 2)

    wait_until("both pods replaced and sharing the nodes", rolled, 180)
    for pod in cluster.agent_pods():
        timing.record("lease pool: helm upgrade (rolling)", pod,
                      ready_log(cluster, pod.metadata.name))
    assert request_overlaps(simulator.requests(), WINDOW_S, since=start) == []
    # Clean exits release at once; the documented bound is for a pod that dies.
    longest = gaps(cluster, simulator, start)
    assert max(longest.values()) <= bound + INTERVAL_S, longest
    assert all((p.metadata.annotations or {}).get("agentpool.e2e/revision") == "2"
               for p in cluster.agent_pods())
    assert cluster.unhealthy_events(cluster.agent_pods()) == []  # the new pods' starts


def test_the_pool_is_not_left_with_leases_of_pods_gone(cluster: Cluster, elastic: None) -> None:
    coordination = client.CoordinationV1Api(cluster.api)
    leases = coordination.list_namespaced_lease(
        NAMESPACE, label_selector=f"agentpool.joulie.io/pool={STATEFULSET}").items
    held = {lease.metadata.name for lease in leases if lease.spec.holder_identity}
    assert held == {f"{STATEFULSET}-0", f"{STATEFULSET}-1"}
