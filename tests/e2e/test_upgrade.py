"""``helm upgrade`` from chart 0.1.0 on a real cluster, as the chart's README says to do it.

Chart 0.2.0 gives the agent pods Joulie's label, ``app.kubernetes.io/name: joulie-agent``
(Joulie's docs and its agent Service select them by it: ``POD_SELECTORS``), which is in
the selector of their DaemonSet or StatefulSet, and a selector cannot change. From a
release of 0.1.0 (``PREVIOUS_CHART``, the packaged chart, installed by Helm), in each
mode:

- ``helm upgrade`` to this chart is refused before anything is applied, naming the
  command that replaces the workload; the running pods are untouched;
- that command (``kubectl delete <kind> <name> --cascade=foreground``) returns once the
  old pods are gone, each having put back what it changed: the DaemonSet's PL1 limits
  are the originals again before the new pod starts, which is why the new pod journals
  the originals and puts them back at the end;
- ``helm upgrade`` again: the new pods are Ready, found by Joulie's selectors and by
  the selectors agentpool's docs print (which never named ``app.kubernetes.io/name``),
  enforce the caps, and sit behind the metrics Service.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentpool.sim.power.model import RequestKind
from tests.support.chart import PREVIOUS_CHART
from tests.support.joulie_chart import POD_SELECTORS

from . import timing
from .cluster import NAMESPACE, RELEASE, Cluster, restarts, wait_until
from .workloads import NodeHelper, Simulator, all_applied_on, profiles_for, ready_log

INTERVAL_S = 4.0
NODES = [f"e2e-upgrade-{i}" for i in range(4)]
CAP_W = 120.0
OLD_SELECTOR = ("app.kubernetes.io/name=joulie,app.kubernetes.io/instance=joulie,"
                "app.kubernetes.io/component=agent")
"""The agent pods' selector in chart 0.1.0."""
DOCS_SELECTORS = (
    # What agentpool's docs and NOTES.txt have users type, before and after 0.2.0:
    # docs/deploy.md and charts/joulie/README.md; NOTES.txt.
    "app.kubernetes.io/component=agent",
    "app.kubernetes.io/instance=joulie,app.kubernetes.io/component=agent",
)


def agent_pods_by(cluster: Cluster, selectors: list[str]) -> set[tuple[str, ...]]:
    """The distinct answers of these selectors (one element when they all agree)."""
    return {tuple(cluster.pods_selected(s)) for s in selectors}


def refused_upgrade(cluster: Cluster, values: dict[str, object], kind: str, name: str) -> None:
    """``helm upgrade`` to this chart, refused with the way out; nothing changed."""
    import helm_python

    before = {p.metadata.uid: restarts(p) for p in cluster.agent_pods()}
    assert before
    with pytest.raises(helm_python.HelmError) as refused:
        cluster.upgrade(values)
    assert (f"kubectl -n {NAMESPACE} delete {kind} {name} --cascade=foreground"
            in str(refused.value))
    assert cluster.revisions() == [(1, "0.1.0", "deployed")]
    assert {p.metadata.uid: restarts(p) for p in cluster.agent_pods()} == before


def delete_foreground(cluster: Cluster, kind: str, name: str, timeout_s: float) -> None:
    """What ``kubectl delete <kind> <name> --cascade=foreground`` does: a DELETE with
    propagationPolicy Foreground, then wait until the object is gone (its pods first:
    the garbage collector removes the owner only once they are). How long it took is
    reported: the docs quote it."""
    started = time.monotonic()
    read, delete = {
        "daemonset": (cluster.apps.read_namespaced_daemon_set,
                      cluster.apps.delete_namespaced_daemon_set),
        "statefulset": (cluster.apps.read_namespaced_stateful_set,
                        cluster.apps.delete_namespaced_stateful_set),
    }[kind]
    delete(name, NAMESPACE, propagation_policy="Foreground")

    def gone() -> bool:
        try:
            read(name, NAMESPACE)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    wait_until(f"the {kind} {name} to be gone", gone, timeout_s)
    timing.note(f"upgrade 0.1.0 -> 0.2.0: delete {kind} --cascade=foreground took "
                f"{time.monotonic() - started:.1f}s")


def check_upgraded(cluster: Cluster, count: int, what: str) -> list[client.V1Pod]:
    """The new pods: Ready, labelled as Joulie's, found by every selector users have."""
    pods = wait_until(f"{count} agent pods Ready", lambda: cluster.ready_agent_pods(count), 180)
    names = tuple(sorted(p.metadata.name for p in pods))
    for pod in pods:
        assert pod.metadata.labels["app.kubernetes.io/name"] == "joulie-agent"
        assert restarts(pod) == 0
        timing.record(what, pod, ready_log(cluster, pod.metadata.name))
    assert agent_pods_by(cluster, list(POD_SELECTORS.values())) == {names}
    assert agent_pods_by(cluster, list(DOCS_SELECTORS)) == {names}
    assert cluster.pods_selected(OLD_SELECTOR) == []
    assert cluster.revisions()[-1] == (2, "0.2.0", "deployed")
    # The metrics Service's selector followed the upgrade: it has these pods behind it.
    endpoints = cluster.core.read_namespaced_endpoints(f"{RELEASE}-agent-metrics", NAMESPACE)
    behind = {a.target_ref.name for s in endpoints.subsets or [] for a in s.addresses or []}
    assert behind == set(names)
    # A startup probe that finds the port not yet open is what a startup probe is for (the
    # new pods start while the machine is busy): any other failed probe is a failure.
    failed = [e for e in cluster.unhealthy_events(pods) if "Startup probe failed" not in e]
    assert failed == []
    return pods


@pytest.fixture
def pool_nodes(cluster: Cluster) -> Iterator[list[str]]:
    """Fake nodes, their profiles (once a chart has installed the CRDs) removed after."""
    cluster.add_fake_nodes(NODES)
    try:
        yield NODES
    finally:
        cluster.remove_pool(NODES)


def test_pool_upgrade_from_0_1_0(
    cluster: Cluster, simulator: Simulator, pool_nodes: list[str]
) -> None:
    values = cluster.values(mode="pool", env={"RECONCILE_INTERVAL": f"{INTERVAL_S:g}s"})
    statefulset = f"{RELEASE}-agent-pool"
    cluster.install(values, chart=PREVIOUS_CHART)
    for node in pool_nodes:  # the chart installed the CRDs
        npp, tp = profiles_for(node, simulator.base_url, CAP_W, "auto")
        cluster.apply_custom("nodepowerprofiles", npp)
        cluster.apply_custom("telemetryprofiles", tp)
    old = wait_until("2 pool pods Ready", lambda: cluster.ready_agent_pods(2), 180)
    wait_until("every node's status applied", lambda: all_applied_on(cluster, pool_nodes), 120)
    # What 0.1.0 left Joulie's users with: their selectors find no agent pod.
    assert agent_pods_by(cluster, list(POD_SELECTORS.values())) == {()}
    assert cluster.pods_selected(OLD_SELECTOR) == [p.metadata.name for p in old]

    refused_upgrade(cluster, values, "statefulset", statefulset)

    grace = old[0].spec.termination_grace_period_seconds
    delete_foreground(cluster, "statefulset", statefulset, grace + 60)
    stopped = simulator.now()
    assert cluster.pods_selected(OLD_SELECTOR) == []  # gone before the command returned
    cluster.upgrade(values)
    check_upgraded(cluster, 2, "upgrade 0.1.0 -> 0.2.0: pool")
    wait_until("every node's status applied", lambda: all_applied_on(cluster, pool_nodes), 120)

    # Every node capped again by the new pods; how long none was controlled is reported.
    def controlled_again() -> dict[str, float] | None:
        first: dict[str, float] = {}
        for r in simulator.requests():
            if (r.kind is RequestKind.CONTROL and r.node in pool_nodes
                    and r.monotonic > stopped and r.body.get("capWatts") == CAP_W):
                first.setdefault(r.node, r.monotonic)
        return first if len(first) == len(pool_nodes) else None

    first = wait_until("a control request for every node", controlled_again, 60)
    last_old = {
        node: max(r.monotonic for r in simulator.requests()
                  if r.kind is RequestKind.CONTROL and r.node == node and r.monotonic <= stopped)
        for node in pool_nodes
    }
    gap = max(first[n] - last_old[n] for n in pool_nodes)
    timing.note(f"upgrade 0.1.0 -> 0.2.0: pool nodes uncontrolled for at most {gap:.1f}s")


def test_daemonset_upgrade_from_0_1_0(cluster: Cluster, helper: NodeHelper) -> None:
    tree, originals = helper.make_tree("upgrade-sys")
    port = helper.free_port()
    npp = {
        "apiVersion": "joulie.io/v1alpha1", "kind": "NodePowerProfile",
        "metadata": {"name": helper.node},
        "spec": {"nodeName": helper.node, "profile": "eco",
                 "cpu": {"packagePowerCapWatts": CAP_W}, "policy": {"name": "e2e"}},
    }
    capped = {path: int(CAP_W * 1_000_000) for path in originals}
    assert capped != originals
    values = cluster.values(hostSysPath=tree, nodeSelector={"kubernetes.io/hostname": helper.node},
                            env={"METRICS_ADDR": f":{port}"})
    daemonset = f"{RELEASE}-agent"
    cluster.install(values, chart=PREVIOUS_CHART)
    try:
        cluster.apply_custom("nodepowerprofiles", npp)
        (old,) = wait_until("the DaemonSet's pod Ready", lambda: cluster.ready_agent_pods(1), 180)
        wait_until("the PL1 limits capped", lambda: helper.read(tree, list(originals)) == capped,
                   60)

        refused_upgrade(cluster, values, "daemonset", daemonset)

        grace = old.spec.termination_grace_period_seconds
        restored = helper.watch_for(tree, originals, grace + 60)
        delete_foreground(cluster, "daemonset", daemonset, grace + 60)
        assert restored() is not None, "the old pod did not put the originals back"
        assert cluster.pods_selected(OLD_SELECTOR) == []
        cluster.upgrade(values)
        check_upgraded(cluster, 1, "upgrade 0.1.0 -> 0.2.0: daemonset")
        wait_until("the PL1 limits capped by the new pod",
                   lambda: helper.read(tree, list(originals)) == capped, 60)
        # The new pod found the originals (the old one had put them back before it
        # started), so that is what it leaves.
        cluster.uninstall()
        assert helper.read(tree, list(originals)) == originals
    finally:
        cluster.uninstall()
        cluster.delete_custom("nodepowerprofiles", helper.node)
