"""A pod asks the API server for its own nodes' objects only (issue 46), on a real
kube-apiserver whose audit log says what the agent asked for."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from agentpool.kube.nodehardware import node_object_name
from agentpool.pool.assignment import shard_of
from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from tests.envtest.accounts import AUDITED_AGENT

NODES = [f"w{i}.example.com" for i in range(6)]
MINE = NODES[2]
SHARDS = 16


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def requests(server: EnvtestServer, since: datetime.datetime
             ) -> Iterator[tuple[str, str, dict[str, list[str]]]]:
    """The agent's lists and watches since ``since``: (resource, verb, query parameters)."""
    for event in server.audit(AUDITED_AGENT):
        ref = event.get("objectRef") or {}
        received = datetime.datetime.fromisoformat(event["requestReceivedTimestamp"])
        if received >= since and event.get("verb") in ("list", "watch") and ref.get("resource"):
            yield ref["resource"], event["verb"], parse_qs(urlsplit(event["requestURI"]).query)


def reads(server: EnvtestServer, since: datetime.datetime) -> dict[str, set[str]]:
    """Resource -> the field selectors of the agent's lists and watches of it since ``since``
    (the server is the module's)."""
    seen: dict[str, set[str]] = {}
    for resource, _, query in requests(server, since):
        seen.setdefault(resource, set()).add(query.get("fieldSelector", [""])[0])
    return seen


def node_reads(server: EnvtestServer, since: datetime.datetime) -> set[tuple[str, str, str]]:
    """The agent's lists and watches of Nodes since ``since``: (verb, fieldSelector,
    includeObject); includeObject is ``None`` where it asked for a Table of names only."""
    return {(verb, query.get("fieldSelector", [""])[0], query.get("includeObject", [""])[0])
            for resource, verb, query in requests(server, since) if resource == "nodes"}


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
        start, since = time.monotonic(), now()
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
    asked = reads(audited, since)
    assert asked["nodes"] == {f"metadata.name={MINE}"}
    assert asked["nodetwins"] == {"metadata.name=w2-example-com"}
    assert asked["nodehardwares"] == {"metadata.name=w2-example-com"}


def test_a_static_pool_pod_reads_its_own_nodes_nodetwins_and_nodehardwares_by_name(
    audited: EnvtestServer, tmp_path: Path
) -> None:
    # Shard 0 of 16 (the fewest shards that watch by name): two nodes of its own, three
    # of others', and one that joins later.
    names = [f"p{i}.example.com" for i in range(200)]
    ours = [n for n in names if shard_of(n, SHARDS) == 0]
    mine, joining = ours[:2], ours[2]
    theirs = [n for n in names if shard_of(n, SHARDS) != 0][:3]
    nodes = [*mine, *theirs]
    with SimCluster(workdir=tmp_path, server=audited, user=AUDITED_AGENT,
                    api="nodetwin") as cluster:
        for i, name in enumerate(nodes):
            cluster.add_node(name, cap=100.0 + i)
        start, since = time.monotonic(), now()
        agent = cluster.start_agent({"AGENT_MODE": "pool", "POOL_SHARDS": str(SHARDS),
                                     "POOL_SHARD_ID": "0", **cluster.routing_env()})
        agent.wait_ready(60)
        for name in mine:
            wait_until(lambda n=name: capped_at(cluster, n, 100.0 + nodes.index(n), start), 60)
        # A node joins the shard: its objects are asked for by name as it comes.
        cluster.add_node(joining, cap=140.0)
        wait_until(lambda: capped_at(cluster, joining, 140.0, start), 60)
        # Another shard's node's desired state changes: nothing reaches this pod.
        changed = time.monotonic()
        cluster.set_cap(theirs[0], 150.0)
        cluster.set_cap(mine[0], 130.0)
        wait_until(lambda: capped_at(cluster, mine[0], 130.0, changed), 60)
        controlled = {str(r.node) for r in cluster.power.requests(kind="control")}
        assert controlled == {*mine, joining}
        assert agent.terminate() == 0
    asked = reads(audited, since)
    by_name = {f"metadata.name={node_object_name(n)}" for n in [*mine, joining]}
    assert asked["nodetwins"] == by_name
    assert asked["nodehardwares"] == by_name
    # Nodes: every name once (a Table without objects), then each owned node by name; the
    # watch is by label, other shards' events passed over undecoded. Never the whole list.
    assert node_reads(audited, since) == {
        ("list", "", "None"), ("watch", "", ""),
        *{("list", f"metadata.name={n}", "") for n in mine},
    }
