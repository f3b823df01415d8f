"""Static pools from StatefulSets (agentpool/kubectl/pools.py): which ones run the agent, their
shard counts as the agent reads its variables, and what is said when a count is unknown."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.kubectl.pools import find_pools, given, static_pools


def statefulset(name: str, env: dict[str, Any], replicas: int | None = 2,
                namespace: str = "ns", env_from: bool = False) -> dict[str, Any]:
    """A StatefulSet whose one container has ``env`` (a str is a value, a dict an entry)."""
    entries = [{"name": k, **({"value": v} if isinstance(v, str) else v)} for k, v in env.items()]
    container: dict[str, Any] = {"name": "agent", "image": "agentpool", "env": entries}
    if env_from:
        container["envFrom"] = [{"configMapRef": {"name": "agent-env"}}]
    spec: dict[str, Any] = {"template": {"spec": {"containers": [
        {"name": "sidecar", "image": "x"}, container]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


POOL = {"AGENT_MODE": "pool", "POOL_SHARDS": "4", "POOL_NODE_SELECTOR": "joulie.io/managed=true"}
MANAGED = {"joulie.io/managed": "true"}


def test_the_pools_shard_count_and_where_it_was_found() -> None:
    found = static_pools([statefulset("joulie-agent-pool", POOL, replicas=4)])
    assert found.notes == ("shards: 4 (StatefulSet ns/joulie-agent-pool, POOL_SHARDS)",)
    assert found.shards_of(MANAGED) == 4
    assert found.shards_of({"other": "x"}) is None  # not a node this pool selects


@pytest.mark.parametrize(
    ("env", "replicas", "shards", "notes"),
    [
        # Unset: the agent's default, 1, whatever the replicas (its other pods exit 2).
        ({"AGENT_MODE": "pool"}, 3, 1, (
            "shards: 1 (StatefulSet ns/p, POOL_SHARDS unset: the agent's default)",
            "note: StatefulSet ns/p runs 3 replica(s) for 1 shard(s): each pod serves the "
            "shard of its ordinal")),
        ({"AGENT_MODE": "pool", "POOL_SHARDS": "0"}, 1, 1, (
            "shards: 1 (StatefulSet ns/p, POOL_SHARDS=0: one shard)",)),
        # The default selector when unset; blank is unset, as for the agent.
        ({"AGENT_MODE": "pool", "POOL_SHARDS": "2", "POOL_NODE_SELECTOR": " "}, 2, 2, (
            "shards: 2 (StatefulSet ns/p, POOL_SHARDS)",)),
        # Scaled by hand below its shards: a shard runs nowhere, which is said.
        ({**POOL, "POOL_MEMBERSHIP": "static"}, 2, 4, (
            "shards: 4 (StatefulSet ns/p, POOL_SHARDS)",
            "note: StatefulSet ns/p runs 2 replica(s) for 4 shard(s): each pod serves the "
            "shard of its ordinal")),
    ],
)
def test_the_count_is_read_as_the_agent_reads_it(
    env: dict[str, Any], replicas: int, shards: int, notes: tuple[str, ...]
) -> None:
    found = static_pools([statefulset("p", env, replicas)])
    assert found.shards_of(MANAGED) == shards
    assert found.notes == notes


@pytest.mark.parametrize(
    ("env", "env_from", "why"),
    [
        ({**POOL, "POOL_SHARDS": {"valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}},
         False, "POOL_SHARDS comes from valueFrom"),
        ({"AGENT_MODE": "pool"}, True, "POOL_SHARDS is not in env, and its envFrom may set it"),
        ({**POOL, "POOL_SHARDS": "four"}, False,
         "POOL_SHARDS='four' is invalid: expected an integer"),
        ({**POOL, "POOL_NODE_SELECTOR": "a in (b"}, False, "POOL_NODE_SELECTOR='a in (b'"),
    ],
)
def test_a_count_that_cannot_be_read_is_unknown_and_says_why(
    env: dict[str, Any], env_from: bool, why: str
) -> None:
    found = static_pools([statefulset("p", env, env_from=env_from)])
    assert found.pools == ()
    (note,) = found.notes
    assert note.startswith("shards: unknown (StatefulSet ns/p: ")
    assert why in note
    assert found.shards_of(MANAGED) is None


def test_only_static_agent_pools_count() -> None:
    others = [
        statefulset("db", {"POSTGRES_DB": "x"}),
        statefulset("ds", {**POOL, "AGENT_MODE": "daemonset"}),
        statefulset("elastic", {**POOL, "POOL_MEMBERSHIP": "lease"}),  # its Leases speak
        {"metadata": {"name": "bare", "namespace": "ns"}, "spec": {}},
    ]
    assert static_pools(others).notes == ()


def test_each_node_takes_the_count_of_the_pool_that_selects_it() -> None:
    pools = static_pools([
        statefulset("gpu", {**POOL, "POOL_SHARDS": "3", "POOL_NODE_SELECTOR": "kind=gpu"}, 3),
        statefulset("cpu", {**POOL, "POOL_SHARDS": "2", "POOL_NODE_SELECTOR": "kind=cpu"}, 2),
        statefulset("all", {**POOL, "POOL_SHARDS": "2", "POOL_NODE_SELECTOR": "kind"}, 2, "b"),
    ])
    assert pools.notes == (
        "shards: 2 (StatefulSet b/all, POOL_SHARDS)",
        "shards: 2 (StatefulSet ns/cpu, POOL_SHARDS)",
        "shards: 3 (StatefulSet ns/gpu, POOL_SHARDS)",
    )
    assert pools.shards_of({"kind": "cpu"}) == 2  # two pools, one count
    assert pools.shards_of({"kind": "gpu"}) is None  # two pools that disagree
    assert pools.shards_of({}) is None  # no pool selects it


def test_what_status_uses_and_says() -> None:
    sets = [statefulset("p", POOL, 4)]
    assert find_pools(sets, None, False, None, 3) == given(3)  # --shards wins
    assert given(3).notes == ("shards: 3 (--shards)",)
    assert given(3).shards_of({}) == 3
    assert find_pools(sets, None, False, None, None).shards_of(MANAGED) == 4
    forbidden = find_pools(None, "list statefulsets: HTTP 403 Forbidden", False, None, None)
    assert forbidden.notes == ("shards: unknown (StatefulSets not listed: list statefulsets: "
                               "HTTP 403 Forbidden): --shards N names each node's shard",)
    assert find_pools([], None, False, "joulie", None).notes == (
        "shards: not found (no StatefulSet in namespace joulie runs the agent with "
        "AGENT_MODE=pool): --shards N names each node's shard",)
    assert "in any namespace" in find_pools([], None, False, None, None).notes[0]
    assert find_pools([], None, True, None, None).notes == ()  # elastic: Leases name owners
