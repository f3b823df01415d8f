"""The elastic pool's Lease and StatefulSet I/O, on the emulator and a real kube-apiserver."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from agentpool.errors import KubeTemporaryError
from agentpool.kube.api import KubeApi, load_client
from agentpool.kube.leases import LeaseClient, ReplicasWatch, lease_record
from agentpool.pool.membership import (
    ANNOTATION_CLAIMS,
    ANNOTATION_GRACE,
    LABEL_POOL,
    encode_claims,
)
from agentpool.sim.polling import wait_until
from tests.support.apiservers import Backend

NS = "default"


@pytest.fixture
def pool(backend: Backend) -> Iterator[str]:
    name = f"lease{uuid.uuid4().hex[:6]}"
    yield name
    coord = client.CoordinationV1Api(backend.client)
    for lease in coord.list_namespaced_lease(NS, label_selector=f"{LABEL_POOL}={name}").items:
        coord.delete_namespaced_lease(lease.metadata.name, NS)


@pytest.fixture
def api(backend: Backend) -> Iterator[KubeApi]:
    kube = KubeApi(load_client(str(backend.kubeconfig)), namespace=NS)
    yield kube
    kube.close()


def test_a_lease_is_created_renewed_released_and_read_back(api: KubeApi, pool: str) -> None:
    leases = LeaseClient(api, f"{pool}-0", pool, 2.5, 3.0)
    assert leases.own() is None
    leases.write(frozenset({"n1", "n2"}), "abcd0123")
    other = LeaseClient(api, f"{pool}-1", pool, 2.5, 3.0)
    other.write(frozenset(), "abcd0123")
    records = {r.name: r for r in leases.members()}
    assert set(records) == {f"{pool}-0", f"{pool}-1"}
    first = records[f"{pool}-0"]
    assert (first.holder, first.duration_s) == (f"{pool}-0", 3.0)  # whole seconds, rounded up
    assert (first.claims, first.view) == ({"n1", "n2"}, "abcd0123")
    assert first.grace_s == 3.0  # what its peers wait after its lease expired
    leases.write(frozenset({"n1"}), "ffff0000")
    renewed = {r.name: r for r in leases.members()}[f"{pool}-0"]
    assert renewed.renewal != first.renewal
    assert renewed.claims == {"n1"}
    # A new incarnation of the same pod finds what the last one claimed.
    again = LeaseClient(api, f"{pool}-0", pool, 2.5, 3.0)
    own = again.own()
    assert own is not None
    assert own.claims == {"n1"}
    again.release()
    released = {r.name: r for r in leases.members()}[f"{pool}-0"]
    assert released.holder is None
    assert released.claims == frozenset()


def test_a_stale_writer_gets_a_conflict_and_recovers_on_the_next_write(
    api: KubeApi, pool: str
) -> None:
    first = LeaseClient(api, f"{pool}-0", pool, 2.0, 3.0)
    first.write(frozenset({"a"}), "v")
    second = LeaseClient(api, f"{pool}-0", pool, 2.0, 3.0)  # the same pod, restarted
    second.own()
    second.write(frozenset({"b"}), "v")
    with pytest.raises(KubeTemporaryError, match="409"):
        first.write(frozenset({"c"}), "v")
    first.write(frozenset({"c"}), "v")  # re-read, then written
    assert {r.name: r for r in first.members()}[f"{pool}-0"].claims == {"c"}


def test_undecodable_claims_are_reported_not_fatal() -> None:
    record = lease_record({
        "metadata": {"name": "p-0", "annotations": {ANNOTATION_CLAIMS: "n1,n2"}},
        "spec": {"holderIdentity": "p-0", "leaseDurationSeconds": 5, "renewTime": "x"},
    })
    assert record.claims == frozenset()
    assert record.claims_error is not None
    bad_grace = lease_record({
        "metadata": {"name": "p-0", "annotations": {ANNOTATION_GRACE: "soon"}},
        "spec": {"holderIdentity": "p-0", "leaseDurationSeconds": 5, "renewTime": "x"},
    })
    assert bad_grace.claims_error is not None  # its claims then block every node
    good = lease_record({"metadata": {"name": "p-1", "annotations": {
        ANNOTATION_CLAIMS: encode_claims(["x"])}}, "spec": {}})
    assert (good.holder, good.duration_s, good.claims) == (None, 0.0, {"x"})


def test_replicas_are_followed_through_scale_and_deletion(
    backend: Backend, api: KubeApi, pool: str
) -> None:
    apps = client.AppsV1Api(backend.client)
    seen: list[int | None] = []
    watch = ReplicasWatch(api, pool, seen.append, watch_timeout_s=30)
    watch.start()
    try:
        wait_until(lambda: seen == [None], 15)  # no StatefulSet yet
        labels = {"app": pool}
        apps.create_namespaced_stateful_set(NS, {
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": pool},
            "spec": {"replicas": 2, "serviceName": pool, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "containers": [{"name": "a", "image": "a"}]}}},
        })
        wait_until(lambda: seen[-1] == 2, 15)
        apps.patch_namespaced_stateful_set_scale(pool, NS, {"spec": {"replicas": 5}})
        wait_until(lambda: seen[-1] == 5, 15)
        apps.delete_namespaced_stateful_set(pool, NS)
        wait_until(lambda: seen[-1] is None, 15)
    finally:
        watch.stop()
    assert seen[0] is None
    assert 5 in seen
