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
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from agentpool.sim.poolwatch import PoolDriver, Timings
from tests.envtest.accounts import as_agent, chart_account, chart_rbac
from tests.support.chart import NAMESPACE

# Real processes and servers: minutes on 2 busy cores, above the default per-test limit.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

NODES = [f"elastic-{i}" for i in range(10)]


@pytest.fixture(scope="module")
def lease_account(envtest_server: EnvtestServer) -> Iterator[tuple[str, str]]:
    lease = {"pool": {"membership": "lease"}}
    assert {o["kind"] for o in chart_rbac("pool", agent=lease)} >= {"Role", "RoleBinding"}
    with chart_account(envtest_server, "pool", agent=lease) as account:
        yield account


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
