"""Namespaced Leases and StatefulSets (with ``/scale``), on the emulator and a real server.

The elastic pool (docs/modes.md: elastic pool) holds a ``coordination.k8s.io/v1``
Lease per pod and follows its StatefulSet's ``spec.replicas``; these tests pin
the behaviour it relies on, through the real ``kubernetes`` client, against
the emulator and kube-apiserver 1.20 alike. Every test uses its own object
names and deletes what it made, because the real server is shared by the run.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentpool.sim.polling import wait_until
from tests.sim.recorder import Recorder
from tests.support.apiservers import Backend

NS = "default"
OTHER_NS = "kube-system"  # exists on every real server; the emulator needs none created


@pytest.fixture
def coord(backend: Backend) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(backend.client)


@pytest.fixture
def apps(backend: Backend) -> client.AppsV1Api:
    return client.AppsV1Api(backend.client)


@pytest.fixture
def unique() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _cleanup(backend: Backend, unique: str) -> Iterator[None]:
    yield
    coord = client.CoordinationV1Api(backend.client)
    apps = client.AppsV1Api(backend.client)
    for ns in (NS, OTHER_NS):
        for lease in coord.list_namespaced_lease(ns).items:
            if lease.metadata.name.startswith(unique):
                coord.delete_namespaced_lease(lease.metadata.name, ns)
        for sts in apps.list_namespaced_stateful_set(ns).items:
            if sts.metadata.name.startswith(unique):
                apps.delete_namespaced_stateful_set(sts.metadata.name, ns)


def lease(name: str, holder: str, seconds: int = 10) -> client.V1Lease:
    now = datetime.datetime.now(datetime.UTC)
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1LeaseSpec(
            holder_identity=holder, lease_duration_seconds=seconds, acquire_time=now,
            renew_time=now, lease_transitions=0,
        ),
    )


def statefulset(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
        "spec": {
            "replicas": replicas, "serviceName": name, "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "agent", "image": "agentpool:test"}]},
            },
        },
    }


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


# -- Leases ---------------------------------------------------------------------


def test_a_lease_is_created_read_renewed_and_a_stale_renewal_is_a_409(
    coord: client.CoordinationV1Api, unique: str
) -> None:
    name = f"{unique}-pool-0"
    created = coord.create_namespaced_lease(NS, lease(name, "pool-0"))
    assert created.metadata.namespace == NS
    assert created.spec.holder_identity == "pool-0"
    assert created.spec.lease_duration_seconds == 10
    got = coord.read_namespaced_lease(name, NS)
    assert got.metadata.resource_version == created.metadata.resource_version
    renewed_at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    got.spec.renew_time = renewed_at
    renewed = coord.replace_namespaced_lease(name, NS, got)
    assert int(renewed.metadata.resource_version) > int(got.metadata.resource_version)
    # MicroTime keeps microseconds through the round trip.
    assert renewed.spec.renew_time == renewed_at
    # Another writer still holding the first version loses: the lease is not overwritten.
    created.spec.holder_identity = "intruder"
    with pytest.raises(ApiException) as info:
        coord.replace_namespaced_lease(name, NS, created)
    assert info.value.status == 409
    assert status_of(info.value)["reason"] == "Conflict"
    assert coord.read_namespaced_lease(name, NS).spec.holder_identity == "pool-0"
    with pytest.raises(ApiException) as again:
        coord.create_namespaced_lease(NS, lease(name, "pool-0"))
    assert status_of(again.value)["reason"] == "AlreadyExists"


def test_leases_are_listed_per_namespace_and_by_name_field_selector(
    coord: client.CoordinationV1Api, unique: str
) -> None:
    for i in range(3):
        coord.create_namespaced_lease(NS, lease(f"{unique}-{i}", f"pod-{i}"))
    coord.create_namespaced_lease(OTHER_NS, lease(f"{unique}-0", "elsewhere"))
    mine = [x.metadata.name for x in coord.list_namespaced_lease(NS).items
            if x.metadata.name.startswith(unique)]
    assert mine == [f"{unique}-0", f"{unique}-1", f"{unique}-2"]
    one = coord.list_namespaced_lease(NS, field_selector=f"metadata.name={unique}-1").items
    assert [(x.metadata.namespace, x.spec.holder_identity) for x in one] == [(NS, "pod-1")]
    everywhere = coord.list_lease_for_all_namespaces(field_selector=f"metadata.name={unique}-0")
    assert sorted((x.metadata.namespace, x.spec.holder_identity) for x in everywhere.items) == [
        (NS, "pod-0"), (OTHER_NS, "elsewhere"),
    ]
    with pytest.raises(ApiException) as info:
        coord.read_namespaced_lease(f"{unique}-1", OTHER_NS)
    assert info.value.status == 404


def test_a_lease_merge_patch_changes_only_what_it_names(
    coord: client.CoordinationV1Api, unique: str
) -> None:
    name = f"{unique}-patch"
    coord.create_namespaced_lease(NS, lease(name, "a"))
    patched = coord.patch_namespaced_lease(
        name, NS, {"metadata": {"annotations": {"agentpool.joulie.io/claims": "x"}}},
    )
    assert patched.metadata.annotations == {"agentpool.joulie.io/claims": "x"}
    assert patched.spec.holder_identity == "a"


def test_a_name_selected_lease_watch_sees_only_that_lease(
    coord: client.CoordinationV1Api, unique: str, recorders: list[Recorder]
) -> None:
    rv = coord.list_namespaced_lease(NS).metadata.resource_version
    rec = Recorder(coord.list_namespaced_lease, namespace=NS, resource_version=rv,
                   field_selector=f"metadata.name={unique}-w")
    recorders.append(rec)
    coord.create_namespaced_lease(NS, lease(f"{unique}-other", "b"))
    coord.create_namespaced_lease(NS, lease(f"{unique}-w", "a"))
    coord.patch_namespaced_lease(f"{unique}-w", NS, {"spec": {"holderIdentity": "c"}})
    coord.delete_namespaced_lease(f"{unique}-w", NS)
    wait_until(lambda: len(rec.events) >= 3, 15)
    assert [(t, n) for t, n, _ in rec.events] == [
        ("ADDED", f"{unique}-w"), ("MODIFIED", f"{unique}-w"), ("DELETED", f"{unique}-w"),
    ]
    assert rec.objects[1]["spec"]["holderIdentity"] == "c"


# -- StatefulSets and /scale ------------------------------------------------------------


def test_scale_reads_and_writes_spec_replicas(apps: client.AppsV1Api, unique: str) -> None:
    name = f"{unique}-pool"
    created = apps.create_namespaced_stateful_set(NS, statefulset(name, 2))
    assert created.spec.replicas == 2
    assert created.metadata.generation == 1
    scale = apps.read_namespaced_stateful_set_scale(name, NS)
    assert scale.spec.replicas == 2
    assert scale.status.replicas == 0  # no controller creates pods on either server
    assert scale.status.selector == f"app={name}"
    assert scale.metadata.resource_version == created.metadata.resource_version
    scaled = apps.patch_namespaced_stateful_set_scale(name, NS, {"spec": {"replicas": 5}})
    assert scaled.spec.replicas == 5
    after = apps.read_namespaced_stateful_set(name, NS)
    assert after.spec.replicas == 5
    assert after.metadata.generation == 2
    assert after.metadata.resource_version == scaled.metadata.resource_version


def test_a_stale_scale_is_a_409_and_a_negative_one_a_422(
    apps: client.AppsV1Api, unique: str
) -> None:
    name = f"{unique}-stale"
    apps.create_namespaced_stateful_set(NS, statefulset(name, 3))
    scale = apps.read_namespaced_stateful_set_scale(name, NS)
    apps.patch_namespaced_stateful_set_scale(name, NS, {"spec": {"replicas": 4}})
    scale.spec.replicas = 1
    with pytest.raises(ApiException) as stale:
        apps.replace_namespaced_stateful_set_scale(name, NS, scale)
    assert stale.value.status == 409
    assert apps.read_namespaced_stateful_set(name, NS).spec.replicas == 4
    with pytest.raises(ApiException) as negative:
        apps.patch_namespaced_stateful_set_scale(name, NS, {"spec": {"replicas": -1}})
    assert negative.value.status == 422
    assert "spec.replicas" in status_of(negative.value)["message"]


def test_a_name_selected_statefulset_watch_sees_each_scale(
    apps: client.AppsV1Api, unique: str, recorders: list[Recorder]
) -> None:
    name = f"{unique}-w"
    apps.create_namespaced_stateful_set(NS, statefulset(f"{unique}-x", 1))
    apps.create_namespaced_stateful_set(NS, statefulset(name, 2))
    rec = Recorder(apps.list_namespaced_stateful_set, namespace=NS,
                   field_selector=f"metadata.name={name}")
    recorders.append(rec)
    wait_until(lambda: len(rec.events) >= 1, 15)
    for replicas in (3, 5, 2):
        apps.patch_namespaced_stateful_set_scale(name, NS, {"spec": {"replicas": replicas}})
    wait_until(lambda: len(rec.events) >= 4, 15)
    assert {n for _, n, _ in rec.events} == {name}
    assert [o["spec"]["replicas"] for o in rec.objects] == [2, 3, 5, 2]
    assert [t for t, _, _ in rec.events] == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED"]
