"""A Joulie user's deployment on a real cluster (issue 41, sections 1-2, acceptance).

Two deployments side by side, each with its own fake nodes (NodeTwin API, HTTP
control at the power simulator, routed by Joulie's ``TELEMETRY_*`` variables):

- agentpool's chart installed by Helm with a values file carrying every key of
  Joulie's chart (``tests/deploy/joulie/values-c38b80d.yaml``: operator,
  scheduler extender, hardware catalog, Grafana dashboard included), in pool mode;
- agentpool's image as Joulie's own chart runs its agent (``tests/support/joulie_chart.py``):
  a StatefulSet with no command and Joulie's environment, as the ServiceAccount
  ``joulie-agent`` bound to Joulie's agent ClusterRole (nodes, nodetwins,
  nodehardwares; no Events, none of the profile API's kinds, whose CRDs the chart
  above installed), in a namespace of its own as a release of Joulie's chart would be
  (its StatefulSet has the name of the pool of agentpool's release ``joulie``).

Both must enforce (the simulator receives each node's cap) and report (NodeTwin
status, NodeHardware), without a restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from agentpool.sim.objects import node_twin, twin_name
from agentpool.sim.poolwatch import pod_of
from agentpool.sim.power.model import RequestKind
from tests.support.joulie_chart import (
    AGENT_ENV,
    SERVICE_ACCOUNT,
    SERVICE_MONITORS,
    STATEFULSET,
    VALUES_DIR,
    agent_rbac,
    pool_env,
)

from .cluster import GROUP, NAMESPACE, RELEASE, VERSION, Cluster, merged, restarts, split_image
from .cluster import wait_until as wait
from .workloads import Simulator

CHART_NODES = ["e2e-jv-0", "e2e-jv-1"]
ROLE_NODES = ["e2e-jr-0", "e2e-jr-1"]
GROUP_LABEL = "agentpool.e2e/joulie"
ROLE_NAME = "agentpool-e2e-joulie-agent"
"""Joulie's agent ClusterRole and binding, under a name the release's own do not use."""
CATALOG = "# a hardware catalog in Joulie's format (its contents are section 3's)\ncpus: []\n"
JOULIE_POD = f"{STATEFULSET}-0"
JOULIE_NAMESPACE = f"{NAMESPACE}-joulie"


@dataclass
class Deployed:
    release: dict[str, Any]
    """The chart's release, as Helm describes it."""
    chart_pod: client.V1Pod


def routing(simulator: Simulator) -> dict[str, str]:
    """Joulie's TELEMETRY_* variables (its example 10's values), at the power simulator."""
    base = simulator.base_url
    return {
        "TELEMETRY_CPU_SOURCE": "http",
        "TELEMETRY_CPU_HTTP_ENDPOINT": f"{base}/telemetry/{{node}}",
        "TELEMETRY_CPU_CONTROL": "http",
        "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT": f"{base}/control/{{node}}",
        "TELEMETRY_GPU_CONTROL": "http",
        "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT": f"{base}/control/{{node}}",
    }


def chart_values(cluster: Cluster, simulator: Simulator) -> dict[str, Any]:
    """The Joulie values file as ``helm -f`` reads it, in pool mode at this cluster's image
    and nodes; a number in ``agent.env``, as Joulie's experiments pass with --set."""
    import helm_python

    values = helm_python.values_from_yaml((VALUES_DIR / "values-c38b80d.yaml").read_text())
    repository, tag = split_image(cluster.settings.image)
    agent = {
        "mode": "pool",
        "image": {"repository": repository, "tag": tag,
                  "pullPolicy": cluster.settings.pull_policy},
        "env": {"RECONCILE_INTERVAL": "2s", "KUBE_CLIENT_QPS": 200, **routing(simulator)},
        "pool": {"replicas": 1, "shards": 1,
                 "nodeSelector": f"joulie.io/managed=true,{GROUP_LABEL}=values"},
    }
    return merged(merged(values, {"agent": agent}), cluster.settings.values)


def joulie_statefulset(cluster: Cluster, simulator: Simulator) -> dict[str, Any]:
    """agentpool's image in the StatefulSet Joulie's chart renders (pool mode, c38b80d)."""
    env = pool_env(1, {**AGENT_ENV, "RECONCILE_INTERVAL": "2s", **routing(simulator)})
    env["POOL_NODE_SELECTOR"] = f"joulie.io/managed=true,{GROUP_LABEL}=role"
    labels = {"app.kubernetes.io/name": "joulie-agent", "app.kubernetes.io/component": "pool"}
    repository, tag = split_image(cluster.settings.image)
    variables: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    variables.insert(3, {"name": "POD_NAME",
                         "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": STATEFULSET, "namespace": JOULIE_NAMESPACE},
        "spec": {
            "serviceName": "joulie-agent-metrics", "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "containers": [{
                        "name": "agent", "image": f"{repository}:{tag}",
                        "imagePullPolicy": cluster.settings.pull_policy,
                        "ports": [{"name": "metrics", "containerPort": 8080,
                                   "protocol": "TCP"}],
                        "env": variables,
                    }],
                },
            },
        },
    }


def control_status(cluster: Cluster, node: str) -> dict[str, Any]:
    try:
        twin = cluster.custom.get_cluster_custom_object(GROUP, VERSION, "nodetwins",
                                                        twin_name(node))
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    cpu: dict[str, Any] = ((twin.get("status") or {}).get("controlStatus") or {}).get("cpu") or {}
    return cpu


def all_applied(cluster: Cluster, nodes: list[str]) -> bool:
    return all(control_status(cluster, n).get("result") == "applied" for n in nodes)


def has_hardware(cluster: Cluster, node: str) -> bool:
    try:
        hw = cluster.custom.get_cluster_custom_object(GROUP, VERSION, "nodehardwares",
                                                      twin_name(node))
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return bool(hw.get("status"))


def pod_get(cluster: Cluster, pod: str, path: str) -> str:
    """GET ``path`` from the port 8080 of a pod of Joulie's namespace (API server proxy)."""
    text: str = cluster.core.connect_get_namespaced_pod_proxy_with_path(
        f"{pod}:8080", JOULIE_NAMESPACE, path.lstrip("/"))
    return text


def _delete(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture(scope="module")
def deployed(cluster: Cluster, simulator: Simulator) -> Iterator[Deployed]:
    started = time.monotonic()
    rbac_api = client.RbacAuthorizationV1Api(cluster.api)
    cluster.add_fake_nodes(CHART_NODES + ROLE_NODES)
    for node in CHART_NODES + ROLE_NODES:
        group = "values" if node in CHART_NODES else "role"
        cluster.core.patch_node(node, {"metadata": {"labels": {GROUP_LABEL: group}}})
    values = chart_values(cluster, simulator)
    catalog = values["hardwareCatalog"]
    cluster.core.create_namespaced_config_map(NAMESPACE, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=catalog["configMapName"]),
        data={catalog["key"]: CATALOG}))
    sa, role, binding = agent_rbac(JOULIE_NAMESPACE, "c38b80d", ROLE_NAME)
    cluster.core.create_namespace(client.V1Namespace(
        metadata=client.V1ObjectMeta(name=JOULIE_NAMESPACE)))
    try:
        # Joulie's first: it starts while Helm installs the other (and the CRDs).
        wait("the namespace's default ServiceAccount", lambda: any(
            a.metadata.name == "default" for a in
            cluster.core.list_namespaced_service_account(JOULIE_NAMESPACE).items), 120)
        cluster.core.create_namespaced_service_account(JOULIE_NAMESPACE, sa)
        rbac_api.create_cluster_role(role)
        rbac_api.create_cluster_role_binding(binding)
        cluster.apps.create_namespaced_stateful_set(JOULIE_NAMESPACE,
                                                    joulie_statefulset(cluster, simulator))
        release = cluster.install(values)  # waits for the pod to be Ready
        for node in CHART_NODES + ROLE_NODES:
            cluster.apply_custom("nodetwins", node_twin(node, cap=110))
        (pod,) = wait("the chart's pod Ready", lambda: cluster.ready_agent_pods(1), 180)
        wait("every node applied", lambda: all_applied(cluster, CHART_NODES + ROLE_NODES), 180)
        print(f"\ntest_joulie: both deployments up, every cap applied, "
              f"{time.monotonic() - started:.0f}s after the start")
        yield Deployed(release, pod)
    finally:
        stopping = time.monotonic()
        _delete(cluster.core.delete_namespace, JOULIE_NAMESPACE)  # its pod stops meanwhile
        cluster.uninstall()
        # The namespace itself goes in its own time; its pod must have stopped.
        wait("Joulie's pool pod gone", lambda: not cluster.core.list_namespaced_pod(
            JOULIE_NAMESPACE).items, 120)
        _delete(rbac_api.delete_cluster_role_binding, ROLE_NAME)
        _delete(rbac_api.delete_cluster_role, ROLE_NAME)
        _delete(cluster.core.delete_namespaced_config_map, catalog["configMapName"], NAMESPACE)
        for node in CHART_NODES + ROLE_NODES:
            cluster.delete_custom("nodetwins", twin_name(node))
            cluster.delete_custom("nodehardwares", twin_name(node))
        cluster.delete_fake_nodes()
        print(f"\ntest_joulie: both deployments gone {time.monotonic() - stopping:.0f}s after "
              f"the tests")


def senders(simulator: Simulator, nodes: list[str]) -> dict[str, set[str]]:
    """Node -> the pods that sent it control requests in the last few seconds, once each
    node has some."""
    since = simulator.now() - 5

    def controlled() -> dict[str, set[str]] | None:
        out: dict[str, set[str]] = {n: set() for n in nodes}
        for r in simulator.requests():
            if r.kind is RequestKind.CONTROL and r.node in out and r.monotonic >= since:
                out[r.node].add(str(pod_of(r.user_agent)))
        return out if all(out.values()) else None

    return wait(f"control requests for {nodes}", controlled, 30)


def test_the_chart_installs_with_every_key_of_joulies_values_and_enforces(
    cluster: Cluster, simulator: Simulator, deployed: Deployed
) -> None:
    pod = deployed.chart_pod
    assert restarts(pod) == 0
    release = deployed.release
    notes = release.get("notes") or (release.get("info") or {}).get("notes")
    assert isinstance(notes, str), sorted(release)
    assert "Ignored: operator, schedulerExtender, grafanaDashboard" in notes
    # Enforcing: every cap at the simulator, from the chart's pod only; reporting.
    sent = senders(simulator, CHART_NODES)
    assert all(s == {pod.metadata.name} for s in sent.values()), sent
    for node in CHART_NODES:
        assert control_status(cluster, node)["backend"] == "rapl"
        assert simulator.telemetry(node)["capWatts"] == 110
        wait(f"{node}'s NodeHardware", lambda n=node: has_hardware(cluster, n), 60)  # type: ignore[misc]
    # hardwareCatalog: the ConfigMap mounted, its path passed, as in Joulie's chart.
    path = cluster.exec(pod.metadata.name, ["sh", "-c", 'cat "$HARDWARE_CATALOG_PATH"'])
    assert path == CATALOG


def test_joulies_service_monitors_select_the_metrics_service(
    cluster: Cluster, deployed: Deployed
) -> None:
    for match_labels, port in SERVICE_MONITORS.values():
        selector = ",".join(f"{k}={v}" for k, v in match_labels.items())
        services = cluster.core.list_namespaced_service(NAMESPACE, label_selector=selector).items
        assert [s.metadata.name for s in services] == [f"{RELEASE}-agent-metrics"]
        (service,) = services
        assert [p.name for p in service.spec.ports] == [port]
        endpoints = cluster.core.read_namespaced_endpoints(service.metadata.name, NAMESPACE)
        ips = {a.ip for s in endpoints.subsets or [] for a in s.addresses or []}
        assert ips == {deployed.chart_pod.status.pod_ip}
    page = cluster.service_get(f"{RELEASE}-agent-metrics", 8080, "/metrics").decode()
    caps = {(s.labels["node"], s.labels["policy"]): s.value
            for f in text_string_to_metric_families(page) for s in f.samples
            if s.name == "joulie_policy_cap_watts"}
    assert caps == {(n, twin_name(n)): 110.0 for n in CHART_NODES}


def test_agentpool_under_joulies_role_and_env_enforces_and_reports(
    cluster: Cluster, simulator: Simulator, deployed: Deployed
) -> None:
    pod = cluster.core.read_namespaced_pod(JOULIE_POD, JOULIE_NAMESPACE)
    assert pod.spec.containers[0].command is None  # the image's entrypoint, as in Joulie's
    sent = senders(simulator, ROLE_NODES)
    assert all(s == {JOULIE_POD} for s in sent.values()), sent
    for node in ROLE_NODES:
        assert simulator.telemetry(node)["capWatts"] == 110
        wait(f"{node}'s NodeHardware", lambda n=node: has_hardware(cluster, n), 60)  # type: ignore[misc]
    # A change of the desired state is followed.
    cluster.custom.patch_cluster_custom_object(
        GROUP, VERSION, "nodetwins", twin_name(ROLE_NODES[0]),
        {"spec": {"cpu": {"packagePowerCapWatts": 95}}})
    wait("the new cap at the simulator",
         lambda: simulator.telemetry(ROLE_NODES[0])["capWatts"] == 95, 30)
    # What the role forbids is said in /readyz's detail and once in the log; no restart.
    def refusal_said() -> str | None:
        body = pod_get(cluster, JOULIE_POD, "/readyz")
        return body if "Node events are not recorded" in body else None

    readyz = wait("the Events refusal in /readyz", refusal_said, 60)
    assert readyz.startswith("ok; not watched: nodepowerprofiles.joulie.io, "
                             "telemetryprofiles.joulie.io"), readyz
    def logged() -> str | None:  # the runtime copies the container's output in its time
        text: str = cluster.core.read_namespaced_pod_log(JOULIE_POD, JOULIE_NAMESPACE)
        return text if "Node events are not recorded" in text else None

    log = wait("the Events refusal in the log", logged, 30)
    assert log.count("Node events are not recorded") == 1, log
    assert "list nodepowerprofiles: HTTP 403" not in log
    assert "list telemetryprofiles: HTTP 403" not in log
    assert restarts(cluster.core.read_namespaced_pod(JOULIE_POD, JOULIE_NAMESPACE)) == 0
