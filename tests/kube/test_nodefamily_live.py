"""A family of real informers on both API servers: by name, whole, and back (issue 46).

The family's bookkeeping is tested with stand-ins in tests/supervisor/test_nodefamily.py;
here real informers list and watch, members are started and stopped under way, and the
cache the family feeds is read as the supervisor's would read it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentpool.kube.api import KubeApi, Resource, load_client
from agentpool.kube.informer import Change, Informer, InformerEvent, Relisted
from agentpool.resources.parse import spec_node_name
from agentpool.sim.polling import wait_until
from agentpool.supervisor.narrowing import KindScope, node_scope
from agentpool.supervisor.nodefamily import NodeFamily
from tests.support.apiservers import Backend


def twin(name: str, node: str, cap: float = 100.0) -> dict[str, Any]:
    return {
        "apiVersion": "joulie.io/v1alpha1", "kind": "NodeTwin", "metadata": {"name": name},
        "spec": {"nodeName": node, "profile": "eco", "cpu": {"packagePowerCapWatts": cap}},
    }


class Cache:
    """The kind's objects as the cluster view holds them, and every relist passed on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, dict[str, Any]] = {}
        self.relists: list[set[str]] = []

    def __call__(self, event: InformerEvent) -> None:
        with self.lock:
            if isinstance(event, Relisted):
                self.objects = {o["metadata"]["name"]: o for o in event.items}
                self.relists.append(set(self.objects))
            elif isinstance(event, Change):
                name = event.obj["metadata"]["name"]
                if event.kind == "DELETED":
                    self.objects.pop(name, None)
                else:
                    self.objects[name] = event.obj

    def names(self) -> set[str]:
        with self.lock:
            return set(self.objects)

    def cap(self, name: str) -> float | None:
        with self.lock:
            obj = self.objects.get(name)
        return None if obj is None else float(obj["spec"]["cpu"]["packagePowerCapWatts"])


@pytest.fixture
def api(backend: Backend) -> Iterator[KubeApi]:
    api = KubeApi(load_client(str(backend.kubeconfig)))
    yield api
    api.close()


def family_on(api: KubeApi, cache: Cache, owned: Callable[[], set[str]]) -> NodeFamily:
    """A NodeTwin family bound at one node, its members real informers."""

    def make(scope: KindScope, sink: Callable[[InformerEvent], None]) -> Informer:
        # As the agent makes them: lists through the family's gate, watches held until
        # every first member has listed.
        return Informer(api, Resource.NODE_TWINS, sink, field_selector=scope.field_selector,
                        watch_timeout_s=5, keep=scope.keep, wants=scope.wants, trim=scope.trim,
                        list_gate=family.list_gate,
                        before_first_watch=family.before_first_watch)

    whole = KindScope(keep=lambda obj: spec_node_name(obj) in owned())
    family = NodeFamily(Resource.NODE_TWINS, cache,
                        lambda node, sink: make(node_scope(Resource.NODE_TWINS, node), sink),
                        lambda sink: make(whole, sink), max_nodes=1)
    return family


def test_a_family_watches_by_name_swaps_to_whole_and_back_without_a_gap(
    backend: Backend, api: KubeApi
) -> None:
    for node in ("a", "b", "c"):
        backend.direct.create("nodetwins", twin(node, node))
    backend.direct.create("nodetwins", twin("by-hand", "a"))  # not named after its node
    owned: set[str] = {"a"}
    cache = Cache()
    family = family_on(api, cache, lambda: owned)
    threads_before = threading.active_count()
    try:
        family.follow(owned)
        family.start()
        wait_until(lambda: cache.names() == {"a"}, 20)  # by name: the twin named after a
        assert family.by_name() is True

        owned = {"a", "b"}  # over the bound: whole, and the hand-named twin with it
        family.follow(owned)
        wait_until(lambda: cache.names() == {"a", "b", "by-hand"}, 20)
        assert family.by_name() is False
        wait_until(lambda: len(family.members()) == 1 and family.members()[0].synced.is_set(),
                   20)
        backend.direct.patch("nodetwins", "b", {"spec": {"cpu": {"packagePowerCapWatts": 90}}})
        wait_until(lambda: cache.cap("b") == 90.0, 20)

        owned = {"b"}  # back under: b's own twin, by name
        family.follow(owned)
        wait_until(lambda: cache.names() == {"b"}, 20)
        assert family.by_name() is True
        backend.direct.patch("nodetwins", "b", {"spec": {"cpu": {"packagePowerCapWatts": 80}}})
        backend.direct.patch("nodetwins", "c", {"spec": {"cpu": {"packagePowerCapWatts": 70}}})
        wait_until(lambda: cache.cap("b") == 80.0, 20)
        assert cache.names() == {"b"}
        # Whichever way the kind was watched, no relist passed on lost a node it owned
        # before and after: a's twin until a left, b's from when b came.
        with cache.lock:
            relists = list(cache.relists)
        i = relists.index({"a", "b", "by-hand"})
        assert all("a" in names for names in relists[:i + 1])
        assert all("b" in names for names in relists[i:])
    finally:
        family.stop()
    assert family.members() == []
    wait_until(lambda: threading.active_count() <= threads_before, 10)
