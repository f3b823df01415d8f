"""The real agent on a real kube-apiserver, as the chart's ServiceAccount, RBAC enforced.

The chart is rendered by the Helm engine in both modes; its ServiceAccount,
ClusterRole and ClusterRoleBinding are applied to the server, and every agent
here authenticates with a TokenRequest token of that ServiceAccount, exactly
as a pod's projected token. Anything the chart forgot to grant, or anything
the agent writes that the CRDs do not declare, fails here and nowhere else.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from agentpool.pool.assignment import shard_of
from agentpool.sim.apiserver.errors import ApiError
from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from agentpool.sim.sysfs.trees import read_int
from tests.envtest.accounts import as_agent, chart_account
from tests.support.agents import (
    host_cluster,
    joulie_nodes,
    live_worker_pids,
    node_apis,
    pl1_files,
    worker_pids,
)

STATUS_KEYS = {"backend", "result", "message", "observed", "updatedAt"}
"""What the agent writes under status.control.cpu: each must survive the server's pruning."""


@pytest.fixture(scope="module", params=["pool", "daemonset"])
def service_account(
    request: pytest.FixtureRequest, envtest_server: EnvtestServer
) -> Iterator[tuple[str, str]]:
    """(namespace, name) of the chart's ServiceAccount, its RBAC applied for that mode."""
    with chart_account(envtest_server, request.param) as account:
        yield account


def test_the_agents_service_account_may_do_its_job_and_nothing_more(
    envtest_server: EnvtestServer, service_account: tuple[str, str], tmp_path: Any
) -> None:
    with SimCluster(server=envtest_server) as cluster:
        cluster.add_node("rbac-0")
        agent = as_agent(envtest_server, service_account, tmp_path)
        # What it needs: read nodes and both profile kinds, write profile status.
        assert [n["metadata"]["name"] for n in agent.list("nodes")] == ["rbac-0"]
        assert len(agent.list("nodepowerprofiles")) == 1
        agent.patch("telemetryprofiles", "rbac-0",
                    {"status": {"control": {"cpu": {"result": "none"}}}}, subresource="status")
        # What it must not: the profile itself, the desired state, the node.
        refused = [
            lambda: agent.patch("telemetryprofiles", "rbac-0", {"spec": {"sources": {}}}),
            lambda: agent.patch("nodepowerprofiles", "rbac-0", {"spec": {"profile": "eco"}}),
            lambda: agent.create("nodepowerprofiles", {"metadata": {"name": "x"}, "spec": {
                "nodeName": "x", "profile": "eco"}}),
            lambda: agent.patch("nodes", "rbac-0", {"metadata": {"labels": {"x": "y"}}}),
            lambda: agent.delete("nodes", "rbac-0"),
        ]
        for attempt in refused:
            with pytest.raises(ApiError) as caught:
                attempt()
            assert caught.value.code == 403, caught.value.message


def test_pool_of_three_shards_controls_every_node_once_as_the_service_account(
    envtest_server: EnvtestServer, service_account: tuple[str, str]
) -> None:
    managed = [f"real-{i}" for i in range(12)]
    with SimCluster(server=envtest_server, service_account=service_account) as cluster:
        for name in managed:
            cluster.add_node(name)
        cluster.add_node("real-unmanaged", managed=False)
        agents = [cluster.start_agent({"POOL_SHARDS": "3", "POOL_SHARD_ID": str(i)})
                  for i in range(3)]
        for agent in agents:
            agent.wait_ready(60)
        owned = wait_until(
            lambda: o if set().union(*(o := [worker_pids(a) for a in agents])) == set(managed)
            else None, 60,
        )
        for shard, workers in enumerate(owned):
            assert all(shard_of(n, 3) == shard for n in workers)
        wait_until(lambda: all(cluster.status(n).get("result") == "applied" for n in managed), 60)
        # Everything the agent wrote survived the server's pruning.
        for name in managed:
            assert set(cluster.status(name)) == STATUS_KEYS
            assert cluster.status(name)["observed"]["capWatts"] == 120
        assert cluster.status("real-unmanaged") == {}
        total: Counter[str] = Counter()
        for agent in agents:
            total.update(joulie_nodes(agent.metrics()))
        assert total == Counter(dict.fromkeys(managed, 1))
        # The chart's defaults (JOULIE_API=auto, all four CRDs served): the profile API.
        follows = {node: api for agent in agents for node, api in node_apis(agent).items()}
        assert follows == dict.fromkeys(managed, "profiles")
        # The agent logs a refused request as "HTTP 403"; a bare "403" also matches pids
        # (30403) and milliseconds of timestamps.
        assert "HTTP 403" not in "".join(a.logs() for a in agents)

        # A profile change and a label removal reach the right shard.
        changed_at = time.monotonic()
        cluster.set_cap("real-0", 95, profile="performance")
        wait_until(lambda: any(
            r.body and r.body.get("capWatts") == 95 and r.monotonic >= changed_at
            for r in cluster.power.requests(node="real-0", kind="control")), 20)
        cluster.set_labels("real-1", {"joulie.io/managed": None})
        wait_until(lambda: "real-1" not in set().union(*(worker_pids(a) for a in agents)), 20)
        wait_until(lambda: cluster.status("real-1").get("result") == "none", 20)
        for agent in agents:
            assert agent.terminate() == 0


def test_daemonset_mode_controls_its_node_and_restores_it_on_sigterm(
    envtest_server: EnvtestServer, service_account: tuple[str, str]
) -> None:
    with SimCluster(server=envtest_server, service_account=service_account) as cluster:
        template, trees = host_cluster(cluster, ["ds-0", "ds-1"])
        originals = {p: read_int(p) for p in pl1_files(trees)}
        agent = cluster.start_agent(
            {"AGENT_MODE": "daemonset", "NODE_NAME": "ds-1", "SYSFS_ROOT": template}
        )
        agent.wait_ready(60)
        wait_until(lambda: cluster.status("ds-1").get("result") == "applied", 30)
        live_worker_pids(agent, {"ds-1"})
        assert cluster.status("ds-0") == {}
        ds1 = [p for p in originals if "/ds-1/" in str(p)]
        assert all(read_int(p) == 50_000_000 for p in ds1)
        assert agent.terminate(timeout=30) == 0
        assert {p: read_int(p) for p in originals} == originals
        assert cluster.status("ds-1")["message"] == "agent stopped; host limits restored"


def test_an_api_server_restart_with_the_data_kept_is_ridden_out(
    envtest_server: EnvtestServer, service_account: tuple[str, str]
) -> None:
    with SimCluster(server=envtest_server, service_account=service_account) as cluster:
        for name in ("restart-0", "restart-1"):
            cluster.add_node(name)
        agent = cluster.start_agent()
        agent.wait_ready(60)
        wait_until(lambda: cluster.status("restart-0").get("result") == "applied", 30)
        pids = live_worker_pids(agent, ("restart-0", "restart-1"))
        envtest_server.stop_apiserver()
        wait_until(lambda: agent.get("/readyz", timeout=2)[0] == 503, 60)
        envtest_server.start_apiserver()
        # Measured: ready again within 0.1 s of the server on an idle machine; the bound
        # allows the informers' capped backoff (60 s) after a long outage on a loaded one.
        try:
            wait_until(lambda: agent.get("/readyz", timeout=2)[0] == 200, 150)
        except TimeoutError as exc:
            raise AssertionError(f"{agent.get('/readyz')[1]}\n{agent.logs()[-4000:]}") from exc
        # The caches resumed (relisting after the 410 a restarted server answers) ...
        changed_at = time.monotonic()
        cluster.set_cap("restart-1", 77)
        wait_until(lambda: any(
            r.body and r.body.get("capWatts") == 77 and r.monotonic >= changed_at
            for r in cluster.power.requests(node="restart-1", kind="control")), 30)
        # ... and no worker was restarted for it.
        assert worker_pids(agent) == pids
        assert agent.terminate() == 0
