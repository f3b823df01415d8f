"""The supervisor's own status writes coming back from the watch do not wake its loop
(supervisor/echoes.py); every event that may change what it knows still does."""

from __future__ import annotations

import copy
from typing import Any

from agentpool.kube.api import Resource
from agentpool.kube.informer import Change, Relisted
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.supervisor.echoes import Echoes
from tests.support.fakeworkers import Loop, power, telemetry

TP, NPP, TWINS = Resource.TELEMETRY_PROFILES, Resource.NODE_POWER_PROFILES, Resource.NODE_TWINS


def with_status(obj: dict[str, Any], rv: str, **status: Any) -> dict[str, Any]:
    """The object as the watch sends it back after a status write: a new resourceVersion
    and managedFields, the status, the same spec."""
    echoed = copy.deepcopy(obj)
    echoed["metadata"].update(resourceVersion=rv, managedFields=[{"manager": "agentpool"}])
    echoed["status"] = status
    return echoed


def test_a_status_only_change_is_dropped_and_a_spec_change_passes() -> None:
    echoes = Echoes()
    tp = telemetry("t-a", "a")
    assert echoes.news(Change(TP, "ADDED", tp))
    assert not echoes.news(Change(TP, "MODIFIED", with_status(tp, "2", control={"cpu": 1})))
    assert not echoes.news(Change(TP, "MODIFIED", with_status(tp, "3", control={"cpu": 2})))
    labelled = copy.deepcopy(tp)
    labelled["metadata"]["labels"] = {"team": "x"}  # the supervisor keeps no labels of a TP
    assert not echoes.news(Change(TP, "MODIFIED", labelled))
    moved = copy.deepcopy(tp)
    moved["spec"]["target"]["nodeName"] = "b"
    assert echoes.news(Change(TP, "MODIFIED", moved))
    assert not echoes.news(Change(TP, "MODIFIED", with_status(moved, "5")))
    assert echoes.news(Change(TP, "MODIFIED", tp))  # and back


def test_a_recreated_object_passes_even_with_the_same_spec() -> None:
    echoes = Echoes()
    p = power("p-a", "a", 120)
    assert echoes.news(Change(NPP, "ADDED", p))
    assert echoes.news(Change(NPP, "DELETED", p))
    assert echoes.news(Change(NPP, "MODIFIED", p))  # forgotten with its deletion
    again = copy.deepcopy(p)
    again["metadata"]["creationTimestamp"] = "2026-06-01T00:00:00Z"
    assert echoes.news(Change(NPP, "MODIFIED", again))  # deleted and made again meanwhile
    assert echoes.news(Change(NPP, "ADDED", again))  # an addition always passes


def test_a_relist_replaces_what_was_seen_and_always_passes() -> None:
    echoes = Echoes()
    a, b = telemetry("t-a", "a"), telemetry("t-b", "b")
    assert echoes.news(Relisted(TP, [a, b]))
    assert not echoes.news(Change(TP, "MODIFIED", with_status(a, "9")))
    assert echoes.news(Relisted(TP, [a]))
    assert echoes.news(Change(TP, "MODIFIED", b))  # b was not in the last listing
    assert echoes.news(Relisted(TP, []))  # discovery found the kind gone
    assert echoes.news(Change(TP, "MODIFIED", a))


def test_kinds_read_beyond_their_spec_always_pass() -> None:
    echoes = Echoes()
    hardware = {"metadata": {"name": "a"}, "spec": {"nodeName": "a"},
                "status": {"cpu": {"sockets": 2}}}
    for kind in (Resource.NODE_HARDWARES, Resource.NODES):
        for _ in range(3):
            assert echoes.news(Change(kind, "MODIFIED", hardware))
    twin = {"metadata": {"name": "a", "creationTimestamp": "t"}, "spec": {"nodeName": "a"}}
    assert echoes.news(Change(TWINS, "ADDED", twin))
    assert not echoes.news(Change(TWINS, "MODIFIED", with_status(twin, "2", controlStatus={})))


def test_the_loop_is_not_woken_by_its_own_status_writes() -> None:
    with Loop() as loop:
        loop.nodes("a")
        loop.change(TP, telemetry("t-a", "a"), "ADDED")
        loop.change(NPP, power("p-a", "a", 120), "ADDED")
        loop.turn()
        [a] = loop.launcher.of("a")
        a.report()
        loop.turn()
        assert loop.supervisor.feed.events.empty()
        loop.change(TP, with_status(telemetry("t-a", "a"), "7", control={"cpu": {}}))
        assert loop.supervisor.feed.events.empty()
        loop.change(NPP, power("p-a", "a", 150))
        assert not loop.supervisor.feed.events.empty()
        loop.turn()
        sent = None
        while sent is None and a.pipe.poll(1.0):  # fences may come first
            if isinstance(message := a.pipe.recv(), NodeInputs):
                sent = message
        assert sent is not None
        assert sent.power_profile is not None
        assert sent.power_profile["spec"]["cpu"]["packagePowerCapWatts"] == 150
