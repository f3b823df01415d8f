"""An elastic pool on a real kube-apiserver as the chart's ServiceAccount, RBAC enforced.

The chart is rendered with ``agent.pool.membership: lease``; its ClusterRole,
Role and bindings are applied, and the pods authenticate with a token of its
ServiceAccount. What the chart forgot to grant for Leases or the
StatefulSet fails here; what it grants beyond that is refused here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentpool.sim.apiserver.errors import ApiError
from agentpool.sim.cluster import SimCluster
from agentpool.sim.clusterapi import ClusterApi
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from agentpool.sim.poolwatch import PoolDriver, Timings
from tests.support.chart import CHART_DIR, NAMESPACE, load_helm, parse_manifests

# Real processes and servers: minutes on 2 busy cores, above the default per-test limit.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
NODES = [f"elastic-{i}" for i in range(10)]


@pytest.fixture(scope="module")
def lease_account(envtest_server: EnvtestServer) -> Iterator[tuple[str, str]]:
    helm = load_helm()
    values = {"agent": {"mode": "pool", "pool": {"membership": "lease"}}}
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = parse_manifests(chart.render(values, name="joulie", namespace=NAMESPACE))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    objects = [namespace, *(o for o in rendered if o["kind"] in RBAC_KINDS)]
    assert {o["kind"] for o in objects} >= {"Role", "RoleBinding"}
    envtest_server.api().apply(objects)
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    yield NAMESPACE, account["metadata"]["name"]
    admin = envtest_server.api()
    for obj in reversed(objects[1:]):
        admin.delete(f"{obj['kind']}.{obj['apiVersion']}", obj["metadata"]["name"],
                     obj["metadata"].get("namespace"))


def as_agent(server: EnvtestServer, account: tuple[str, str], tmp: Path) -> ClusterApi:
    config = server.service_account_kubeconfig(tmp / "sa-kubeconfig", *account)
    token = config.read_text().split('"token": "')[1].split('"')[0]
    return ClusterApi(server.url, token, server.ssl_context())


def test_an_elastic_pool_scales_as_the_service_account_with_least_privilege(
    envtest_server: EnvtestServer, lease_account: tuple[str, str], tmp_path: Path
) -> None:
    with SimCluster(server=envtest_server, service_account=lease_account) as cluster:
        for node in NODES:
            cluster.add_node(node)
        pool = PoolDriver(cluster, NODES, Timings(), namespace=NAMESPACE)
        try:
            for replicas in (2, 3):
                since = time.monotonic()
                pool.scale(replicas)
                for ordinal in range(replicas):
                    if f"{pool.name}-{ordinal}" not in pool.pods:
                        pool.start(ordinal)
                members = pool.members(replicas)
                wait_until(lambda m=members, s=since: pool.converged(m, s), 60)  # type: ignore[misc]
            logs = "".join(agent.logs() for agent in pool.pods.values())
            assert "HTTP 403" not in logs  # not a port number such as 40303
            assert "Forbidden" not in logs
            agent = as_agent(envtest_server, lease_account, tmp_path)

            def lease_names() -> set[str]:
                return {lease["metadata"]["name"]
                        for lease in agent.list("leases", namespace=NAMESPACE)}

            # Waited for, not read once: a pod that the hash gives none of the 10 nodes
            # ((2/3)^10, 1.7 % of pool names) leaves the pool converged before its first
            # renewal has written its Lease.
            wait_until(lambda: lease_names() >= set(pool.members(3)), 30)
            refused: list[Any] = [
                # It may read its StatefulSet, never resize it: that is the operator's call.
                lambda: agent.patch("statefulsets", pool.name, {"spec": {"replicas": 9}},
                                    namespace=NAMESPACE),
                lambda: agent.patch("statefulsets", pool.name, {"spec": {"replicas": 9}},
                                    subresource="scale", namespace=NAMESPACE),
                lambda: agent.delete("leases", f"{pool.name}-0", namespace=NAMESPACE),
                # Leases elsewhere are none of its business.
                lambda: agent.list("leases", namespace="default"),
            ]
            for attempt in refused:
                with pytest.raises(ApiError) as caught:
                    attempt()
                assert caught.value.code == 403, caught.value.message
        finally:
            pool.cleanup()
