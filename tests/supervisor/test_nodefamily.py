"""A kind watched node by node while a static pool pod owns few nodes, whole above (issue 46).

The members here are stand-ins that record how they were made and let the test deliver
their events: what is under test is what the family passes on to the cache, and when.
Real informers on a real API server: tests/envtest/test_narrowed_agent.py.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from agentpool.kube.api import Resource
from agentpool.kube.informer import Change, Informer, InformerEvent, Relisted
from agentpool.supervisor.nodefamily import WHOLE, NodeFamily, OwnedNodes

KIND = Resource.NODE_TWINS


class Member:
    """Stands in for an informer: started, stopped, and its events sent by the test."""

    def __init__(self, key: str, sink: Any) -> None:
        self.key, self.sink = key, sink
        self.started = self.stopped = False

    def start(self) -> None:
        self.started = True

    def stop(self, timeout: float = 2.0) -> None:
        self.stopped = True

    def lists(self, *nodes: str) -> None:
        self.sink(Relisted(KIND, [twin(n) for n in nodes]))

    def changes(self, node: str, kind: str = "MODIFIED", cap: float = 1.0) -> None:
        self.sink(Change(KIND, kind, twin(node, cap)))


def twin(node: str, cap: float = 0.0) -> dict[str, Any]:
    return {"metadata": {"name": node}, "spec": {"nodeName": node, "cap": cap}}


class Family:
    """A family of stand-in members, bound at ``max_nodes``, and what it passed on."""

    def __init__(self, max_nodes: int = 3) -> None:
        self.made: list[Member] = []
        self.passed: list[InformerEvent] = []
        self.family = NodeFamily(KIND, self.passed.append, self._named, self._whole, max_nodes)

    def _named(self, node: str, sink: Any) -> Informer:
        self.made.append(Member(node, sink))
        return cast(Informer, self.made[-1])

    def _whole(self, sink: Any) -> Informer:
        return self._named(WHOLE, sink)

    def member(self, key: str) -> Member:
        live = [m for m in self.made if m.key == key and not m.stopped]
        assert len(live) == 1, (key, live)
        return live[0]

    def running(self) -> set[str]:
        return {m.key for m in self.made if not m.stopped}

    def served(self) -> set[str]:
        return {cast(Member, m).key for m in self.family.members()}

    def relists(self) -> list[set[str]]:
        return [{o["metadata"]["name"] for o in e.items} for e in self.passed
                if isinstance(e, Relisted)]


def test_each_owned_node_gets_its_own_member_and_the_cache_the_union() -> None:
    f = Family()
    f.family.follow({"a", "b"})
    assert f.running() == {"a", "b"}
    assert not any(m.started for m in f.made)  # members start with the family
    f.family.start()
    assert all(m.started for m in f.made)
    assert f.family.by_name() is True
    f.member("a").lists("a")
    f.member("b").lists("b")
    assert f.relists() == [{"a"}, {"a", "b"}]
    f.member("b").changes("b", cap=7.0)
    assert isinstance(f.passed[-1], Change)
    assert f.passed[-1].obj["spec"]["cap"] == 7.0
    f.family.follow({"a", "b", "c"})  # a node joins the shard: only its member is new
    assert len(f.made) == 3
    assert f.made[-1].key == "c"
    assert f.member("c").started
    f.member("c").lists()  # its twin does not exist yet
    assert f.relists()[-1] == {"a", "b"}
    f.member("c").changes("c", kind="ADDED")
    f.family.follow({"b", "c"})  # a leaves: its member stops, its objects go
    assert f.running() == {"b", "c"}
    assert f.relists()[-1] == {"b", "c"}
    stale = next(m for m in f.made if m.key == "a")
    before = len(f.passed)
    stale.changes("a")  # a stopped member's last words are not passed on
    assert len(f.passed) == before


def test_a_deletion_leaves_the_union() -> None:
    f = Family()
    f.family.follow({"a", "b"})
    f.family.start()
    f.member("a").lists("a")
    f.member("b").lists("b")
    f.member("b").changes("b", kind="DELETED")
    f.member("a").lists("a")  # a relist after 410 Gone: the union, without b's
    assert f.relists()[-1] == {"a"}


def test_crossing_the_bound_swaps_ways_without_a_gap() -> None:
    f = Family(max_nodes=2)
    f.family.follow({"a", "b"})
    f.family.start()
    f.member("a").lists("a")
    f.member("b").lists("b")
    relists = len(f.relists())
    f.family.follow({"a", "b", "c"})  # over the bound: the kind watched whole
    assert f.family.by_name() is False
    whole = f.member(WHOLE)
    assert whole.started
    # Until the whole member has listed, the old members run, count, and are passed on.
    assert f.running() == {"a", "b", WHOLE}
    assert f.served() == {"a", "b"}
    f.member("a").changes("a", cap=3.0)
    assert isinstance(f.passed[-1], Change)
    assert f.passed[-1].obj["spec"]["cap"] == 3.0
    f.member("a").lists("a")  # one node's relist would empty the others': not passed on
    assert len(f.relists()) == relists
    whole.lists("a", "b", "c")
    assert f.relists()[-1] == {"a", "b", "c"}
    assert f.running() == {WHOLE}
    assert f.served() == {WHOLE}
    # And back: the whole member serves until every node's member has listed.
    f.family.follow({"a"})
    assert f.family.by_name() is True
    assert f.served() == {WHOLE}
    f.member("a").lists("a")
    assert f.running() == {"a"}
    assert f.relists()[-1] == {"a"}
    # Every relist passed on held at least what the owned nodes had: no gap.
    assert all("a" in names for names in f.relists())


def test_a_swap_to_no_nodes_settles_at_once() -> None:
    f = Family(max_nodes=1)
    f.family.follow({"a", "b"})
    f.family.start()
    f.member(WHOLE).lists("a", "b")
    f.family.follow(set())
    assert f.running() == set()
    assert f.relists()[-1] == set()


def test_a_stopped_family_stops_every_member_and_follows_nothing() -> None:
    f = Family(max_nodes=1)
    f.family.follow({"a"})
    f.family.start()
    f.family.follow({"a", "b"})  # a swap in flight: both ways' members run
    f.family.stop()
    assert f.running() == set()
    f.family.follow({"c"})
    assert f.running() == set()
    assert f.family.members() == []


def test_owned_nodes_are_those_the_node_informer_passed_on() -> None:
    passed: list[InformerEvent] = []
    owned = OwnedNodes(passed.append)
    early, late = Family(), Family()
    owned.add(early.family)
    assert early.made == []  # nothing known before the first list
    node = {"metadata": {"name": "n1"}}
    owned(Relisted(Resource.NODES, [node, {"metadata": {"name": "n2"}}]))
    assert passed[-1].resource is Resource.NODES  # and the cache got it too
    assert early.running() == {"n1", "n2"}
    owned.add(late.family)  # a kind discovered later follows at once
    assert late.running() == {"n1", "n2"}
    owned(Change(Resource.NODES, "ADDED", {"metadata": {"name": "n3"}}))
    owned(Change(Resource.NODES, "DELETED", node))
    assert early.running() == late.running() == {"n2", "n3"}
    late.family.stop()
    owned(Change(Resource.NODES, "MODIFIED", {"metadata": {"name": "n3"}}))  # nothing new
    owned(Change(Resource.NODES, "ADDED", {"metadata": {"name": "n4"}}))
    assert early.running() == {"n2", "n3", "n4"}
    assert late.running() == set()
    assert len(passed) == 5


def test_watches_open_once_every_first_member_has_listed() -> None:
    f = Family(max_nodes=2)
    f.family.follow({"a", "b"})
    f.family.start()
    assert not f.family.watches_may_open()
    f.member("a").lists("a")
    assert not f.family.watches_may_open()  # a waits for b: the pod is ready first
    f.member("b").lists("b")
    assert f.family.watches_may_open()
    f.family.follow({"a", "b", "c"})  # later members open theirs as they list
    assert f.family.watches_may_open()
    empty, stopped = Family(), Family()
    empty.family.follow(set())
    assert empty.family.watches_may_open()
    stopped.family.follow({"a"})
    stopped.family.stop()
    assert stopped.family.watches_may_open()  # no member is held back by a stopped family


@pytest.mark.parametrize("nodes", [0, 1, 3])
def test_members_serve_once_listed_however_many(nodes: int) -> None:
    f = Family(max_nodes=3)
    names = {f"n{i}" for i in range(nodes)}
    f.family.follow(names)
    f.family.start()
    assert f.served() == names
    for name in sorted(names):
        f.member(name).lists(name)
    assert (f.relists()[-1] if names else set()) == names
