"""The chart's NodeTwin and NodeHardware CRDs: Joulie's current API (docs/resources.md).

Besides validating samples, these tests check *pruning*: a real API server
silently drops every field a structural schema does not declare (unless the
node preserves unknown fields). The objects Joulie's operator writes (shaped
after its ``cmd/operator/twinstate.go`` and ``pkg/api/types.go``) must lose
nothing, and neither must what the agent writes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.deploy.crds import CRDS, GROUP, VERSION, schema_of, version_of, walk

KINDS = ["NodeTwin", "NodeHardware"]


def pruned(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Paths a structural-schema server would prune from ``obj``."""
    if isinstance(obj, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            props = schema.get("properties", {})
            return [
                p for k, v in obj.items() if k in props for p in pruned(v, props[k], f"{path}.{k}")
            ]
        props = schema.get("properties")
        if props is None:
            return []
        out: list[str] = []
        for key, value in obj.items():
            if path == "" and key in ("apiVersion", "kind", "metadata"):
                continue
            if key not in props:
                out.append(f"{path}.{key}")
            else:
                out.extend(pruned(value, props[key], f"{path}.{key}"))
        return out
    if isinstance(obj, list) and "items" in schema:
        return [p for i, v in enumerate(obj) for p in pruned(v, schema["items"], f"{path}[{i}]")]
    return []


def operator_twin() -> dict[str, Any]:
    """A NodeTwin as Joulie's operator writes it: spec, then its status map."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeTwin",
        "metadata": {"name": "worker-0"},
        "spec": {
            "nodeName": "worker-0",
            "profile": "eco",
            "policy": {"name": "queue_aware_v1"},
            "scheduling": {"draining": False},
            "cpu": {"packagePowerCapPctOfMax": 60},
            "gpu": {"powerCap": {"scope": "perGpu", "capPctOfMax": 70.0}},
        },
        "status": {
            "schedulableClass": "eco",
            "predictedPowerHeadroomScore": 41.5,
            "predictedCoolingStressScore": 12.0,
            "predictedPsuStressScore": 0,
            "hardwareDensityScore": 0.7,
            "estimatedPUE": 1.12,
            "lastUpdated": "2026-02-27T00:00:00Z",
            "effectiveCapState": {"cpuPct": 60, "gpuPct": 70},
            "powerMeasurement": {
                "source": "http-no-endpoint",
                "measuredNodePowerW": 310.5,
                "cpuCappedPowerW": 150,
                "gpuCappedPowerW": 0,
                "nodeCappedPowerW": 150,
                "cpuTdpW": 250,
                "gpuTdpW": 0,
                "nodeTdpW": 250,
                "powerTrendWPerMin": -1.5,
            },
            "controlStatus": {
                "cpu": {
                    "backend": "rapl",
                    "result": "applied",
                    "message": "m",
                    "updatedAt": "2026-02-27T00:00:00Z",
                },
                "gpu": {
                    "backend": "http",
                    "result": "applied",
                    "message": "m",
                    "updatedAt": "2026-02-27T00:00:00Z",
                },
            },
        },
    }


@pytest.mark.parametrize("kind", KINDS)
def test_crd_is_a_valid_kubernetes_object(kind: str) -> None:
    kubernetes_validate.validate(CRDS[kind], "1.30", strict=True)


@pytest.mark.parametrize(
    ("kind", "plural", "short"),
    [("NodeTwin", "nodetwins", "nt"), ("NodeHardware", "nodehardwares", "nhw")],
)
def test_names_scope_version_and_status_subresource(kind: str, plural: str, short: str) -> None:
    crd = CRDS[kind]
    assert crd["metadata"]["name"] == f"{plural}.{GROUP}"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["shortNames"] == [short]
    version = version_of(kind)
    assert (version["name"], version["served"], version["storage"]) == (VERSION, True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("kind", KINDS)
def test_schemas_are_structural(kind: str) -> None:
    for path, node in walk(schema_of(kind)):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path


def test_operator_twin_is_valid_and_loses_nothing() -> None:
    twin = operator_twin()
    jsonschema.Draft4Validator(schema_of("NodeTwin")).validate(twin)
    assert pruned(twin, schema_of("NodeTwin")) == []


def test_a_newer_operators_status_fields_are_preserved_but_control_status_is_exact() -> None:
    twin = operator_twin()
    twin["status"]["futureScore"] = {"x": 1}
    twin["status"]["controlStatus"]["cpu"]["observed"] = {"capWatts": 1}
    assert pruned(twin, schema_of("NodeTwin")) == [".status.controlStatus.cpu.observed"]
    cpu = dict(walk(schema_of("NodeTwin")))[".status.controlStatus.cpu"]
    assert set(cpu["properties"]) == {"backend", "result", "message", "updatedAt"}


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({"cpu": {"packagePowerCapPctOfMax": 0}}, "minimum"),
        ({"cpu": {"packagePowerCapPctOfMax": 100.5}}, "maximum"),
        ({"cpu": {"packagePowerCapWatts": 0.5}}, "minimum"),
        ({"profile": "turbo"}, "enum"),
        ({"gpu": {"powerCap": {"scope": "perNode"}}}, "enum"),
    ],
)
def test_bad_twins_are_refused(spec: dict[str, Any], complaint: str) -> None:
    twin = operator_twin()
    twin["spec"].update(spec)
    with pytest.raises(jsonschema.ValidationError) as caught:
        jsonschema.Draft4Validator(schema_of("NodeTwin")).validate(twin)
    assert caught.value.validator == complaint


def test_twin_without_node_name_is_refused() -> None:
    twin = operator_twin()
    del twin["spec"]["nodeName"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(schema_of("NodeTwin")).validate(twin)


def test_joulie_agents_nodehardware_loses_nothing() -> None:
    """The status Joulie's own agent writes (``upsertNodeHardwareStatus``)."""
    hardware = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeHardware",
        "metadata": {"name": "w"},
        "spec": {"nodeName": "w"},
        "status": {
            "cpu": {
                "rawModel": "x",
                "model": "y",
                "vendor": "GenuineIntel",
                "sockets": 2,
                "totalCores": 64,
                "coresPerSocket": 32,
                "driverFamily": "intel_pstate",
                "controlAvailable": True,
                "telemetryAvailable": True,
                "warnings": ["w"],
                "capRange": {
                    "type": "package",
                    "minWattsPerSocket": 90.0,
                    "maxWattsPerSocket": 250.0,
                },
            },
            "gpu": {
                "rawModel": "",
                "model": "",
                "vendor": "",
                "count": 0,
                "currentCapWatts": 0,
                "present": False,
                "controlAvailable": False,
                "telemetryAvailable": False,
                "capRangePerGpu": {"minWatts": 1, "maxWatts": 2, "defaultWatts": 2},
            },
            "capabilities": {
                "cpuControl": True,
                "gpuControl": False,
                "cpuTelemetry": True,
                "gpuTelemetry": False,
            },
            "quality": {"overall": "exact", "warnings": []},
            "inventoryResolution": {
                "hardwareCatalogKey": {"cpu": "y", "gpu": ""},
                "exactness": {"cpu": "exact", "gpu": "generic"},
            },
            "memory": {"totalBytes": 68719476736},
            "updatedAt": "2026-02-27T00:00:00Z",
            "lastUpdated": "2026-02-27T00:00:00Z",
        },
    }
    jsonschema.Draft4Validator(schema_of("NodeHardware")).validate(hardware)
    assert pruned(hardware, schema_of("NodeHardware")) == []
