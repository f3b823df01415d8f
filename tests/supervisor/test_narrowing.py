"""What each informer asks the server for and keeps, by mode (issue 46)."""

from __future__ import annotations

from typing import Any

from agentpool.config.settings import Settings, load_settings
from agentpool.kube.api import Resource
from agentpool.supervisor.narrowing import by_node, kind_scope, node_scope


def settings(**env: str) -> Settings:
    return load_settings({"KUBECONFIG": "/dev/null", **env})


def fnv32a(text: str) -> int:
    """The contract's hash, written again here so that the test does not share the agent's."""
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) % 2**32
    return h


def twin(node: str, name: str = "x") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeName": node}}


def profile(node: str | None, scope: str = "node") -> dict[str, Any]:
    target: dict[str, Any] = {"scope": scope}
    if node is not None:
        target["nodeName"] = node
    return {"metadata": {"name": "tp"}, "spec": {"target": target}}


DAEMONSET = {"AGENT_MODE": "daemonset", "NODE_NAME": "Worker_1.example.com"}


def test_a_daemonset_pod_asks_for_its_own_nodetwin_and_nodehardware_by_name() -> None:
    s = settings(**DAEMONSET)
    assert kind_scope(s, Resource.NODES).field_selector == "metadata.name=Worker_1.example.com"
    for kind in (Resource.NODE_TWINS, Resource.NODE_HARDWARES):
        scope = kind_scope(s, kind)
        # Joulie's name for the node's objects: lowercased, '.', '_', '/' -> '-'.
        assert scope.field_selector == "metadata.name=worker-1-example-com"
        assert scope.keep is not None
        assert scope.keep(twin("Worker_1.example.com"))
        assert not scope.keep(twin("worker-2"))  # named after us, targeting another node


def test_a_daemonset_pod_keeps_only_its_nodes_profiles_whatever_their_names() -> None:
    s = settings(**DAEMONSET)
    power = kind_scope(s, Resource.NODE_POWER_PROFILES)
    assert power.field_selector is None
    assert power.keep is not None
    assert power.keep(twin("Worker_1.example.com", name="stress-ng-demo-profile"))
    assert not power.keep(twin("worker-2", name="node-worker-1-example-com"))
    telemetry = kind_scope(s, Resource.TELEMETRY_PROFILES)
    assert telemetry.keep is not None
    assert telemetry.keep(profile("Worker_1.example.com"))
    assert not telemetry.keep(profile("worker-2"))
    assert not telemetry.keep(profile(None, scope="cluster"))
    assert telemetry.keep(profile(None))  # misdirected: kept so that the pod warns about it


def test_a_static_pool_keeps_its_shards_nodes_and_their_objects() -> None:
    s = settings(AGENT_MODE="pool", POOL_SHARDS="3", POOL_SHARD_ID="1")
    nodes = kind_scope(s, Resource.NODES)
    assert nodes.label_selector == "joulie.io/managed=true"
    assert nodes.field_selector is None
    assert nodes.keep is not None
    assert nodes.wants is not None
    twins = kind_scope(s, Resource.NODE_TWINS)
    assert twins.field_selector is None
    assert twins.keep is not None
    for i in range(30):
        node = f"node-{i}"
        mine = fnv32a(node) % 3 == 1
        assert nodes.wants(node) is mine
        assert nodes.keep({"metadata": {"name": node}}) is mine
        assert twins.keep(twin(node)) is mine


def test_only_a_static_pool_of_many_shards_watches_nodetwin_and_nodehardware_by_node() -> None:
    static = settings(AGENT_MODE="pool", POOL_SHARDS="16", POOL_SHARD_ID="1")
    assert {k for k in Resource if by_node(static, k)} == {
        Resource.NODE_TWINS, Resource.NODE_HARDWARES}
    elastic = settings(AGENT_MODE="pool", POOL_MEMBERSHIP="lease", POD_NAME="agent-0",
                       POD_NAMESPACE="joulie-system")
    few = settings(AGENT_MODE="pool", POOL_SHARDS="15", POOL_SHARD_ID="1")
    for s in (settings(**DAEMONSET), settings(AGENT_MODE="pool"), elastic, few):
        assert not any(by_node(s, k) for k in Resource)
    for kind in (Resource.NODE_TWINS, Resource.NODE_HARDWARES):
        scope = node_scope(kind, "Worker_1.example.com")
        assert scope.field_selector == "metadata.name=worker-1-example-com"
        assert scope.keep is not None
        assert scope.wants is not None
        assert scope.trim is not None
        assert scope.keep(twin("Worker_1.example.com"))
        assert not scope.keep(twin("worker-2"))
        assert scope.wants("Worker_1.example.com")
        assert not scope.wants("worker-2")
        # The same request as a daemonset pod's for that node.
        assert scope.field_selector == kind_scope(settings(**DAEMONSET), kind).field_selector


def test_only_a_static_pool_of_many_shards_lists_its_nodes_names_first() -> None:
    static = settings(AGENT_MODE="pool", POOL_SHARDS="16", POOL_SHARD_ID="1")
    assert [k for k in Resource if kind_scope(static, k).names_first] == [Resource.NODES]
    elastic = settings(AGENT_MODE="pool", POOL_MEMBERSHIP="lease", POD_NAME="agent-0",
                       POD_NAMESPACE="joulie-system")
    few = settings(AGENT_MODE="pool", POOL_SHARDS="15", POOL_SHARD_ID="1")
    for s in (settings(**DAEMONSET), settings(AGENT_MODE="pool"), elastic, few):
        assert not any(kind_scope(s, k).names_first for k in Resource)


def test_pools_that_cannot_narrow_keep_everything() -> None:
    one = settings(AGENT_MODE="pool")
    elastic = settings(AGENT_MODE="pool", POOL_MEMBERSHIP="lease", POD_NAME="agent-0",
                       POD_NAMESPACE="joulie-system")
    for s in (one, elastic):
        for kind in Resource:
            scope = kind_scope(s, kind)
            assert scope.keep is None
            assert scope.wants is None
            assert scope.field_selector is None


def test_every_kind_is_cut_down_to_what_the_cluster_view_reads() -> None:
    s = settings(AGENT_MODE="pool", POOL_MEMBERSHIP="lease", POD_NAME="agent-0",
                 POD_NAMESPACE="joulie-system")
    node = {
        "metadata": {"name": "n", "labels": {"a": "b"}, "managedFields": [{"manager": "k"}]},
        "status": {"capacity": {"cpu": "64"}, "allocatable": {"nvidia.com/gpu": "8"},
                   "images": [{"names": ["x"], "sizeBytes": 1}], "conditions": []},
    }
    trim = kind_scope(s, Resource.NODES).trim
    assert trim is not None
    assert trim(node) == {"metadata": {"name": "n", "labels": {"a": "b"}},
                          "status": {"capacity": {"cpu": "64"},
                                     "allocatable": {"nvidia.com/gpu": "8"}}}
    twin = {"metadata": {"name": "t", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "resourceVersion": "7"},
            "spec": {"nodeName": "n"}, "status": {"controlStatus": {}}}
    trim = kind_scope(s, Resource.NODE_TWINS).trim
    assert trim is not None
    assert trim(twin) == {"metadata": {"name": "t", "creationTimestamp": "2026-01-01T00:00:00Z"},
                          "spec": {"nodeName": "n"}}
    hardware = {"metadata": {"name": "h"}, "spec": {"nodeName": "n"},
                "status": {"cpu": {"sockets": 2}, "gpu": {"count": 8}, "memory": {}}}
    trim = kind_scope(s, Resource.NODE_HARDWARES).trim
    assert trim is not None
    assert trim(hardware) == {"metadata": {"name": "h"}, "spec": {"nodeName": "n"},
                              "status": {"cpu": {"sockets": 2}, "gpu": {"count": 8}}}
