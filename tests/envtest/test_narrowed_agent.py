"""A pod asks the API server for its own nodes' objects only (issue 46), on a real
kube-apiserver whose audit log says what the agent asked for."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from tests.envtest.accounts import AUDITED_AGENT

NODES = [f"w{i}.example.com" for i in range(6)]
MINE = NODES[2]


def reads(server: EnvtestServer) -> dict[str, set[str]]:
    """Resource -> the field selectors of the agent's lists and watches of it."""
    seen: dict[str, set[str]] = {}
    for event in server.audit(AUDITED_AGENT):
        ref = event.get("objectRef") or {}
        if event.get("verb") in ("list", "watch") and ref.get("resource"):
            query = parse_qs(urlsplit(event["requestURI"]).query)
            seen.setdefault(ref["resource"], set()).add(query.get("fieldSelector", [""])[0])
    return seen


def capped_at(cluster: SimCluster, node: str, watts: float, since: float) -> bool:
    return any(
        r.monotonic >= since and float((r.body or {}).get("capWatts") or 0) == watts
        for r in cluster.power.requests(node=node, kind="control")
    )


def test_a_daemonset_pod_reads_its_own_nodetwin_and_nodehardware_by_name(
    audited: EnvtestServer, tmp_path: Path
) -> None:
    with SimCluster(workdir=tmp_path, server=audited, user=AUDITED_AGENT,
                    api="nodetwin") as cluster:
        for i, name in enumerate(NODES):
            cluster.add_node(name, cap=100.0 + i)
        start = time.monotonic()
        agent = cluster.start_agent({"AGENT_MODE": "daemonset", "NODE_NAME": MINE,
                                     **cluster.routing_env()})
        agent.wait_ready(60)
        wait_until(lambda: capped_at(cluster, MINE, 102.0, start), 60)
        # Another node's desired state changes: nothing reaches this pod; its own does.
        changed = time.monotonic()
        cluster.set_cap(NODES[3], 150.0)
        cluster.set_cap(MINE, 130.0)
        wait_until(lambda: capped_at(cluster, MINE, 130.0, changed), 60)
        assert {str(r.node) for r in cluster.power.requests(kind="control")} == {MINE}
        assert agent.terminate() == 0
    asked = reads(audited)
    assert asked["nodes"] == {f"metadata.name={MINE}"}
    assert asked["nodetwins"] == {"metadata.name=w2-example-com"}
    assert asked["nodehardwares"] == {"metadata.name=w2-example-com"}
