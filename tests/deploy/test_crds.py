"""The chart's CRDs against docs/resources.md.

Sample objects are validated against each CRD's ``openAPIV3Schema`` with
``jsonschema`` (installed with kubernetes-validate). Kubernetes schemas are
OpenAPI 3.0, i.e. JSON Schema draft 4 semantics (boolean
``exclusiveMinimum``, ``anyOf``); ``jsonschema`` ignores the ``x-kubernetes-*``
extensions, so the CRDs use none that validates (a CEL rule would need a
1.25+ server, and one in a CRD makes a 1.20 install fail).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.crds import CRDS, GROUP, VERSION, schema_of, version_of, walk


def validate(kind: str, obj: dict[str, Any]) -> None:
    jsonschema.Draft4Validator(schema_of(kind)).validate(obj)


def test_helm_sees_every_crd(chart: Any) -> None:
    assert sorted(c["name"] for c in chart.crds) == [
        "crds/joulie.io_nodehardwares.yaml",
        "crds/joulie.io_nodepowerprofiles.yaml",
        "crds/joulie.io_nodetwins.yaml",
        "crds/joulie.io_telemetryprofiles.yaml",
    ]


@pytest.mark.parametrize("kind", ["NodePowerProfile", "TelemetryProfile"])
def test_crd_is_a_valid_kubernetes_object(kind: str) -> None:
    kubernetes_validate.validate(CRDS[kind], "1.30", strict=True)


@pytest.mark.parametrize(
    ("kind", "plural", "short"),
    [
        ("NodePowerProfile", "nodepowerprofiles", "npp"),
        ("TelemetryProfile", "telemetryprofiles", "tp"),
    ],
)
def test_names_scope_and_version(kind: str, plural: str, short: str) -> None:
    crd = CRDS[kind]
    assert crd["metadata"]["name"] == f"{plural}.{GROUP}"
    assert crd["spec"]["group"] == GROUP
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["plural"] == plural
    assert crd["spec"]["names"]["shortNames"] == [short]
    version = version_of(kind)
    assert version["name"] == VERSION
    assert version["served"] is True
    assert version["storage"] is True


def test_status_subresource_only_on_telemetryprofile() -> None:
    assert version_of("TelemetryProfile")["subresources"] == {"status": {}}
    assert "subresources" not in version_of("NodePowerProfile")


def test_printer_columns() -> None:
    def columns(kind: str) -> dict[str, str]:
        return {c["name"]: c["jsonPath"] for c in version_of(kind)["additionalPrinterColumns"]}

    assert (
        columns("NodePowerProfile").items()
        >= {
            "Node": ".spec.nodeName",
            "Profile": ".spec.profile",
            "Cap-W": ".spec.cpu.packagePowerCapWatts",
        }.items()
    )
    assert (
        columns("TelemetryProfile").items()
        >= {
            "Node": ".spec.target.nodeName",
            "Backend": ".status.control.cpu.backend",
            "Result": ".status.control.cpu.result",
        }.items()
    )


@pytest.mark.parametrize("kind", ["NodePowerProfile", "TelemetryProfile"])
def test_schemas_are_structural(kind: str) -> None:
    # A structural schema names a type on every node (unless it preserves
    # unknown fields); the API server refuses a CRD that is not structural.
    for path, node in walk(schema_of(kind)):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path


@pytest.mark.parametrize("kind", ["NodePowerProfile", "NodeTwin"])
def test_the_watts_cap_is_described_as_each_packages_limit(kind: str) -> None:
    # What `kubectl explain` shows must be what the agent does: the value goes to every
    # package zone as it is (tests/backends/sysfs/test_rapl.py::
    # test_the_cap_is_written_to_every_package_exact_files_and_restore), where it was once
    # described, and applied, as the node's total split evenly over the packages.
    schema = dict(walk(schema_of(kind)))
    described = {
        path: schema[path]["description"]
        for path in (".spec.cpu.packagePowerCapWatts", ".spec.cpu.packagePowerCapPctOfMax")
    }
    assert "each CPU package" in described[".spec.cpu.packagePowerCapWatts"]
    assert "each package's limit" in described[".spec.cpu.packagePowerCapPctOfMax"]
    columns = [c.get("description", "") for c in version_of(kind).get(
        "additionalPrinterColumns", [])]
    for text in [*described.values(), *columns]:
        assert not re.search(r"\bsplit|\bevenly|\btotal|\bbudget", text, re.IGNORECASE), text


def test_enums_and_cap_minimum() -> None:
    npp = dict(walk(schema_of("NodePowerProfile")))
    assert npp[".spec.profile"]["enum"] == ["performance", "eco"]
    cap = npp[".spec.cpu.packagePowerCapWatts"]
    assert cap["type"] == "number"
    assert cap["minimum"] == 1
    assert npp[".spec"]["required"] == ["nodeName", "profile"]

    tp = dict(walk(schema_of("TelemetryProfile")))
    assert tp[".spec.target.scope"]["enum"] == ["node", "cluster"]
    for source in ("cpu", "gpu", "thermal", "context"):
        assert tp[f".spec.sources.{source}.type"]["enum"] == ["none", "host", "http", "prometheus"]
    assert tp[".spec.controls.cpu.type"]["enum"] == ["none", "host", "http"]
    assert tp[".spec.controls.cpu.http.mode"]["enum"] == ["auto", "rapl", "dvfs"]
    assert tp[".spec.controls.gpu.http.mode"]["enum"] == ["auto", "powercap", "clocks"]
    assert tp[".status.control.cpu.backend"]["enum"] == ["none", "rapl", "dvfs"]
    assert tp[".status.control.cpu.result"]["enum"] == ["applied", "blocked", "error", "none"]
    # Declared (not free-form) so a real API server keeps exactly these fields.
    gpu_backends = ["none", "http", "host-nvidia", "host-amd"]
    assert tp[".status.control.gpu.backend"]["enum"] == gpu_backends
    assert tp[".status.control.gpu.result"]["enum"] == ["applied", "blocked", "error", "none"]
    assert set(tp[".status.control.gpu"]["properties"]) == {
        "backend", "result", "message", "observed", "updatedAt"
    }
    gpu_cap = npp[".spec.gpu.powerCap"]["properties"]
    assert gpu_cap["capPctOfMax"]["maximum"] == 100
    assert gpu_cap["capWattsPerGpu"]["minimum"] == 1
    # No CEL anywhere: a 1.20 server refuses the CRD under server-side apply (helm install).
    for kind in CRDS:
        assert "x-kubernetes-validations" not in yaml.safe_dump(CRDS[kind]), kind


# --- sample objects ---------------------------------------------------------

GOOD_NPP: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "NodePowerProfile",
    "metadata": {"name": "worker-0"},
    "spec": {
        "nodeName": "worker-0",
        "profile": "eco",
        "cpu": {"packagePowerCapWatts": 120},
        "policy": {"name": "manual-sample"},
    },
}

GOOD_TP: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "TelemetryProfile",
    "metadata": {"name": "worker-01"},
    "spec": {
        "target": {"scope": "node", "nodeName": "worker-01"},
        "sources": {
            "cpu": {
                "type": "http",
                "http": {"endpoint": "http://sim:18080/telemetry/{node}", "timeoutSeconds": 3},
            },
            "gpu": {"type": "none"},
            "thermal": {"type": "prometheus", "prometheus": {"query": "node_hwmon_temp_celsius"}},
        },
        "controls": {
            "cpu": {
                "type": "http",
                "http": {
                    "endpoint": "http://sim:18080/control/{node}",
                    "timeoutSeconds": 3,
                    "mode": "auto",
                },
            },
            "gpu": {"type": "none"},
        },
    },
    "status": {
        "control": {
            "cpu": {
                "backend": "rapl",
                "result": "applied",
                "message": "cap 120 W applied",
                "observed": {"capWatts": 120, "packagePowerWatts": 97.5},
                "updatedAt": "2026-02-27T00:00:00Z",
            }
        }
    },
}


GOOD_GPU_STATUS: dict[str, Any] = {
    "backend": "host-nvidia",
    "result": "blocked",
    "message": "GPU 2 (GPU-2): NVML Not Supported",
    "observed": {"capWattsPerGpu": 250, "devices": [{"index": 0, "capWatts": 250}]},
    "updatedAt": "2026-02-27T00:00:00Z",
}

DELETE = object()


def changed(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``obj`` with ``path`` (dotted) set to ``value``, or removed for DELETE."""
    result = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = result
    for key in parents:
        node = node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return result


@pytest.mark.parametrize(
    "sample",
    [
        GOOD_NPP,
        changed(GOOD_NPP, "spec.cpu.packagePowerCapWatts", 87.5),  # float caps are fine
        changed(GOOD_NPP, "spec.cpu.packagePowerCapWatts", 1),
        changed(GOOD_NPP, "spec.profile", "performance"),
        changed(GOOD_NPP, "spec.cpu", DELETE),  # no cap: nothing to enforce, still valid
        changed(GOOD_NPP, "spec.policy", DELETE),
        changed(GOOD_NPP, "spec.gpu", {"powerCap": {"capWattsPerGpu": 250}}),
        changed(GOOD_NPP, "spec.gpu", {"powerCap": {"capPctOfMax": 100}}),
        changed(GOOD_NPP, "spec.gpu", {"powerCap": {"capPctOfMax": 0.5, "capWattsPerGpu": 1}}),
    ],
)
def test_good_nodepowerprofiles(sample: dict[str, Any]) -> None:
    validate("NodePowerProfile", sample)


@pytest.mark.parametrize(
    ("sample", "complaint"),
    [
        (changed(GOOD_NPP, "spec.cpu.packagePowerCapWatts", 0), "less than the minimum"),
        (changed(GOOD_NPP, "spec.cpu.packagePowerCapWatts", -5), "less than the minimum"),
        (changed(GOOD_NPP, "spec.cpu.packagePowerCapWatts", "120W"), "is not of type 'number'"),
        (changed(GOOD_NPP, "spec.profile", "turbo"), "is not one of"),
        (changed(GOOD_NPP, "spec.nodeName", DELETE), "'nodeName' is a required property"),
        (changed(GOOD_NPP, "spec.nodeName", ""), "should be non-empty"),
        (changed(GOOD_NPP, "spec.profile", DELETE), "'profile' is a required property"),
        (changed(GOOD_NPP, "spec", DELETE), "'spec' is a required property"),
        (
            changed(GOOD_NPP, "spec.gpu", {"powerCap": {"capWattsPerGpu": 0}}),
            "less than the minimum",
        ),
        (
            changed(GOOD_NPP, "spec.gpu", {"powerCap": {"capPctOfMax": 0}}),
            "less than or equal to the minimum",
        ),
        (
            changed(GOOD_NPP, "spec.gpu", {"powerCap": {"capPctOfMax": 101}}),
            "greater than the maximum",
        ),
        (
            changed(GOOD_NPP, "spec.gpu", {"powerCap": {"capWattsPerGpu": "300W"}}),
            "is not of type 'number'",
        ),
    ],
)
def test_bad_nodepowerprofiles(sample: dict[str, Any], complaint: str) -> None:
    with pytest.raises(jsonschema.ValidationError, match=complaint):
        validate("NodePowerProfile", sample)


@pytest.mark.parametrize(
    "sample",
    [
        GOOD_TP,
        changed(GOOD_TP, "status", DELETE),
        changed(GOOD_TP, "spec.target", {"scope": "cluster"}),
        changed(GOOD_TP, "spec.controls.cpu", {"type": "host"}),
        changed(GOOD_TP, "spec.controls.cpu.http.mode", "dvfs"),
        changed(GOOD_TP, "spec.controls.cpu.http.timeoutSeconds", 0.5),
        changed(
            GOOD_TP,
            "spec.controls.gpu",
            {"type": "http", "http": {"endpoint": "http://g", "mode": "clocks"}},
        ),
        changed(GOOD_TP, "status.control.cpu.result", "blocked"),
        changed(GOOD_TP, "status.control.gpu", GOOD_GPU_STATUS),
    ],
)
def test_good_telemetryprofiles(sample: dict[str, Any]) -> None:
    validate("TelemetryProfile", sample)


@pytest.mark.parametrize(
    ("sample", "complaint"),
    [
        (changed(GOOD_TP, "spec.sources.cpu.type", "snmp"), "is not one of"),
        (changed(GOOD_TP, "spec.controls.cpu.type", "prometheus"), "is not one of"),
        (changed(GOOD_TP, "spec.controls.cpu.http.mode", "powercap"), "is not one of"),
        (
            changed(
                GOOD_TP,
                "spec.controls.gpu",
                {"type": "http", "http": {"endpoint": "x", "mode": "rapl"}},
            ),
            "is not one of",
        ),
        (changed(GOOD_TP, "spec.target.scope", "rack"), "is not one of"),
        (changed(GOOD_TP, "spec.target", {"scope": "node"}), "is not valid under any of"),
        (changed(GOOD_TP, "spec.target", DELETE), "'target' is a required property"),
        (
            changed(GOOD_TP, "spec.controls.cpu.http.timeoutSeconds", 0),
            "less than or equal to the minimum",
        ),
        (
            changed(GOOD_TP, "spec.controls.cpu.http.endpoint", DELETE),
            "'endpoint' is a required property",
        ),
        (changed(GOOD_TP, "spec.sources.cpu.http.timeoutSeconds", "3s"), "is not of type 'number'"),
        (changed(GOOD_TP, "status.control.cpu.backend", "cpufreq"), "is not one of"),
        (changed(GOOD_TP, "status.control.cpu.result", "ok"), "is not one of"),
        (
            changed(GOOD_TP, "status.control.gpu", {**GOOD_GPU_STATUS, "backend": "nvml"}),
            "is not one of",
        ),
        (
            changed(GOOD_TP, "status.control.gpu", {**GOOD_GPU_STATUS, "result": "ok"}),
            "is not one of",
        ),
    ],
)
def test_bad_telemetryprofiles(sample: dict[str, Any], complaint: str) -> None:
    with pytest.raises(jsonschema.ValidationError, match=complaint):
        validate("TelemetryProfile", sample)


@pytest.mark.parametrize("timeout", [0, 0.001, 2, 299.5, 300, 300.5, 1000])
@pytest.mark.parametrize("path", ["spec.sources.cpu.http", "spec.controls.cpu.http"])
def test_the_schema_and_the_parser_agree_on_http_timeouts(path: str, timeout: float) -> None:
    # The heartbeat is derived from the longest timeout the parser accepts; the CRD
    # must not admit longer ones (nor refuse ones the parser takes).
    from agentpool.errors import ProfileError
    from agentpool.resources.parse import parse_telemetry_profile

    sample = changed(GOOD_TP, f"{path}.timeoutSeconds", timeout)
    try:
        parse_telemetry_profile(sample)
        parsed = True
    except ProfileError:
        parsed = False
    try:
        validate("TelemetryProfile", sample)
        admitted = True
    except jsonschema.ValidationError:
        admitted = False
    assert parsed == admitted == (0 < timeout <= 300)


@pytest.mark.parametrize(
    "target",
    [
        {"scope": "node", "nodeName": "worker-01"},
        {"scope": "node"},
        {"scope": "node", "nodeName": ""},
        {"scope": "cluster"},
        {"scope": "cluster", "nodeName": "worker-01"},
    ],
)
def test_the_schema_and_the_agent_agree_on_targets(target: dict[str, Any]) -> None:
    # The agent checks what the schema refuses, for objects no server validated.
    from agentpool.resources.parse import target_problem

    sample = changed(GOOD_TP, "spec.target", target)
    try:
        validate("TelemetryProfile", sample)
        admitted = True
    except jsonschema.ValidationError:
        admitted = False
    assert admitted == (target_problem(sample) is None)
    assert admitted == (target["scope"] == "cluster" or bool(target.get("nodeName")))
