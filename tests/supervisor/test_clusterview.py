"""Which nodes a pod owns and what each worker is sent (ClusterView, no server)."""

from __future__ import annotations

import logging

import pytest

from agentpool.config.settings import load_settings
from agentpool.kube.api import Resource
from agentpool.kube.informer import Change, Relisted
from agentpool.pool.assignment import shard_of
from agentpool.supervisor.clusterview import ClusterView
from tests.supervisor.objects import MANAGED, node, npp, tp


def pool_view(shards: int = 1, shard: int = 0, selector: str | None = None) -> ClusterView:
    raw = {"AGENT_MODE": "pool", "POOL_SHARDS": str(shards), "POOL_SHARD_ID": str(shard)}
    if selector is not None:
        raw["POOL_NODE_SELECTOR"] = selector
    return ClusterView(load_settings(raw))


def test_selector_is_rechecked_client_side() -> None:
    view = pool_view()
    # An emulator or server that ignored labelSelector would send all of these.
    view.apply(Relisted(Resource.NODES, [node("a", **MANAGED), node("b"), node("c", x="y")]))
    assert view.owned() == {"a"}


def test_shards_partition_the_managed_nodes() -> None:
    names = [f"kwok-node-{i}" for i in range(60)]
    owned: list[set[str]] = []
    for shard in range(3):
        view = pool_view(shards=3, shard=shard)
        view.apply(Relisted(Resource.NODES, [node(n, **MANAGED) for n in names]))
        owned.append(view.owned())
        assert all(shard_of(n, 3) == shard for n in owned[-1])
    assert set().union(*owned) == set(names)
    assert sum(len(o) for o in owned) == len(names)


def test_label_changes_move_a_node_in_and_out_of_scope() -> None:
    view = pool_view()
    view.apply(Relisted(Resource.NODES, [node("a")]))
    assert view.owned() == set()
    assert view.apply(Change(Resource.NODES, "MODIFIED", node("a", **MANAGED))) == {"a"}
    assert view.owned() == {"a"}
    view.apply(Change(Resource.NODES, "DELETED", node("a", **MANAGED)))
    assert view.owned() == set()


def test_daemonset_mode_owns_only_its_node_once_seen() -> None:
    view = ClusterView(load_settings({"NODE_NAME": "worker-1"}))
    assert view.owned() == set()
    view.apply(Relisted(Resource.NODES, [node("worker-1"), node("worker-2", **MANAGED)]))
    assert view.owned() == {"worker-1"}


def test_inputs_carry_the_nodes_profiles_trimmed() -> None:
    view = pool_view()
    view.apply(Relisted(Resource.NODES, [node("a", **MANAGED)]))
    view.apply(Relisted(Resource.NODE_POWER_PROFILES, [npp("p-a", "a", 120), npp("p-b", "b", 90)]))
    view.apply(Relisted(Resource.TELEMETRY_PROFILES, [tp("t-a", "a")]))
    inputs = view.inputs_for("a")
    assert inputs.labels == MANAGED
    assert inputs.power_profile is not None
    assert inputs.power_profile["spec"]["cpu"]["packagePowerCapWatts"] == 120
    assert inputs.telemetry_profile is not None
    assert "status" not in inputs.telemetry_profile
    assert view.telemetry_profile_name("a") == "t-a"


def test_our_own_status_writes_do_not_change_a_nodes_inputs() -> None:
    view = pool_view()
    view.apply(Relisted(Resource.NODES, [node("a", **MANAGED)]))
    view.apply(Relisted(Resource.TELEMETRY_PROFILES, [tp("t-a", "a")]))
    before = view.inputs_for("a")
    view.apply(Change(Resource.TELEMETRY_PROFILES, "MODIFIED", tp("t-a", "a", status="applied")))
    assert view.inputs_for("a") == before


def test_two_profiles_for_one_node_pick_the_oldest_and_say_so() -> None:
    view = pool_view()
    view.apply(Relisted(Resource.NODES, [node("a", **MANAGED)]))
    view.apply(
        Relisted(
            Resource.NODE_POWER_PROFILES,
            [
                npp("newer", "a", 200, created="2026-02-01T00:00:00Z"),
                npp("older", "a", 100, created="2026-01-01T00:00:00Z"),
            ],
        )
    )
    inputs = view.inputs_for("a")
    assert inputs.power_profile is not None
    assert inputs.power_profile["metadata"]["name"] == "older"
    assert inputs.power_profile_note is not None
    assert "using the oldest, 'older'" in inputs.power_profile_note


def test_retargeting_a_profile_marks_both_nodes() -> None:
    view = pool_view()
    view.apply(Relisted(Resource.NODES, [node("a", **MANAGED), node("b", **MANAGED)]))
    view.apply(Relisted(Resource.NODE_POWER_PROFILES, [npp("p", "a", 100)]))
    affected = view.apply(Change(Resource.NODE_POWER_PROFILES, "MODIFIED", npp("p", "b", 100)))
    assert affected == {"a", "b"}
    assert view.inputs_for("a").power_profile is None
    assert view.inputs_for("b").power_profile is not None


def test_an_elastic_pool_runs_what_the_handoff_lets_it_among_the_selected_nodes() -> None:
    view = ClusterView(load_settings({
        "AGENT_MODE": "pool", "POOL_MEMBERSHIP": "lease", "POD_NAME": "pool-1",
        "POD_NAMESPACE": "ns", "POOL_SHARDS": "1",
    }))
    view.apply(Relisted(Resource.NODES, [node("a", **MANAGED), node("b", **MANAGED), node("c")]))
    # What a pool shares: every selected node, whoever runs it.
    assert view.selected() == {"a", "b"}
    # The same object each turn until a node changes (the pool's caches compare it).
    assert view.selected() is view.selected()
    view.apply(Change(Resource.NODE_POWER_PROFILES, "ADDED", npp("p", "a", 100)))
    assert view.selected() is view.selected()
    before = view.selected()
    view.apply(Change(Resource.NODES, "MODIFIED", node("c", **MANAGED)))
    assert view.selected() == {"a", "b", "c"}
    view.apply(Change(Resource.NODES, "MODIFIED", node("c")))
    assert view.selected() == before
    # Nothing runs before the handoff says so, whatever the static formula would give.
    assert view.owned() == set()
    view.elastic_running = {"b", "c"}
    assert view.owned() == {"b"}  # the selector still applies
    static = pool_view()
    static.apply(Relisted(Resource.NODES, [node("a", **MANAGED)]))
    assert static.elastic_running is None
    assert static.owned() == {"a"}


def test_a_node_scoped_profile_without_a_node_is_reported_once_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What the CRD schema refuses where it is validated, for objects it never checked.
    view = pool_view()
    view.apply(Relisted(Resource.NODES, [node("worker-0", **MANAGED)]))
    bad = tp("tp-bad", "worker-0")
    del bad["spec"]["target"]["nodeName"]
    with caplog.at_level(logging.WARNING, logger="agentpool.supervisor.clusterview"):
        view.apply(Relisted(Resource.TELEMETRY_PROFILES, [bad]))
        view.apply(Change(Resource.TELEMETRY_PROFILES, "MODIFIED", bad))
        view.apply(Relisted(Resource.TELEMETRY_PROFILES, [bad]))
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "TelemetryProfile 'tp-bad': spec.target.nodeName: required when spec.target.scope "
        "is node; it targets no node and is ignored"
    ]
    assert view.inputs_for("worker-0").telemetry_profile is None
    caplog.clear()
    # Deleted, then made again: a new object, reported again; fixed: silence.
    with caplog.at_level(logging.WARNING, logger="agentpool.supervisor.clusterview"):
        view.apply(Change(Resource.TELEMETRY_PROFILES, "DELETED", bad))
        view.apply(Change(Resource.TELEMETRY_PROFILES, "ADDED", bad))
        view.apply(Change(Resource.TELEMETRY_PROFILES, "MODIFIED", tp("tp-bad", "worker-0")))
    assert len(caplog.records) == 1
    assert view.inputs_for("worker-0").telemetry_profile is not None
