"""``events.k8s.io/v1`` Events about Nodes, on the emulator and a real server alike.

The agent records its Node events through this API (docs/metrics.md: Node events);
these tests pin what the emulator must refuse and accept as kube-apiserver
1.20 does, through the real ``kubernetes`` client: the fields a new Event
must carry, the namespace of an Event about a cluster-scoped object, a
series of count >= 2, and (emulator only: 1.20 checks no update of an
Event, later versions do) that only the series of an existing Event may
change. Each test uses its own names and deletes what it made.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.apiservers import Backend

NS = "kube-system"
"""kube-apiserver 1.20 takes an events.k8s.io Event about a cluster-scoped object only here."""
MERGE = "application/merge-patch+json"


@pytest.fixture
def events(backend: Backend) -> client.EventsV1Api:
    return client.EventsV1Api(backend.client)


@pytest.fixture
def unique() -> str:
    return f"n{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _cleanup(backend: Backend, unique: str) -> Iterator[None]:
    yield
    api = client.EventsV1Api(backend.client)
    for ns in (NS,):
        for item in api.list_namespaced_event(ns).items:
            if item.metadata.name.startswith(unique):
                api.delete_namespaced_event(item.metadata.name, ns)


def event(name: str, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "agentpool", "reportingInstance": "pool-0",
        "action": "SetPowerCap", "reason": "PowerCapApplied", "type": "Normal",
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": name, "uid": name},
        "note": "CPU power cap 120 W via rapl applied",
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def create(api: client.EventsV1Api, body: dict[str, Any], ns: str = NS) -> dict[str, Any]:
    # Through the generic object API, which sends the JSON as given: the typed one turns a
    # dict into its model and writes MicroTime without the zero microseconds, which the
    # real server refuses (400).
    objects = client.CustomObjectsApi(api.api_client)
    answer = objects.create_namespaced_custom_object(
        "events.k8s.io", "v1", ns, "events", body, _preload_content=False)
    created: dict[str, Any] = json.loads(answer.data)
    return created


def refused(call: Any) -> tuple[int, str]:
    with pytest.raises(ApiException) as caught:
        call()
    body = json.loads(caught.value.body or "{}")
    return int(caught.value.status or 0), str(body.get("message", ""))


def test_a_node_event_is_created_and_its_series_patched(
    events: client.EventsV1Api, unique: str
) -> None:
    created = create(events, event(unique))
    assert created["metadata"]["namespace"] == NS
    assert created["reportingController"] == "agentpool"
    series = {"count": 3, "lastObservedTime": "2026-01-01T00:05:00.000000Z"}
    answer = events.patch_namespaced_event(
        unique, NS, {"series": series}, _content_type=MERGE, _preload_content=False)
    patched = json.loads(answer.data)
    assert patched["series"] == series
    assert patched["note"] == created["note"]
    # Created with a series at once (occurrences folded while over budget) is fine too.
    again = create(events, event(unique + "-b", series=series))
    assert again["series"]["count"] == 3


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"reportingController": None}, "reportingController"),
        ({"reportingInstance": None}, "reportingInstance"),
        ({"action": None}, "action"),
        ({"reason": None}, "reason"),
        ({"eventTime": None}, "eventTime"),
        ({"type": "Bad"}, "type"),
        ({"series": {"count": 1, "lastObservedTime": "2026-01-01T00:05:00.000000Z"}},
         "series.count"),
        ({"note": "x" * 1025}, "note"),
    ],
)
def test_an_incomplete_event_is_refused_naming_the_field(
    events: client.EventsV1Api, unique: str, overrides: dict[str, Any], field: str
) -> None:
    code, message = refused(lambda: create(events, event(unique, **overrides)))
    assert code == 422
    # 1.20 names the note by its core/v1 name, "message".
    assert field in message or (field == "note" and "message" in message), message


def test_an_event_about_a_node_is_refused_in_another_namespace(
    events: client.EventsV1Api, unique: str
) -> None:
    code, message = refused(lambda: create(events, event(unique), ns="joulie-system"))
    # The real server may answer 404 for a namespace it does not have; what matters is
    # that nothing about a cluster-scoped object is stored in a namespace of its own.
    assert code in (404, 422), message


def test_only_the_series_of_an_event_may_change(
    events: client.EventsV1Api, unique: str, backend: Backend
) -> None:
    if backend.name == "envtest":
        # kube-apiserver 1.20 does not check updates of events.k8s.io Events at all (later
        # versions refuse these): the emulator, at 1.30, is the stricter one here.
        pytest.skip("kube-apiserver 1.20 accepts any update of an Event")
    create(events, event(unique))
    for change in ({"note": "something else"}, {"reason": "PowerCapChanged"},
                   {"reportingInstance": "pool-1"}):
        code, message = refused(lambda c=change: events.patch_namespaced_event(  # type: ignore[misc]
            unique, NS, c, _content_type=MERGE, _preload_content=False))
        assert code == 422, message
        assert next(iter(change)) in message or "immutable" in message
