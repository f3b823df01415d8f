"""Which API each node follows, per node, from the objects that exist (ClusterView, no server).

``JOULIE_API=auto``: a node's NodeTwin if it has one, else its NodePowerProfile;
routing from a TelemetryProfile targeting it; the status where the object it
follows lives. ``profiles``/``nodetwin``: that API whatever exists.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.config.settings import load_settings
from agentpool.kube.api import Resource
from agentpool.kube.informer import Change, Relisted
from agentpool.resources.nodeinputs import NodeApi
from agentpool.sim.objects import node_twin
from agentpool.supervisor.clusterview import ClusterView
from tests.supervisor.objects import MANAGED, node, npp, tp

NT, NPP, TP = Resource.NODE_TWINS, Resource.NODE_POWER_PROFILES, Resource.TELEMETRY_PROFILES


def view(api: str = "auto") -> ClusterView:
    v = ClusterView(load_settings({"AGENT_MODE": "pool", "JOULIE_API": api}))
    v.apply(Relisted(Resource.NODES, [node(n, **MANAGED) for n in ("p", "t", "b", "x")]))
    return v


def twin(target: str, cap: float) -> dict[str, Any]:
    obj = node_twin(target, cap=cap)
    obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


def mixed(v: ClusterView) -> ClusterView:
    """p: a NodePowerProfile; t: a NodeTwin; b: both; x: neither. Each but t has a
    TelemetryProfile."""
    v.apply(Relisted(NPP, [npp("npp-p", "p", 120), npp("npp-b", "b", 130)]))
    v.apply(Relisted(TP, [tp("tp-p", "p"), tp("tp-b", "b"), tp("tp-x", "x")]))
    v.apply(Relisted(NT, [twin("t", 140), twin("b", 150)]))
    return v


def cap_of(v: ClusterView, name: str) -> float | None:
    inputs = v.inputs_for(name)
    desired = inputs.node_twin if inputs.api is NodeApi.NODETWIN else inputs.power_profile
    return None if desired is None else float(desired["spec"]["cpu"]["packagePowerCapWatts"])


def test_auto_follows_each_nodes_own_objects() -> None:
    v = mixed(view())
    assert {n: v.api_of(n) for n in "ptbx"} == {
        "p": NodeApi.PROFILES, "t": NodeApi.NODETWIN, "b": NodeApi.NODETWIN, "x": NodeApi.NONE,
    }
    assert {n: cap_of(v, n) for n in "ptbx"} == {"p": 120, "t": 140, "b": 150, "x": None}
    assert v.status_target("p") == (TP, "tp-p")
    assert v.status_target("t") == (NT, "t")
    assert v.status_target("b") == (NT, "b")
    assert v.status_target("x") == (TP, "tp-x")  # where "nothing to enforce" is said
    # Routing from the TelemetryProfile whichever API the node follows.
    b = v.inputs_for("b")
    assert b.telemetry_profile is not None
    assert b.power_profile is None
    assert {n: v.inputs_for(n).api for n in "ptbx"} == {n: v.api_of(n) for n in "ptbx"}
    assert "NodeTwin 'b'; JOULIE_API=auto" in v.describe_api("b", v.api_of("b"))
    assert "neither a NodeTwin nor a NodePowerProfile" in v.describe_api("x", NodeApi.NONE)


@pytest.mark.parametrize(("api", "follows"), [("profiles", NodeApi.PROFILES),
                                              ("nodetwin", NodeApi.NODETWIN)])
def test_an_explicit_setting_follows_that_api_only(api: str, follows: NodeApi) -> None:
    v = mixed(view(api))
    assert {v.api_of(n) for n in "ptbx"} == {follows}
    if follows is NodeApi.PROFILES:
        assert {n: cap_of(v, n) for n in "ptbx"} == {"p": 120, "t": None, "b": 130, "x": None}
        assert v.status_target("b") == (TP, "tp-b")
    else:
        assert {n: cap_of(v, n) for n in "ptbx"} == {"p": None, "t": 140, "b": 150, "x": None}
        assert v.status_target("p") is None
    assert {v.inputs_for(n).api for n in "ptbx"} == {follows}


def test_a_node_moves_to_its_twin_and_back_whatever_the_order_of_the_events() -> None:
    v = mixed(view())
    # Profile -> twin: the twin arrives first, then the profile goes.
    assert v.apply(Change(NT, "ADDED", twin("p", 125))) == {"p"}
    assert (v.api_of("p"), cap_of(v, "p"), v.status_target("p")) == (
        NodeApi.NODETWIN, 125, (NT, "p")
    )
    assert v.targets(TP, "tp-p", "p")  # the profile's TelemetryProfile gets a last word
    v.apply(Change(NPP, "DELETED", npp("npp-p", "p", 120)))
    assert (v.api_of("p"), cap_of(v, "p")) == (NodeApi.NODETWIN, 125)
    # Twin -> profile, the other order: the twin goes before the new profile is seen.
    v.apply(Change(NT, "DELETED", twin("p", 125)))
    assert (v.api_of("p"), cap_of(v, "p")) == (NodeApi.NONE, None)
    assert not v.targets(NT, "p", "p")  # gone: no last word for it
    v.apply(Change(NPP, "ADDED", npp("npp-p", "p", 115)))
    assert (v.api_of("p"), cap_of(v, "p"), v.status_target("p")) == (
        NodeApi.PROFILES, 115, (TP, "tp-p")
    )


def test_a_kind_no_longer_served_empties_its_cache() -> None:
    v = mixed(view())
    # What Watches.remove sends once discovery finds nodetwins.joulie.io gone.
    assert v.apply(Relisted(NT, [])) == {"t", "b"}
    assert (v.api_of("b"), cap_of(v, "b")) == (NodeApi.PROFILES, 130)
    assert (v.api_of("t"), cap_of(v, "t")) == (NodeApi.NONE, None)


def test_a_retargeted_telemetry_profile_is_not_the_old_nodes_any_more() -> None:
    v = mixed(view())
    v.apply(Change(TP, "MODIFIED", tp("tp-p", "x")))
    assert not v.targets(TP, "tp-p", "p")
    assert v.targets(TP, "tp-p", "x")
