"""Both Joulie APIs on a real kube-apiserver, with the chart's CRDs, RBAC and default values.

The agent authenticates as the chart's ServiceAccount with the RBAC of
``joulie.api=auto`` (the default). One node follows its NodeTwin while it
also has a NodePowerProfile; the NodeTwin CRD is then deleted while the agent
runs (the server deletes every NodeTwin with it) and the node falls back to
its profile without a gap; the CRD is installed again and a new twin is
followed, all without a restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agentpool.sim.cluster import SimCluster
from agentpool.sim.clusterapi import chart_crds
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.objects import node_twin
from agentpool.sim.polling import wait_until
from agentpool.sim.power.model import RAPL_ACTION
from tests.envtest.accounts import chart_account
from tests.support.agents import MOVED, node_apis, tp_status, twin_status, worker_pids

CRD = "CustomResourceDefinition.apiextensions.k8s.io/v1"


@pytest.fixture(scope="module")
def auto_account(envtest_server: EnvtestServer) -> Iterator[tuple[str, str]]:
    """The chart's ServiceAccount with the RBAC of its default values (joulie.api=auto)."""
    with chart_account(envtest_server, "pool") as account:
        yield account


def served(server: EnvtestServer, plural: str) -> bool:
    resources = server.api().request("GET", "/apis/joulie.io/v1alpha1").get("resources", [])
    return any(r.get("name") == plural for r in resources)


def test_a_crd_deleted_and_installed_again_while_the_agent_runs(
    envtest_server: EnvtestServer, auto_account: tuple[str, str]
) -> None:
    try:
        with SimCluster(server=envtest_server, service_account=auto_account) as cluster:
            cluster.add_node("both-0", cap=130)  # NodePowerProfile + TelemetryProfile (HTTP)
            cluster.add_node("prof-0", cap=120)
            cluster.api.create("nodetwins", node_twin("both-0", cap=140))
            agent = cluster.start_agent()  # the chart's defaults: JOULIE_API unset
            agent.wait_ready(60)
            wait_until(lambda: cluster.power.state("both-0").cap_watts == 140, 60)
            wait_until(lambda: cluster.power.state("prof-0").cap_watts == 120, 60)
            wait_until(lambda: twin_status(cluster, "both-0").get("result") == "applied", 30)
            wait_until(lambda: tp_status(cluster, "prof-0").get("result") == "applied", 30)
            assert tp_status(cluster, "both-0") == {}
            wait_until(lambda: node_apis(agent) == {"both-0": "nodetwin", "prof-0": "profiles"},
                       20)
            pids = worker_pids(agent)
            started = time.monotonic()

            envtest_server.api().delete(CRD, "nodetwins.joulie.io")
            wait_until(lambda: not served(envtest_server, "nodetwins"), 60)
            wait_until(lambda: cluster.power.state("both-0").cap_watts == 130, 60)
            wait_until(lambda: tp_status(cluster, "both-0").get("result") == "applied", 30)
            assert agent.get("/readyz")[0] == 200
            wait_until(lambda: "nodetwins.joulie.io is no longer served" in agent.logs(), 30)

            envtest_server.api().apply(chart_crds())  # installed again: empty
            cluster.api.create("nodetwins", node_twin("both-0", cap=135))
            wait_until(lambda: cluster.power.state("both-0").cap_watts == 135, 60)
            wait_until(lambda: twin_status(cluster, "both-0").get("result") == "applied", 30)
            wait_until(lambda: tp_status(cluster, "both-0").get("message", "").startswith(MOVED),
                       30)
            caps = {
                r.body.get("capWatts") if r.body.get("action") == RAPL_ACTION else r.body["action"]
                for r in cluster.power.requests(node="both-0", kind="control")
                if r.monotonic >= started and r.body
            }
            assert caps <= {140.0, 130.0, 135.0}, caps  # never released in between
            assert worker_pids(agent) == pids
            assert "HTTP 403" not in agent.logs()
            assert agent.terminate() == 0
    finally:
        envtest_server.api().apply(chart_crds())  # for the scenarios after this one
