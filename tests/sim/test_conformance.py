"""Behaviour Kubernetes defines, checked on the emulator and on a real kube-apiserver.

Every test runs twice through the real ``kubernetes`` client: against the
emulator (with the chart's CRDs installed) and against kube-apiserver 1.20
from the envtest binaries (skipped, saying how to get them, where they are
absent). Where the two disagree the emulator is wrong; the differences that
remain on purpose are listed in docs/development.md's simulation kit section.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from agentpool.sim.polling import wait_until
from tests.sim.recorder import Recorder
from tests.support.apiservers import Backend

GROUP, VERSION = "joulie.io", "v1alpha1"
TP, NPP = "telemetryprofiles", "nodepowerprofiles"


def node(name: str, **labels: str) -> client.V1Node:
    return client.V1Node(metadata=client.V1ObjectMeta(name=name, labels=labels))


def npp(name: str, **spec: Any) -> dict[str, Any]:
    body = {"nodeName": name, "profile": "eco", **spec}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodePowerProfile",
            "metadata": {"name": name}, "spec": body}


def tp(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TelemetryProfile",
            "metadata": {"name": name},
            "spec": {"target": {"scope": "node", "nodeName": name}}}


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


@pytest.fixture
def core(backend: Backend) -> client.CoreV1Api:
    return client.CoreV1Api(backend.client)


@pytest.fixture
def custom(backend: Backend) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(backend.client)


# -- list / watch -----------------------------------------------------------------


def test_watch_reports_added_modified_deleted_in_order_with_rising_versions(
    core: client.CoreV1Api, recorders: list[Recorder]
) -> None:
    rv = core.list_node().metadata.resource_version
    rec = Recorder(core.list_node, resource_version=rv, label_selector="conf=order")
    recorders.append(rec)
    core.create_node(node("conf-a", conf="order"))
    core.patch_node("conf-a", {"metadata": {"labels": {"extra": "1"}}})
    core.delete_node("conf-a")
    wait_until(lambda: len(rec.events) >= 3, 15)
    assert [(t, n) for t, n, _ in rec.events] == [
        ("ADDED", "conf-a"), ("MODIFIED", "conf-a"), ("DELETED", "conf-a"),
    ]
    versions = [int(v) for _, _, v in rec.events]
    assert versions == sorted(versions)
    assert len(set(versions)) == 3
    # The deletion event carries the object's last state.
    assert rec.objects[-1]["metadata"]["labels"] == {"conf": "order", "extra": "1"}


def test_a_label_selected_watch_sees_objects_enter_and_leave_as_added_and_deleted(
    core: client.CoreV1Api, recorders: list[Recorder]
) -> None:
    core.create_node(node("conf-b"))
    rv = core.list_node().metadata.resource_version
    rec = Recorder(core.list_node, resource_version=rv, label_selector="conf=sel")
    recorders.append(rec)
    core.patch_node("conf-b", {"metadata": {"labels": {"conf": "sel"}}})
    core.patch_node("conf-b", {"metadata": {"labels": {"other": "x"}}})
    core.patch_node("conf-b", {"metadata": {"labels": {"conf": None}}})
    wait_until(lambda: len(rec.events) >= 3, 15)
    assert [t for t, _, _ in rec.events] == ["ADDED", "MODIFIED", "DELETED"]


def test_a_watch_without_version_starts_with_an_added_per_object(
    core: client.CoreV1Api, recorders: list[Recorder]
) -> None:
    for name in ("conf-c1", "conf-c2"):
        core.create_node(node(name, conf="initial"))
    rec = Recorder(core.list_node, label_selector="conf=initial")
    recorders.append(rec)
    wait_until(lambda: len(rec.events) >= 2, 15)
    assert sorted((t, n) for t, n, _ in rec.events) == [("ADDED", "conf-c1"), ("ADDED", "conf-c2")]


SELECTOR_CASES = [
    ("tier=gold", {"s1"}),
    ("tier==gold", {"s1"}),
    ("tier!=gold", {"s2", "s3"}),  # includes the node without the label
    ("tier in (gold,silver)", {"s1", "s2"}),
    ("tier notin (gold)", {"s2", "s3"}),
    ("tier", {"s1", "s2"}),
    ("!tier", {"s3"}),
    ("tier=gold,zone=a", {"s1"}),
    ("tier,zone=b", set()),
]


@pytest.mark.parametrize(("selector", "expected"), SELECTOR_CASES)
def test_label_selectors_select_the_same_nodes(
    core: client.CoreV1Api, selector: str, expected: set[str]
) -> None:
    core.create_node(node("s1", tier="gold", zone="a", conf="sel-table"))
    core.create_node(node("s2", tier="silver", zone="a", conf="sel-table"))
    core.create_node(node("s3", zone="b", conf="sel-table"))
    found = core.list_node(label_selector=f"conf=sel-table,{selector}").items
    assert {n.metadata.name for n in found} == expected


def test_a_list_is_current_at_its_resource_version(core: client.CoreV1Api) -> None:
    created = core.create_node(node("conf-d"))
    listed = core.list_node()
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)
    patched = core.patch_node("conf-d", {"metadata": {"labels": {"x": "1"}}})
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)


def test_a_watch_from_an_expired_version_ends_with_a_410_expired_error(
    backend: Backend, core: client.CoreV1Api
) -> None:
    core.create_node(node("conf-e"))
    first = core.list_node().metadata.resource_version
    expire(backend, core, "conf-e")
    stream = watch.Watch().stream(core.list_node, resource_version=first, timeout_seconds=5)
    with pytest.raises(ApiException) as caught:
        for _ in stream:
            pass
    assert caught.value.status == 410
    assert "too old resource version" in str(caught.value)


def expire(backend: Backend, core: client.CoreV1Api, name: str) -> None:
    """Make ``name``'s first version older than what the server can replay.

    kube-apiserver replays from its watch cache, which grows with recent
    traffic and starts afresh at a restart (etcd keeps the data): a restart is
    how a real cluster most often answers a watch with 410. The emulator's
    history is sized at construction, so there it is shrunk and overrun.
    """
    for i in range(3):
        core.patch_node(name, {"metadata": {"labels": {"n": str(i)}}})
    if backend.server is not None:
        backend.server.stop_apiserver()
        backend.server.start_apiserver()
        return
    backend.direct.store._history_limit = 2  # type: ignore[attr-defined]
    core.patch_node(name, {"metadata": {"labels": {"n": "last"}}})


# -- errors and their Status bodies ---------------------------------------------------


def test_404_409_status_bodies(core: client.CoreV1Api, custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as caught:
        core.read_node("conf-missing")
    body = status_of(caught.value)
    assert (caught.value.status, body["reason"], body["code"]) == (404, "NotFound", 404)
    assert body["message"] == 'nodes "conf-missing" not found'
    assert body["details"] == {"name": "conf-missing", "kind": "nodes"}
    with pytest.raises(ApiException) as caught:
        custom.get_cluster_custom_object(GROUP, VERSION, NPP, "conf-missing")
    assert status_of(caught.value)["details"] == {
        "name": "conf-missing", "group": GROUP, "kind": NPP,
    }

    core.create_node(node("conf-f"))
    with pytest.raises(ApiException) as caught:
        core.create_node(node("conf-f"))
    body = status_of(caught.value)
    assert (body["code"], body["reason"]) == (409, "AlreadyExists")
    assert body["message"] == 'nodes "conf-f" already exists'

    stale = core.read_node("conf-f")
    core.patch_node("conf-f", {"metadata": {"labels": {"v": "2"}}})
    with pytest.raises(ApiException) as caught:
        core.replace_node("conf-f", stale)
    body = status_of(caught.value)
    assert (body["code"], body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        'Operation cannot be fulfilled on nodes "conf-f": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


INVALID_PROFILES = [
    ({"profile": "turbo"}, {(
        "FieldValueNotSupported", "spec.profile",
        'Unsupported value: "turbo": supported values: "performance", "eco"')}),
    ({"cpu": {"packagePowerCapWatts": 0}}, {(
        "FieldValueInvalid", "spec.cpu.packagePowerCapWatts",
        "Invalid value: 0: spec.cpu.packagePowerCapWatts in body should be greater than or "
        "equal to 1")}),
    ({"cpu": {"packagePowerCapWatts": "120W"}}, {(
        "FieldValueInvalid", "spec.cpu.packagePowerCapWatts",
        'Invalid value: "string": spec.cpu.packagePowerCapWatts in body must be of type number: '
        '"string"')}),
    ({"nodeName": None}, {("FieldValueRequired", "spec.nodeName", "Required value")}),
]


@pytest.mark.parametrize(("spec", "causes"), INVALID_PROFILES)
def test_objects_that_break_the_crd_schema_are_422_invalid_naming_the_field(
    custom: client.CustomObjectsApi, spec: dict[str, Any], causes: set[tuple[str, str, str]]
) -> None:
    body = npp("conf-bad", **spec)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    with pytest.raises(ApiException) as caught:
        custom.create_cluster_custom_object(GROUP, VERSION, NPP, body)
    status = status_of(caught.value)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["details"]["kind"] == "NodePowerProfile"
    got = {(c["reason"], c["field"], c["message"]) for c in status["details"]["causes"]}
    assert got == causes
    ((_, field, message),) = causes
    assert status["message"] == (
        f'NodePowerProfile.joulie.io "conf-bad" is invalid: {field}: {message}'
    )


def test_several_violations_are_listed_in_brackets(custom: client.CustomObjectsApi) -> None:
    body = npp("conf-bad2", profile="turbo", cpu={"packagePowerCapWatts": -1})
    with pytest.raises(ApiException) as caught:
        custom.create_cluster_custom_object(GROUP, VERSION, NPP, body)
    message = status_of(caught.value)["message"]
    assert message.startswith('NodePowerProfile.joulie.io "conf-bad2" is invalid: [')
    assert message.endswith("]")
    assert len(status_of(caught.value)["details"]["causes"]) == 2


# -- custom resources: pruning, status subresource, merge patch ---------------------------


def test_undeclared_fields_are_pruned_and_free_form_ones_kept(
    custom: client.CustomObjectsApi,
) -> None:
    body = npp("conf-g", bogus=1)
    body["spec"]["cpu"] = {"packagePowerCapWatts": 120, "turbo": True}
    created = custom.create_cluster_custom_object(GROUP, VERSION, NPP, body)
    assert created["spec"] == {"nodeName": "conf-g", "profile": "eco",
                               "cpu": {"packagePowerCapWatts": 120}}
    custom.create_cluster_custom_object(GROUP, VERSION, TP, tp("conf-g"))
    written = custom.patch_cluster_custom_object_status(GROUP, VERSION, TP, "conf-g", {"status": {
        "control": {"cpu": {"backend": "rapl", "result": "applied", "message": "m",
                            "observed": {"powerWatts": 99.5, "deep": {"x": [1, 2]}},
                            "updatedAt": "2026-01-01T00:00:00Z", "undeclared": 5}},
        "elsewhere": {"a": 1},
    }})
    assert written["status"] == {"control": {"cpu": {
        "backend": "rapl", "result": "applied", "message": "m",
        "observed": {"powerWatts": 99.5, "deep": {"x": [1, 2]}},
        "updatedAt": "2026-01-01T00:00:00Z",
    }}}


def test_status_subresource_splits_writes_both_ways(custom: client.CustomObjectsApi) -> None:
    body = tp("conf-h")
    body["status"] = {"control": {"cpu": {"result": "applied"}}}
    created = custom.create_cluster_custom_object(GROUP, VERSION, TP, body)
    assert "status" not in created  # status is dropped on create
    generation = created["metadata"]["generation"]

    status_write = custom.patch_cluster_custom_object_status(GROUP, VERSION, TP, "conf-h", {
        "spec": {"target": {"nodeName": "ignored"}},
        "status": {"control": {"cpu": {"result": "error"}}},
    })
    assert status_write["spec"]["target"]["nodeName"] == "conf-h"
    assert status_write["status"]["control"]["cpu"]["result"] == "error"
    assert status_write["metadata"]["generation"] == generation

    main_write = custom.patch_cluster_custom_object(GROUP, VERSION, TP, "conf-h", {
        "spec": {"target": {"nodeName": "other"}},
        "status": {"control": {"cpu": {"result": "applied"}}},
    })
    assert main_write["spec"]["target"]["nodeName"] == "other"
    assert main_write["status"]["control"]["cpu"]["result"] == "error"
    assert main_write["metadata"]["generation"] == generation + 1


def test_merge_patch_removes_keys_with_null_and_replaces_lists(core: client.CoreV1Api) -> None:
    core.create_node(node("conf-i", a="1", b="2"))
    patched = core.patch_node("conf-i", {"metadata": {"labels": {"a": None, "c": "3"}}})
    assert patched.metadata.labels == {"b": "2", "c": "3"}
    core.patch_node("conf-i", {"spec": {"taints": [{"key": "k1", "effect": "NoSchedule"}]}})
    taints = [{"key": "k2", "effect": "NoSchedule"}]
    patched = core.patch_node("conf-i", {"spec": {"taints": taints}})
    assert [t.key for t in patched.spec.taints] == ["k2"]


def test_an_unchanged_write_creates_no_new_version(custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object(GROUP, VERSION, TP, tp("conf-j"))
    status = {"status": {"control": {"cpu": {"result": "applied", "message": "same"}}}}
    first = custom.patch_cluster_custom_object_status(GROUP, VERSION, TP, "conf-j", status)
    again = custom.patch_cluster_custom_object_status(GROUP, VERSION, TP, "conf-j", status)
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
