"""Every name first, then each wanted object by name (issue 46), on both API servers.

The real kube-apiserver answers a Table of names; the emulator ignores the ``Accept``
header and answers the objects, so there the informer lists the kind whole instead.
"""

from __future__ import annotations

import queue
from typing import Any

from agentpool.kube.api import KubeApi, Resource, load_client
from agentpool.kube.informer import Change, Informer, InformerEvent, Relisted
from agentpool.kube.namesfirst import list_names, list_wanted
from agentpool.resources.parse import metadata_name
from tests.support.apiservers import Backend

SELECTOR = "joulie.io/managed=true"
MANAGED = [f"n{i}.example.com" for i in range(7)]
WANTED = {MANAGED[1], MANAGED[4], "unmanaged.example.com"}


def node(name: str, managed: bool = True) -> dict[str, Any]:
    labels = {"joulie.io/managed": "true"} if managed else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def seed(backend: Backend) -> None:
    for name in MANAGED:
        backend.direct.create("nodes", node(name))
    backend.direct.create("nodes", node("unmanaged.example.com", managed=False))


def api_for(backend: Backend, calls: list[tuple[str, str]]) -> KubeApi:
    return KubeApi(load_client(str(backend.kubeconfig)),
                   on_request=lambda verb, res, code: calls.append((verb, res)))


def test_the_names_a_selector_picks_come_in_pages_without_their_objects(
    backend: Backend,
) -> None:
    seed(backend)
    calls: list[tuple[str, str]] = []
    api = api_for(backend, calls)
    try:
        named = list_names(api, Resource.NODES, SELECTOR, page_size=3)
    finally:
        api.close()
    if backend.server is None:
        assert named is None  # answered with the objects: no Table here
        return
    assert named is not None
    assert sorted(named.names) == MANAGED
    assert named.resource_version
    assert calls == [("list", "nodes")] * 3  # 7 names in pages of 3


def test_only_the_wanted_objects_the_selector_picks_are_read(backend: Backend) -> None:
    seed(backend)
    calls: list[tuple[str, str]] = []
    api = api_for(backend, calls)
    try:
        listing = list_wanted(api, Resource.NODES, WANTED.__contains__, SELECTOR,
                              trim=lambda obj: {"metadata": {"name": metadata_name(obj)}})
    finally:
        api.close()
    if backend.server is None:
        assert listing is None
        return
    assert listing is not None
    assert sorted(i["metadata"]["name"] for i in listing.items) == [MANAGED[1], MANAGED[4]]
    assert all(i == {"metadata": {"name": i["metadata"]["name"]}} for i in listing.items)
    assert listing.resource_version
    assert calls == [("list", "nodes")] * 3  # the names, then each of the two by name


class Sink:
    def __init__(self) -> None:
        self.events: queue.SimpleQueue[InformerEvent] = queue.SimpleQueue()

    def __call__(self, event: InformerEvent) -> None:
        self.events.put(event)

    def next(self) -> InformerEvent:
        return self.events.get(timeout=10)


def test_an_informer_listing_names_first_misses_nothing_made_while_it_lists(
    backend: Backend,
) -> None:
    seed(backend)
    late = "late.example.com"
    wanted = {*WANTED, late}

    def between(verb: str, resource: str, code: int) -> None:
        # Right after the first answer (the names), before the objects are read by name: a
        # wanted node is made, one listed is changed and one is deleted.
        if not acted:
            acted.append(True)
            backend.direct.create("nodes", node(late))
            backend.direct.patch("nodes", MANAGED[1], {"metadata": {"labels": {"step": "1"}}})
            backend.direct.delete("nodes", MANAGED[4])

    acted: list[bool] = []
    api = KubeApi(load_client(str(backend.kubeconfig)), on_request=between)
    sink = Sink()
    informer = Informer(api, Resource.NODES, sink, label_selector=SELECTOR,
                        keep=lambda obj: metadata_name(obj) in wanted,
                        wants=wanted.__contains__, names_first=True)
    cache: dict[str, dict[str, Any]] = {}
    informer.start()
    try:
        first = sink.next()
        assert isinstance(first, Relisted)
        cache = {metadata_name(o): o for o in first.items}
        # The node made meanwhile is in no list the informer made, on either server:
        # only a watch from the names' snapshot brings it.
        while late not in cache:
            event = sink.next()
            assert isinstance(event, Change)
            name = metadata_name(event.obj)
            if event.kind == "DELETED":
                cache.pop(name, None)
            else:
                cache[name] = event.obj
        assert informer.names_first == (backend.server is not None)
    finally:
        informer.stop()
        api.close()
    assert set(cache) == {MANAGED[1], late}
    assert cache[MANAGED[1]]["metadata"]["labels"]["step"] == "1"
