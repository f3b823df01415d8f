"""Pool mode as a user deploys it: the chart's StatefulSet (static shards) on a real cluster.

Six fake nodes, each with a NodePowerProfile and a TelemetryProfile routing it to the
power simulator; the chart installed with its defaults plus pool mode, the image and
a shorter reconcile interval (the tests count requests per interval). The simulator's
request record is the judge: every request names the pod that sent it.
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from agentpool.sim.poolwatch import pod_of
from agentpool.sim.power.model import RecordedRequest, RequestKind

from . import timing
from .cluster import NAMESPACE, RELEASE, Cluster, is_ready, restarts, wait_until
from .workloads import NodeHelper, Simulator, all_applied_on, metrics_of, profiles_for, ready_log

INTERVAL_S = 4.0
NODES = [f"e2e-pool-{i}" for i in range(6)]
THROTTLED = NODES[-1]
"""The node whose TelemetryProfile says DVFS (mode dvfs, a cap below its power): the one
a deleted pod must leave unthrottled."""
STATEFULSET = f"{RELEASE}-agent-pool"
RAPL = "rapl.set_power_cap_watts"
DVFS = "dvfs.set_throttle_pct"


def cap_of(node: str) -> float:
    if node == THROTTLED:
        return 80.0  # below the simulated ~155 W: DVFS throttles it
    return 120.0 if NODES.index(node) % 2 == 0 else 200.0


def controls(
    records: list[RecordedRequest], since: float = 0.0
) -> dict[str, list[RecordedRequest]]:
    """Control requests by node, oldest first, from ``since`` (simulator clock)."""
    by_node: dict[str, list[RecordedRequest]] = defaultdict(list)
    for r in records:
        if r.kind is RequestKind.CONTROL and r.node in NODES and r.monotonic >= since:
            by_node[r.node].append(r)
    return by_node


def all_applied(cluster: Cluster) -> bool:
    return all_applied_on(cluster, NODES)


@pytest.fixture(scope="module")
def pool(cluster: Cluster, simulator: Simulator) -> Iterator[list[client.V1Pod]]:
    cluster.add_fake_nodes(NODES)
    sim_url = simulator.base_url
    cluster.install(cluster.values(mode="pool", env={"RECONCILE_INTERVAL": f"{INTERVAL_S:g}s"}))
    try:
        for node in NODES:  # the chart installed the CRDs
            npp, tp = profiles_for(node, sim_url, cap_of(node),
                                   "dvfs" if node == THROTTLED else "auto")
            cluster.apply_custom("nodepowerprofiles", npp)
            cluster.apply_custom("telemetryprofiles", tp)
        pods = wait_until("2 pool pods Ready", lambda: cluster.ready_agent_pods(2), 180)
        wait_until("every node's status applied", lambda: all_applied(cluster), 120)
        for pod in pods:
            timing.record("pool: helm install", pod, ready_log(cluster, pod.metadata.name))
        yield pods
    finally:
        cluster.remove_pool(NODES)


def test_pods_are_ready_with_no_restart_and_no_failed_probe(
    cluster: Cluster, pool: list[client.V1Pod]
) -> None:
    pods = cluster.agent_pods()
    assert [p.metadata.name for p in pods] == [f"{STATEFULSET}-0", f"{STATEFULSET}-1"]
    assert all(is_ready(p) for p in pods)
    assert [restarts(p) for p in pods] == [0, 0]
    assert cluster.unhealthy_events(pods) == []


def test_every_cap_is_applied_at_the_simulator_once_per_interval(
    cluster: Cluster, simulator: Simulator, pool: list[client.V1Pod]
) -> None:
    start = simulator.now()
    intervals = 6

    def counted() -> dict[str, list[RecordedRequest]] | None:
        by_node = controls(simulator.requests(), start)
        enough = len(by_node) == len(NODES) and all(
            len(rs) > intervals for rs in by_node.values())
        return by_node if enough else None

    by_node = wait_until(f"{intervals} intervals of requests", counted,
                         intervals * INTERVAL_S * 5)
    for node, requests in by_node.items():
        senders = {pod_of(r.user_agent) for r in requests}
        assert len(senders) == 1, f"{node} controlled by {senders}"
        assert senders <= {p.metadata.name for p in pool}
        gaps = [b.monotonic - a.monotonic for a, b in itertools.pairwise(requests)]
        # Once per interval: never twice within half an interval, never a skipped one.
        assert all(0.5 * INTERVAL_S < g < 1.5 * INTERVAL_S for g in gaps), (node, gaps)
        actions = {r.body["action"] for r in requests}
        if node == THROTTLED:
            assert actions == {DVFS}
        else:
            assert actions == {RAPL}
            assert {r.body["capWatts"] for r in requests} == {cap_of(node)}
    assert {pod_of(rs[0].user_agent) for rs in by_node.values()} == {
        p.metadata.name for p in pool
    }  # both shards have nodes


def test_statuses_say_what_was_applied(cluster: Cluster, pool: list[client.V1Pod]) -> None:
    for node in NODES:
        status = cluster.status_of(node)
        assert status["result"] == "applied", (node, status)
        if node == THROTTLED:
            assert status["backend"] == "dvfs"
        else:
            assert status["backend"] == "rapl"
            cap = cap_of(node)
            assert status["message"] == f"RAPL cap {cap:g} W over HTTP: RAPL cap set to {cap:g} W"
            assert status["observed"]["capWatts"] == cap_of(node)


def test_metrics_through_the_service(
    cluster: Cluster, helper: NodeHelper, pool: list[client.V1Pod]
) -> None:
    # From inside the cluster, by the metrics Service's IP: what a scraper does.
    url = f"http://{cluster.cluster_ip(f'{RELEASE}-agent-metrics')}:8080/metrics"
    caps: dict[str, float] = {}
    shards: set[float] = set()
    for page in metrics_of(cluster, helper, url, times=16):
        for family in text_string_to_metric_families(page):
            for sample in family.samples:
                if sample.name == "agentpool_shard_id":
                    shards.add(sample.value)
                if sample.name == "joulie_policy_cap_watts":
                    caps[sample.labels["node"]] = sample.value
    assert shards == {0.0, 1.0}  # the Service reaches both pods
    assert caps == {node: cap_of(node) for node in NODES}


def test_a_deleted_pod_stops_gracefully_and_its_replacement_takes_the_shard_back(
    cluster: Cluster, simulator: Simulator, pool: list[client.V1Pod]
) -> None:
    wait_until(f"{THROTTLED} throttled", lambda: simulator.telemetry(THROTTLED)["throttlePct"] > 0,
               60)
    mark = simulator.now()
    latest = controls(simulator.requests(), mark - 2 * INTERVAL_S)
    victim = pod_of(latest[THROTTLED][-1].user_agent)
    assert victim is not None
    shard = {n for n, rs in latest.items() if pod_of(rs[-1].user_agent) == victim}
    old = cluster.core.read_namespaced_pod(victim, NAMESPACE)
    grace = old.spec.termination_grace_period_seconds

    seen: list[client.V1Pod] = []
    deleted_at: list[datetime] = []
    failed: list[BaseException] = []

    def watch() -> None:
        try:
            events = cluster.watch_pod(victim, timeout_s=grace + 60)
            for kind, pod in events:
                if pod.metadata.uid == old.metadata.uid:
                    seen.append(pod)
                    if kind == "DELETED":
                        deleted_at.append(datetime.now(UTC))
                        break
            events.close()  # ends the watch's request too
        except BaseException as exc:  # reported by the test, not lost with the thread
            failed.append(exc)

    watching = threading.Thread(target=watch, daemon=True)
    watching.start()
    wait_until("the watch to see the pod", lambda: seen, 30, interval=0.1)
    cluster.core.delete_namespaced_pod(victim, NAMESPACE)
    def replaced() -> client.V1Pod | None:
        return next((p for p in cluster.agent_pods() if p.metadata.name == victim
                     and p.metadata.uid != old.metadata.uid and is_ready(p)), None)

    replacement = wait_until(f"a new {victim} Ready", replaced, grace + 120)

    # Stopped by itself, exit 0, before the kubelet's deadline (deletionTimestamp is the
    # deletion request plus the grace period).
    watching.join(grace + 60)
    assert not failed, failed
    terminated = [s.state.terminated for p in seen for s in p.status.container_statuses or []
                  if s.state.terminated is not None]
    deadline = next(p.metadata.deletion_timestamp for p in seen if p.metadata.deletion_timestamp)
    # The throttle it had posted was released before it went: only a graceful stop sends it.
    after = controls(simulator.requests(), mark)
    releases = [r for r in after[THROTTLED]
                if r.body["action"] == DVFS and r.body["throttlePct"] == 0]
    assert releases, "no throttle release for the throttled node"
    if terminated:
        assert terminated[-1].exit_code == 0, terminated[-1]
        assert terminated[-1].finished_at <= deadline
    else:
        # The kubelet may delete a pod before a status showing its container terminated
        # reaches the API, and under load remove the pod object well after its container
        # exited (seen on 1.20 with the main suite beside it: deleted 27 s past the
        # deadline). The release, the workers' last act before the supervisor exits, then
        # tells the stop: it reached the simulator (on this host's clock) before the
        # deadline, which a SIGKILL at the deadline could not make it do. The deadline is
        # written in whole seconds, rounded down: one more second is allowed.
        assert deleted_at, "the old pod was never seen terminated nor deleted"
        assert releases[0].wall <= deadline.timestamp() + 1, (releases[0].wall, deadline)
    release = releases[0].monotonic

    # Then the replacement took the shard back: every node of it controlled again, by the
    # new pod only.

    def shard_back() -> dict[str, list[RecordedRequest]] | None:
        # The old pod's workers all stop at once, the release being their last act.
        by_node = controls(simulator.requests(), release + 1.0)
        return by_node if all(by_node.get(n) for n in shard) else None

    back = wait_until("the replacement to control the shard", shard_back, 120)
    for node in shard:
        assert {pod_of(r.user_agent) for r in back[node]} == {victim}, node
    timing.record("pool: replacement (kubectl delete pod)", replacement,
                  ready_log(cluster, victim))
    assert cluster.unhealthy_events([replacement]) == []
    wait_until("every node's status applied", lambda: all_applied(cluster), 60)
