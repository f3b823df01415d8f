"""Cluster shapes of the emulator: one Joulie API generation, the other, or neither.

Driven through the real ``kubernetes`` client, as the agent's API discovery is.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentpool.sim.apiserver import ApiEmulator
from tests.support.apiservers import kube_client

GROUP, VERSION = "joulie.io", "v1alpha1"


def twin(name: str, node: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeTwin",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "profile": "eco", **spec},
    }


@pytest.fixture
def shaped(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[ApiEmulator, client.ApiClient]]:
    emu = ApiEmulator(shape=request.param).start()
    api = kube_client(emu.write_kubeconfig(tmp_path / "kubeconfig"))
    try:
        yield emu, api
    finally:
        api.close()
        emu.stop()


def _joulie_resources(api: client.ApiClient) -> set[str]:
    """Resources of ``joulie.io/v1alpha1``; empty when the group answers 404."""
    try:
        listing = client.CustomObjectsApi(api).get_api_resources(GROUP, VERSION)
    except ApiException as exc:
        if exc.status != 404:
            raise
        return set()
    return {r.name for r in listing.resources}


@pytest.mark.parametrize("shaped", ["nodetwin"], indirect=True)
def test_nodetwin_shape_serves_only_the_current_api(
    shaped: tuple[ApiEmulator, client.ApiClient],
) -> None:
    emu, api = shaped
    assert _joulie_resources(api) == {
        "nodetwins",
        "nodetwins/status",
        "nodehardwares",
        "nodehardwares/status",
    }
    custom = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as caught:
        custom.list_cluster_custom_object(GROUP, VERSION, "telemetryprofiles")
    assert caught.value.status == 404
    with pytest.raises(KeyError):
        emu.create("nodepowerprofiles", {"metadata": {"name": "x"}})
    names = {
        r.short_names[0]
        for r in custom.get_api_resources(GROUP, VERSION).resources
        if r.short_names
    }
    assert names == {"nt", "nhw"}


@pytest.mark.parametrize("shaped", ["profiles"], indirect=True)
def test_profiles_shape_serves_only_the_profile_api(
    shaped: tuple[ApiEmulator, client.ApiClient],
) -> None:
    _, api = shaped
    assert _joulie_resources(api) == {
        "nodepowerprofiles",
        "telemetryprofiles",
        "telemetryprofiles/status",
    }
    with pytest.raises(ApiException) as caught:
        client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, "nodetwins")
    assert caught.value.status == 404


@pytest.mark.parametrize("shaped", ["none"], indirect=True)
def test_installing_crds_later_makes_them_served(
    shaped: tuple[ApiEmulator, client.ApiClient],
) -> None:
    emu, api = shaped
    assert _joulie_resources(api) == set()
    # Built-in groups (Leases, StatefulSets, Events) are there as on any cluster; joulie.io
    # is not.
    assert [g.name for g in client.ApisApi(api).get_api_versions().groups] == [
        "coordination.k8s.io", "apps", "events.k8s.io"]
    emu.install("nodetwin")
    assert "nodetwins" in _joulie_resources(api)
    assert [g.name for g in client.ApisApi(api).get_api_versions().groups] == [
        GROUP, "coordination.k8s.io", "apps", "events.k8s.io"]


@pytest.mark.parametrize("shaped", ["nodetwin"], indirect=True)
def test_nodetwin_status_merge_keeps_the_operators_fields(
    shaped: tuple[ApiEmulator, client.ApiClient],
) -> None:
    emu, api = shaped
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(GROUP, VERSION, "nodetwins", twin("w-0", "w.0"))
    operator = {
        "schedulableClass": "eco",
        "predictedPowerHeadroomScore": 42.5,
        "powerMeasurement": {"source": "http", "measuredNodePowerW": 310.0},
        "controlStatus": {"gpu": {"backend": "http", "result": "applied"}},
    }
    custom.patch_cluster_custom_object_status(
        GROUP, VERSION, "nodetwins", "w-0", {"status": operator}
    )
    cpu = {"backend": "rapl", "result": "applied", "message": "m", "updatedAt": "t"}
    written = custom.patch_cluster_custom_object_status(
        GROUP, VERSION, "nodetwins", "w-0", {"status": {"controlStatus": {"cpu": cpu}}}
    )
    assert written["status"]["controlStatus"] == {
        "gpu": operator["controlStatus"]["gpu"],
        "cpu": cpu,
    }
    assert {k: v for k, v in written["status"].items() if k != "controlStatus"} == {
        k: v for k, v in operator.items() if k != "controlStatus"
    }
    # A write to the object itself ignores status (subresource split), as a real CRD does.
    main = custom.patch_cluster_custom_object(
        GROUP, VERSION, "nodetwins", "w-0", {"spec": {"profile": "performance"}, "status": {}}
    )
    assert main["status"] == written["status"]
    assert emu.get("nt", "w-0")["spec"]["profile"] == "performance"


@pytest.mark.parametrize("shaped", ["nodetwin"], indirect=True)
def test_nodehardware_create_then_status(shaped: tuple[ApiEmulator, client.ApiClient]) -> None:
    _, api = shaped
    custom = client.CustomObjectsApi(api)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeHardware",
        "metadata": {"name": "w-0"},
        "spec": {"nodeName": "w-0"},
        "status": {"cpu": {"sockets": 9}},
    }
    created = custom.create_cluster_custom_object(GROUP, VERSION, "nodehardwares", body)
    assert "status" not in created
    status = {"cpu": {"sockets": 2}, "quality": {"overall": "full"}}
    patched = custom.patch_cluster_custom_object_status(
        GROUP, VERSION, "nodehardwares", "w-0", {"status": status}
    )
    assert patched["status"] == status
    with pytest.raises(ApiException) as caught:
        custom.create_cluster_custom_object(GROUP, VERSION, "nodehardwares", body)
    assert caught.value.status == 409
