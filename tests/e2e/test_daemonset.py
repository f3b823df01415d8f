"""Daemonset mode on a real node: the chart's DaemonSet, privileged, writing RAPL limits.

The node's real ``/sys`` must not be written by a test (and this machine has no RAPL):
the DaemonSet mounts a sysfs-shaped tree the helper makes on the node instead
(``agent.hostSysPath``, the chart value for labs). A NodePowerProfile caps the node; with
no TelemetryProfile the agent controls the host. The kubelet's part is what is tested:
the downward API's ``NODE_NAME``, the hostPath mount, SIGTERM and its grace period on a
pod deletion, the liveness probe of a frozen supervisor, the emptyDir journal across a
container restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from . import timing
from .cluster import NAMESPACE, RELEASE, Cluster, is_ready, restarts, wait_until
from .workloads import NodeHelper, metrics_of, ready_log

CAP_W = 120.0
PACKAGES = 2


@dataclass
class Host:
    node: str
    tree: str
    """The tree's path on the node (agent.hostSysPath)."""
    originals: dict[str, int]
    """Each package's PL1 file (relative to the tree) -> the value it had before the agent."""
    port: int


def capped(helper: NodeHelper, host: Host) -> bool:
    limits = helper.read(host.tree, list(host.originals))
    return set(limits.values()) == {int(CAP_W * 1_000_000)}


def agent_pod(cluster: Cluster) -> client.V1Pod | None:
    pods = [p for p in cluster.agent_pods() if p.metadata.deletion_timestamp is None]
    return pods[0] if len(pods) == 1 and is_ready(pods[0]) else None


@pytest.fixture(scope="module")
def host(cluster: Cluster, helper: NodeHelper) -> Iterator[Host]:
    tree, originals = helper.make_tree("sys")
    assert len(originals) == PACKAGES
    assert len(set(originals.values()) | {int(CAP_W * 1_000_000)}) > 1
    chosen = Host(helper.node, tree, originals, helper.free_port())
    npp = {
        "apiVersion": "joulie.io/v1alpha1", "kind": "NodePowerProfile",
        "metadata": {"name": chosen.node},
        "spec": {"nodeName": chosen.node, "profile": "eco",
                 "cpu": {"packagePowerCapWatts": CAP_W}, "policy": {"name": "e2e"}},
    }
    # The node under test only (in a cluster of several the tree is on this one), and a
    # port free on its host network (hostNetwork is the default).
    cluster.install(cluster.values(
        hostSysPath=tree,
        nodeSelector={"kubernetes.io/hostname": chosen.node},
        env={"METRICS_ADDR": f":{chosen.port}"},
    ))
    try:
        cluster.apply_custom("nodepowerprofiles", npp)
        pod = wait_until("the DaemonSet's pod Ready", lambda: agent_pod(cluster), 180)
        timing.record("daemonset: helm install", pod, ready_log(cluster, pod.metadata.name))
        yield chosen
    finally:
        cluster.uninstall()
        cluster.delete_custom("nodepowerprofiles", chosen.node)


def test_the_cap_is_written_to_the_hosts_rapl_limits(
    cluster: Cluster, helper: NodeHelper, host: Host
) -> None:
    wait_until("the PL1 limits capped", lambda: capped(helper, host), 60)
    pod = agent_pod(cluster)
    assert pod is not None
    assert pod.spec.node_name == host.node
    assert restarts(pod) == 0
    assert cluster.unhealthy_events([pod]) == []
    # Its metrics say the same, on the node's address (host network).
    (page,) = metrics_of(cluster, helper, f"http://127.0.0.1:{host.port}/metrics")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(page) for s in f.samples}
    assert samples[("joulie_backend_mode", (("mode", "rapl"), ("node", host.node)))] == 1.0
    # Labelled with the NodePowerProfile's name, as Joulie's agent does.
    cap = ("joulie_policy_cap_watts", (("node", host.node), ("policy", host.node)))
    assert samples[cap] == CAP_W


def test_a_frozen_supervisor_is_restarted_by_the_kubelet(
    cluster: Cluster, helper: NodeHelper, host: Host
) -> None:
    pod = agent_pod(cluster)
    assert pod is not None
    helper.freeze(pod.status.container_statuses[0].container_id)  # SIGSTOP its PID 1
    grace = pod.spec.termination_grace_period_seconds
    probe = pod.spec.containers[0].liveness_probe
    budget = probe.period_seconds * (probe.failure_threshold + 1) + grace + 120
    def restarted() -> client.V1Pod | None:
        current = agent_pod(cluster)
        return current if current is not None and restarts(current) >= 1 else None

    again = wait_until("the kubelet to restart the container", restarted, budget)
    assert again.metadata.uid == pod.metadata.uid  # the same pod, a new container
    last = again.status.container_statuses[0].last_state.terminated
    assert last is not None
    assert last.exit_code == 137  # SIGKILL at the end of the grace period: it was stopped
    # Frozen, it answers no probe: liveness restarts it (readiness fails meanwhile too).
    events = cluster.unhealthy_events([pod])
    assert any("Liveness probe failed" in e for e in events), events
    timing.record("daemonset: restart after liveness", again,
                  ready_log(cluster, again.metadata.name))
    # The new container found the originals in the journal (an emptyDir outlives it) and
    # enforces the cap again; the last test checks it restores those, not the cap.
    wait_until("the PL1 limits capped again", lambda: capped(helper, host), 60)


def test_a_deleted_pod_restores_the_limits_it_found_and_so_does_uninstall(
    cluster: Cluster, helper: NodeHelper, host: Host
) -> None:
    old = agent_pod(cluster)
    assert old is not None
    # Watched from the node while the pod goes: the originals come back before the
    # DaemonSet's next pod starts (and caps the node again).
    restored = helper.watch_for(host.tree, host.originals,
                                old.spec.termination_grace_period_seconds)
    last_words = cluster.follow_logs(old.metadata.name)
    cluster.core.delete_namespaced_pod(old.metadata.name, NAMESPACE)
    assert restored() is not None, (
        "the limits found at start were not put back on the pod's SIGTERM; its log:\n"
        + last_words())
    def replaced() -> client.V1Pod | None:
        current = agent_pod(cluster)
        return current if current is not None and current.metadata.uid != old.metadata.uid else None

    new = wait_until("the DaemonSet's new pod Ready", replaced,
                     old.spec.termination_grace_period_seconds + 120)
    timing.record("daemonset: replacement (kubectl delete pod)", new,
                  ready_log(cluster, new.metadata.name))
    wait_until("the PL1 limits capped by the new pod", lambda: capped(helper, host), 60)
    assert cluster.unhealthy_events([new]) == []
    # The new pod journals what it finds before its first write: had the old one not
    # restored the originals on SIGTERM, it would have found (and would now restore)
    # the cap instead.
    cluster.uninstall()
    assert helper.read(host.tree, list(host.originals)) == host.originals
    assert f"{RELEASE}-agent" not in {
        d.metadata.name for d in cluster.apps.list_namespaced_daemon_set(NAMESPACE).items
    }
