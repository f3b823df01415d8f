"""Lists in pages, and informers that keep only what concerns the pod, on both API servers."""

from __future__ import annotations

import json
import queue
from collections.abc import Callable
from typing import Any

from agentpool.kube.api import KubeApi, Resource, load_client
from agentpool.kube.informer import Change, Informer, InformerEvent, Relisted
from agentpool.kube.rawevents import glance, head
from agentpool.resources.parse import spec_node_name
from tests.support.apiservers import Backend


def twin(name: str, node: str, cap: float = 100.0) -> dict[str, Any]:
    return {
        "apiVersion": "joulie.io/v1alpha1", "kind": "NodeTwin", "metadata": {"name": name},
        "spec": {"nodeName": node, "profile": "eco", "cpu": {"packagePowerCapWatts": cap}},
    }


def names(items: list[dict[str, Any]]) -> list[str]:
    return sorted(i["metadata"]["name"] for i in items)


class Sink:
    def __init__(self) -> None:
        self.events: queue.SimpleQueue[InformerEvent] = queue.SimpleQueue()

    def __call__(self, event: InformerEvent) -> None:
        self.events.put(event)

    def next(self, timeout: float = 10.0) -> InformerEvent:
        return self.events.get(timeout=timeout)

    def change(self) -> tuple[str, str, Any]:
        event = self.next()
        assert isinstance(event, Change), event
        return event.kind, event.obj["metadata"]["name"], event.obj["spec"].get("nodeName")


def api_for(backend: Backend, calls: list[tuple[str, str]] | None = None) -> KubeApi:
    hook = None if calls is None else (lambda verb, res, code: calls.append((verb, res)))
    return KubeApi(load_client(str(backend.kubeconfig)), on_request=hook)


def watch_until_deleted(api: KubeApi, resource: Resource, version: str,
                        skip: Callable[[str], str | None]) -> None:
    """Watch from ``version`` (each line shown to ``skip``) until a deletion; closes ``api``."""
    try:
        for event in api.watch(resource, version, 5, skip=skip):
            if event["type"] == "DELETED":
                return
    finally:
        api.close()


def test_a_list_in_pages_is_the_whole_listing_filtered(backend: Backend) -> None:
    for i in range(7):
        backend.direct.create("nodetwins", twin(f"t{i}", f"node-{i % 2}"))
    calls: list[tuple[str, str]] = []
    api = api_for(backend, calls)
    try:
        listing = api.list(Resource.NODE_TWINS, page_size=3,
                           keep=lambda obj: spec_node_name(obj) == "node-1")
        assert names(listing.items) == ["t1", "t3", "t5"]
        assert listing.resource_version
        everything = api.list(Resource.NODE_TWINS, page_size=3)
        assert names(everything.items) == [f"t{i}" for i in range(7)]
    finally:
        api.close()
    if backend.server is not None:  # the emulator answers a whole list whatever the limit
        assert calls.count(("list", "nodetwins")) == 3 + 3


def test_an_informer_keeps_its_nodes_objects_and_follows_one_retargeted(
    backend: Backend,
) -> None:
    backend.direct.create("nodetwins", twin("mine", "a"))
    backend.direct.create("nodetwins", twin("other", "b"))
    api, sink = api_for(backend), Sink()
    informer = Informer(api, Resource.NODE_TWINS, sink,
                        keep=lambda obj: spec_node_name(obj) == "a")
    informer.start()
    try:
        first = sink.next()
        assert isinstance(first, Relisted)
        assert names(first.items) == ["mine"]
        backend.direct.patch("nodetwins", "other", {"spec": {"profile": "performance"}})
        backend.direct.create("nodetwins", twin("late", "a"))
        # Another node's change is dropped: the next event is the new twin of ours.
        assert sink.change() == ("ADDED", "late", "a")
        backend.direct.patch("nodetwins", "mine", {"spec": {"nodeName": "b"}})
        assert sink.change() == ("MODIFIED", "mine", "b")  # it leaves: the cache must know
        backend.direct.patch("nodetwins", "mine", {"spec": {"profile": "performance"}})
        backend.direct.delete("nodetwins", "other")
        backend.direct.delete("nodetwins", "late")
        assert sink.change() == ("DELETED", "late", "a")
        assert sink.events.empty()
    finally:
        informer.stop()
        api.close()


def test_the_head_of_a_node_watch_line_is_what_the_line_says(backend: Backend) -> None:
    """Checked against every line the server sends for a node's life: where ``head`` reads
    one, it reads what decoding the line gives (the real server's lines must all be read)."""
    api, heads = api_for(backend), []

    def skip(line: str) -> str | None:
        event = json.loads(line)
        meta = event["object"]["metadata"]
        heads.append((head(line), (event["type"], meta["name"], meta["resourceVersion"])))
        return None

    backend.direct.create("nodes", {"metadata": {"name": "before"}})  # a version that is not 0
    listing = api.list(Resource.NODES)
    backend.direct.create("nodes", {"metadata": {"name": "n.example.com", "labels": {"a": "b"}}})
    backend.direct.patch("nodes", "n.example.com", {"metadata": {"labels": {"a": "c"}}})
    backend.direct.delete("nodes", "n.example.com")
    watch_until_deleted(api, Resource.NODES, listing.resource_version, skip)
    assert [seen[1][0] for seen in heads] == ["ADDED", "MODIFIED", "DELETED"]
    for read, decoded in heads:
        assert read in (decoded, None)
    if backend.server is not None:
        assert all(read is not None for read, _ in heads)


def test_events_about_unwanted_nodes_pass_undecoded_and_move_the_watch_on(
    backend: Backend,
) -> None:
    for name in ("a", "b"):
        backend.direct.create("nodes", {"metadata": {"name": name}})
    api, sink = api_for(backend), Sink()
    informer = Informer(api, Resource.NODES, sink, watch_timeout_s=2,
                        keep=lambda obj: obj["metadata"]["name"] == "a",
                        wants=lambda name: name == "a")
    informer.start()
    try:
        first = sink.next()
        assert isinstance(first, Relisted)
        assert names(first.items) == ["a"]
        for i in range(5):
            backend.direct.patch("nodes", "b", {"metadata": {"labels": {"i": str(i)}}})
        backend.direct.patch("nodes", "a", {"metadata": {"labels": {"i": "x"}}})
        event = sink.next()
        assert isinstance(event, Change)
        assert event.obj["metadata"]["name"] == "a"
        # The watch ends every 2 s and resumes from the last version it saw, b's skipped
        # events included: none comes back, and no relist was needed.
        backend.direct.patch("nodes", "a", {"metadata": {"labels": {"i": "y"}}})
        event = sink.next(timeout=15)
        assert isinstance(event, Change)
        assert event.obj["metadata"]["labels"]["i"] == "y"
        assert sink.events.empty()
    finally:
        informer.stop()
        api.close()


def test_a_glance_at_a_custom_resources_line_reads_what_decoding_it_gives(
    backend: Backend,
) -> None:
    """Every line of a NodeTwin's life: where ``glance`` reads one, its version is the
    object's and its names and node names include the object's (on the real server every
    line is read; the emulator writes JSON with spaces, which ``glance`` leaves alone)."""
    backend.direct.create("nodetwins", twin("before", "x"))
    api, seen = api_for(backend), []

    def skip(line: str) -> str | None:
        seen.append((glance(line), json.loads(line)))
        return None

    listing = api.list(Resource.NODE_TWINS)
    backend.direct.create("nodetwins", twin("w1", "worker-1.example.com"))
    backend.direct.patch("nodetwins", "w1", {"spec": {"policy": {"name": "p"}}})
    backend.direct.patch("nodetwins", "w1", {"spec": {"nodeName": "worker-2"}})
    backend.direct.delete("nodetwins", "w1")
    watch_until_deleted(api, Resource.NODE_TWINS, listing.resource_version, skip)
    assert [event["type"] for _, event in seen] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
    for read, event in seen:
        if read is None:
            assert backend.server is None
            continue
        obj = event["object"]
        assert read.version == obj["metadata"]["resourceVersion"]
        assert obj["metadata"]["name"] in read.names
        assert spec_node_name(obj) in read.nodes


def test_events_of_other_nodes_custom_resources_are_not_decoded(backend: Backend) -> None:
    backend.direct.create("nodetwins", twin("mine", "a"))
    backend.direct.create("nodetwins", twin("other", "b"))
    decoded: list[str] = []

    def keep(obj: dict[str, Any]) -> bool:
        decoded.append(obj["metadata"]["name"])
        return spec_node_name(obj) == "a"

    api, sink = api_for(backend), Sink()
    informer = Informer(api, Resource.NODE_TWINS, sink, keep=keep, wants=lambda n: n == "a")
    informer.start()
    try:
        assert isinstance(sink.next(), Relisted)
        decoded.clear()
        for i in range(3):
            cap = {"cpu": {"packagePowerCapWatts": 90 + i}}
            backend.direct.patch("nodetwins", "other", {"spec": cap})
        backend.direct.patch("nodetwins", "mine", {"spec": {"profile": "performance"}})
        assert sink.change() == ("MODIFIED", "mine", "a")
        # Retargeted to another node, a followed object is still decoded and passed on.
        backend.direct.patch("nodetwins", "mine", {"spec": {"nodeName": "b"}})
        assert sink.change() == ("MODIFIED", "mine", "b")
    finally:
        informer.stop()
        api.close()
    if backend.server is not None:
        assert decoded == ["mine", "mine"]
