"""Node events on a real kube-apiserver, as the chart's ServiceAccount with the chart's RBAC.

What the Role grants (create and patch ``events.events.k8s.io`` in
``kube-system``) is checked by the real authorizer, and the Events the real
agent records are read back the way ``kubectl describe node`` reads them:
core/v1 Events selected by ``involvedObject.kind=Node`` and the node's name.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentpool.sim.apiserver.errors import ApiError
from agentpool.sim.cluster import SimCluster
from agentpool.sim.clusterapi import ClusterApi
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from tests.envtest.accounts import as_agent, chart_account

EVENTS = "event.events.k8s.io/v1"
CORE_EVENTS = "event.v1"
NAMESPACE = "kube-system"


@pytest.fixture(scope="module")
def pool_account(envtest_server: EnvtestServer) -> Iterator[tuple[str, str]]:
    with chart_account(envtest_server, "pool") as account:
        yield account


def event(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NAMESPACE},
        "eventTime": "2026-01-01T00:00:00.123456Z",
        "reportingController": "agentpool", "reportingInstance": "pool-0",
        "action": "SetPowerCap", "reason": "PowerCapApplied", "type": "Normal",
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "note": "CPU power cap 120 W via rapl applied",
    }


def describe_events(admin: ClusterApi, node: str) -> list[dict[str, Any]]:
    """What ``kubectl describe node`` lists: core/v1 Events about the Node, any namespace."""
    selector = f"involvedObject.kind=Node,involvedObject.name={node}"
    return admin.list(CORE_EVENTS, field_selector=selector)


def wipe_events(admin: ClusterApi, prefix: str) -> None:
    for item in admin.list(EVENTS, namespace=NAMESPACE):
        if item["regarding"]["name"].startswith(prefix):
            admin.delete(EVENTS, item["metadata"]["name"], NAMESPACE)


def test_the_agent_may_create_and_patch_node_events_and_nothing_more(
    envtest_server: EnvtestServer, pool_account: tuple[str, str], tmp_path: Path
) -> None:
    agent = as_agent(envtest_server, pool_account, tmp_path)
    admin = envtest_server.api()
    try:
        agent.create(EVENTS, event("rbac-ev.1", "rbac-ev"))
        agent.patch(EVENTS, "rbac-ev.1", {"series": {
            "count": 2, "lastObservedTime": "2026-01-01T00:01:00.123456Z"}}, namespace=NAMESPACE)
        refused = [
            lambda: agent.get(EVENTS, "rbac-ev.1", NAMESPACE),
            lambda: agent.list(EVENTS, namespace=NAMESPACE),
            lambda: agent.delete(EVENTS, "rbac-ev.1", NAMESPACE),
            lambda: agent.create(EVENTS, {**event("rbac-ev.2", "rbac-ev"),
                                          "metadata": {"name": "rbac-ev.2",
                                                       "namespace": "default"}}),
            lambda: agent.create(CORE_EVENTS, {
                "metadata": {"name": "rbac-ev.3", "namespace": NAMESPACE},
                "involvedObject": {"kind": "Node", "name": "rbac-ev"}, "reason": "X"}),
        ]
        for attempt in refused:
            with pytest.raises(ApiError) as caught:
                attempt()
            assert caught.value.code == 403, caught.value.message
    finally:
        wipe_events(admin, "rbac-ev")


def test_the_agents_events_are_what_kubectl_describe_node_shows(
    envtest_server: EnvtestServer, pool_account: tuple[str, str]
) -> None:
    admin = envtest_server.api()
    with SimCluster(server=envtest_server, service_account=pool_account) as cluster:
        try:
            cluster.add_node("ev-real-0")
            agent = cluster.start_agent({"POD_NAME": "joulie-agent-pool-0"})
            agent.wait_ready(60)
            wait_until(lambda: len(describe_events(admin, "ev-real-0")) == 1, 60)
            (applied,) = describe_events(admin, "ev-real-0")
            assert applied["reason"] == "PowerCapApplied"
            assert applied["reportingComponent"] == "agentpool"
            assert applied["reportingInstance"] == "joulie-agent-pool-0"
            assert applied["message"].startswith("CPU power cap 120 W via rapl applied")
            # A repeat of the same change is counted on the same Event, not a new one.
            for cap in (150, 120, 150):
                cluster.set_cap("ev-real-0", cap)
                wait_until(lambda c=cap: cluster.power.state("ev-real-0").cap_watts == c, 30)  # type: ignore[misc]
            wait_until(lambda: any((e.get("series") or {}).get("count") == 2
                                   for e in describe_events(admin, "ev-real-0")), 30)
            assert sorted(e["reason"] for e in describe_events(admin, "ev-real-0")) == [
                "PowerCapApplied", "PowerCapChanged", "PowerCapChanged"]
            assert agent.terminate() == 0
            assert "HostRestored" in {e["reason"] for e in describe_events(admin, "ev-real-0")}
            assert "HTTP 403" not in agent.logs()
        finally:
            wipe_events(admin, "ev-real")
