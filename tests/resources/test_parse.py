"""NodePowerProfile, NodeTwin and TelemetryProfile JSON into typed values (CPU and GPU caps,
routing); errors name the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentpool.errors import ProfileError
from agentpool.resources.desired import GpuCap, PowerPolicy, Profile
from agentpool.resources.parse import (
    gpu_routing,
    parse_gpu_cap,
    parse_gpu_routing,
    parse_power_profile,
    parse_telemetry_profile,
    spec_node_name,
    target_of,
)
from agentpool.resources.routing import (
    ControlMode,
    ControlType,
    GpuControlMode,
    HttpEndpoint,
    NodeRouting,
    Routing,
    SourceType,
)


def npp(cap: Any = 120, profile: Any = "eco", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"nodeName": "worker-0", "profile": profile, **spec}
    if cap is not None:
        body["cpu"] = {"packagePowerCapWatts": cap}
    return {"metadata": {"name": "worker-0-eco"}, "spec": body}


def tp(sources: Any = None, controls: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"target": {"scope": "node", "nodeName": "worker-0"}}
    if sources is not None:
        spec["sources"] = sources
    if controls is not None:
        spec["controls"] = controls
    return {"metadata": {"name": "worker-0-tp"}, "spec": spec}


def test_contract_example() -> None:
    policy = parse_power_profile(npp(policy={"name": "manual-sample"}))
    assert policy == PowerPolicy("worker-0-eco", "worker-0", Profile.ECO, 120.0, "manual-sample")
    assert policy.label == "worker-0-eco"  # the policy object's name, as Joulie's agent labels it


# JSON may carry the cap as an int or a float; it comes out as float watts either way.
@pytest.mark.parametrize(
    ("raw", "watts"),
    [("120", 120.0), ("120.0", 120.0), ("87.5", 87.5), ("1", 1.0), ("1.0", 1.0), ("1e3", 1000.0)],
)
def test_int_and_float_caps(raw: str, watts: float) -> None:
    cap = json.loads(raw)
    policy = parse_power_profile(npp(cap=cap))
    assert policy.cap_watts == watts
    assert isinstance(policy.cap_watts, float)


def test_performance_profile_and_no_cap_means_nothing_to_enforce() -> None:
    policy = parse_power_profile(npp(cap=None, profile="performance"))
    assert policy.profile is Profile.PERFORMANCE
    assert policy.cap_watts is None
    assert policy.policy_name is None
    no_cap_field = npp(cap=None)
    no_cap_field["spec"]["cpu"] = {}
    assert parse_power_profile(no_cap_field).cap_watts is None


CAP = "spec.cpu.packagePowerCapWatts"


@pytest.mark.parametrize(
    ("obj", "field", "problem"),
    [
        (npp(cap=0), CAP, ">= 1"),
        (npp(cap=0.5), CAP, ">= 1"),
        (npp(cap=-120), CAP, ">= 1"),
        (npp(cap="120W"), CAP, "not a number"),
        (npp(cap="120"), CAP, "not a number"),
        (npp(cap=True), CAP, "not a number"),
        (npp(cap=[120]), CAP, "not a number"),
        (npp(cap=float("nan")), CAP, "not a number"),
        (npp(cap=float("inf")), CAP, "not a number"),
        (npp(profile="turbo"), "spec.profile", "'turbo' is not performance or eco"),
        (npp(profile="ECO"), "spec.profile", "is not performance or eco"),
        (npp(profile=None), "spec.profile", "None is not"),
        (npp(profile=3), "spec.profile", "3 is not"),
        ({"metadata": {"name": "x"}, "spec": {"profile": "eco"}}, "spec.nodeName", "required"),
        (npp(nodeName=""), "spec.nodeName", "required"),
        (npp(nodeName=7), "spec.nodeName", "required"),
        ({"metadata": {"name": "x"}, "spec": "eco"}, "spec", "expected an object"),
        (npp(cap=None, cpu=120), "spec.cpu", "expected an object"),
        (npp(policy="p"), "spec.policy", "expected an object"),
    ],
)
def test_malformed_power_profile_names_the_field(obj: Any, field: str, problem: str) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_power_profile(obj)
    err = caught.value
    assert err.field == field
    assert err.kind == "NodePowerProfile"
    assert problem in err.problem
    assert field in str(err)


def test_no_telemetry_profile_blocks_mean_host_defaults() -> None:
    routing = parse_telemetry_profile(tp())
    assert routing == Routing(profile_name="worker-0-tp")
    assert routing.source is SourceType.HOST
    assert routing.control is ControlType.HOST
    assert routing.mode is ControlMode.AUTO


def test_contract_http_example() -> None:
    routing = parse_telemetry_profile(
        tp(
            sources={
                "cpu": {
                    "type": "http",
                    "http": {"endpoint": "http://sim:18080/telemetry/{node}", "timeoutSeconds": 3},
                }
            },
            controls={
                "cpu": {
                    "type": "http",
                    "http": {
                        "endpoint": "http://sim:18080/control/{node}",
                        "timeoutSeconds": 3,
                        "mode": "auto",
                    },
                }
            },
        )
    )
    assert routing.source is SourceType.HTTP
    assert routing.source_http == HttpEndpoint("http://sim:18080/telemetry/{node}", 3.0)
    assert routing.source_http.url("worker-01") == "http://sim:18080/telemetry/worker-01"
    assert routing.control is ControlType.HTTP
    assert routing.control_http == HttpEndpoint("http://sim:18080/control/{node}", 3.0)
    assert routing.mode is ControlMode.AUTO


@pytest.mark.parametrize("mode", ["auto", "rapl", "dvfs"])
def test_control_modes_and_default_timeout(mode: str) -> None:
    routing = parse_telemetry_profile(
        tp(controls={"cpu": {"type": "http", "http": {"endpoint": "https://x/c", "mode": mode}}})
    )
    assert routing.mode is ControlMode(mode)
    assert routing.control_http == HttpEndpoint("https://x/c", 2.0)  # default 2 s


@pytest.mark.parametrize(
    ("source", "control"), [("none", "none"), ("prometheus", "host"), ("host", "none")]
)
def test_other_types(source: str, control: str) -> None:
    routing = parse_telemetry_profile(
        tp(sources={"cpu": {"type": source}}, controls={"cpu": {"type": control}})
    )
    assert (routing.source, routing.control) == (SourceType(source), ControlType(control))
    assert routing.source_http is None
    assert routing.control_http is None


def _http(**fields: Any) -> dict[str, Any]:
    return {"cpu": {"type": "http", "http": {"endpoint": "http://sim/x", **fields}}}


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (tp(sources={"cpu": {"type": "kafka"}}), "spec.sources.cpu.type"),
        (tp(controls={"cpu": {"type": "bmc"}}), "spec.controls.cpu.type"),
        (tp(controls=_http(mode="turbo")), "spec.controls.cpu.http.mode"),
        (tp(sources={"cpu": {"type": "http"}}), "spec.sources.cpu.http.endpoint"),
        (tp(controls={"cpu": {"type": "http", "http": {}}}), "spec.controls.cpu.http.endpoint"),
        (tp(sources=_http(endpoint="sim:18080/t")), "spec.sources.cpu.http.endpoint"),
        (tp(sources=_http(endpoint="ftp://sim/t")), "spec.sources.cpu.http.endpoint"),
        (tp(sources=_http(timeoutSeconds=0)), "spec.sources.cpu.http.timeoutSeconds"),
        (tp(sources=_http(timeoutSeconds=-1)), "spec.sources.cpu.http.timeoutSeconds"),
        (tp(sources=_http(timeoutSeconds="3s")), "spec.sources.cpu.http.timeoutSeconds"),
        (tp(controls=_http(timeoutSeconds=3600)), "spec.controls.cpu.http.timeoutSeconds"),
        (tp(controls=_http(timeoutSeconds=True)), "spec.controls.cpu.http.timeoutSeconds"),
        (tp(sources={"cpu": {"type": "http", "http": "x"}}), "spec.sources.cpu.http"),
        (tp(sources={"cpu": []}), "spec.sources.cpu"),
        (tp(controls=[]), "spec.controls"),
    ],
)
def test_malformed_telemetry_profile_names_the_field(obj: Any, field: str) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_telemetry_profile(obj)
    assert caught.value.field == field
    assert caught.value.kind == "TelemetryProfile"
    assert f"TelemetryProfile 'worker-0-tp': {field}: " in str(caught.value)


def test_float_timeout() -> None:
    routing = parse_telemetry_profile(tp(sources=_http(timeoutSeconds=0.25)))
    assert routing.source_http == HttpEndpoint("http://sim/x", 0.25)


@pytest.mark.parametrize(
    ("obj", "target"),
    [
        (tp(), ("node", "worker-0")),
        ({"spec": {"target": {"scope": "cluster"}}}, ("cluster", None)),
        ({"spec": {"target": {"scope": "node", "nodeName": 5}}}, ("node", None)),
        ({"spec": {"target": "node"}}, ("", None)),
        ({"spec": None}, ("", None)),
        ({}, ("", None)),
    ],
)
def test_target_of_is_tolerant(obj: dict[str, Any], target: tuple[str, str | None]) -> None:
    assert target_of(obj) == target


# Malformed objects that every reader of spec.nodeName (the supervisor's views, kubectl's
# rows, the parser) takes for "targets no node".
NO_NODE: list[Any] = [
    {},
    {"spec": None},
    {"spec": "worker-0"},
    {"spec": {}},
    {"spec": {"nodeName": ""}},
    {"spec": {"nodeName": 5}},
    {"spec": {"nodeName": ["worker-0"]}},
    {"spec": {"nodeName": None}},
]


@pytest.mark.parametrize("obj", NO_NODE)
def test_spec_node_name_is_none_for_a_malformed_object(obj: dict[str, Any]) -> None:
    assert spec_node_name(obj) is None


def test_spec_node_name_reads_the_node() -> None:
    assert spec_node_name(npp()) == "worker-0"
    assert spec_node_name({"spec": {"nodeName": "w.1", "profile": 3}}) == "w.1"


def gpu_npp(gpu: Any) -> dict[str, Any]:
    spec = {"nodeName": "gpu-0", "profile": "eco", "cpu": {"packagePowerCapWatts": 100}}
    if gpu is not None:
        spec["gpu"] = gpu
    return {"metadata": {"name": "gpu-0"}, "spec": spec}


@pytest.mark.parametrize(
    ("power_cap", "expected"),
    [
        ({"capWattsPerGpu": 250}, GpuCap(watts_per_gpu=250.0)),
        ({"capWattsPerGpu": 87.5}, GpuCap(watts_per_gpu=87.5)),
        ({"capPctOfMax": 60}, GpuCap(pct_of_max=60.0)),
        ({"capPctOfMax": 100}, GpuCap(pct_of_max=100.0)),
        # watts win over percent when both are set
        ({"capWattsPerGpu": 300, "capPctOfMax": 50}, GpuCap(watts_per_gpu=300.0)),
        ({}, None),
    ],
)
def test_power_cap_parsed_from_the_node_power_profile(power_cap: Any, expected: Any) -> None:
    assert parse_power_profile(gpu_npp({"powerCap": power_cap})).gpu_cap == expected


def test_no_gpu_block_means_no_gpu_cap() -> None:
    assert parse_power_profile(gpu_npp(None)).gpu_cap is None
    assert parse_power_profile(gpu_npp({})).gpu_cap is None


@pytest.mark.parametrize(
    ("gpu", "field", "problem"),
    [
        ("300", "spec.gpu", "expected an object"),
        ({"powerCap": 300}, "spec.gpu.powerCap", "expected an object"),
        ({"powerCap": {"capWattsPerGpu": 0}}, "spec.gpu.powerCap.capWattsPerGpu", ">= 1"),
        ({"powerCap": {"capWattsPerGpu": 0.5}}, "spec.gpu.powerCap.capWattsPerGpu", ">= 1"),
        ({"powerCap": {"capWattsPerGpu": -1}}, "spec.gpu.powerCap.capWattsPerGpu", ">= 1"),
        ({"powerCap": {"capWattsPerGpu": "300W"}}, "spec.gpu.powerCap.capWattsPerGpu", "number"),
        ({"powerCap": {"capWattsPerGpu": True}}, "spec.gpu.powerCap.capWattsPerGpu", "number"),
        ({"powerCap": {"capPctOfMax": 0}}, "spec.gpu.powerCap.capPctOfMax", "0 < pct <= 100"),
        ({"powerCap": {"capPctOfMax": 100.5}}, "spec.gpu.powerCap.capPctOfMax", "0 < pct"),
        ({"powerCap": {"capPctOfMax": float("nan")}}, "spec.gpu.powerCap.capPctOfMax", "0 < pct"),
        # a malformed percent is an error even beside valid watts: the resource is wrong
        (
            {"powerCap": {"capWattsPerGpu": 200, "capPctOfMax": 150}},
            "spec.gpu.powerCap.capPctOfMax",
            "0 < pct",
        ),
    ],
)
def test_malformed_gpu_cap_names_the_field(gpu: Any, field: str, problem: str) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_power_profile(gpu_npp(gpu))
    assert caught.value.field == field
    assert problem in caught.value.problem
    assert caught.value.kind == "NodePowerProfile"
    assert "gpu-0" in str(caught.value)


def test_same_shape_serves_another_kind() -> None:
    spec = {"gpu": {"powerCap": {"capPctOfMax": 0}}}
    with pytest.raises(ProfileError, match=r"NodeTwin 'n': spec.gpu.powerCap.capPctOfMax"):
        parse_gpu_cap(spec, "NodeTwin", "n")


def test_routing_defaults_to_host_and_borrows_cpu_telemetry() -> None:
    assert gpu_routing(None, NodeRouting()).control is ControlType.HOST
    tp = {
        "metadata": {"name": "tp"},
        "spec": {
            "sources": {"cpu": {"type": "http", "http": {"endpoint": "http://s/telemetry/{node}"}}},
            "controls": {
                "gpu": {
                    "type": "http",
                    "http": {"endpoint": "http://s/gpu/{node}", "mode": "clocks"},
                }
            },
        },
    }
    routing = parse_gpu_routing(tp)
    assert routing.control is ControlType.HTTP
    assert routing.control_http is not None
    assert routing.control_http.url("n") == "http://s/gpu/n"
    assert routing.mode is GpuControlMode.CLOCKS
    assert routing.telemetry_http is not None
    assert routing.telemetry_http.url("n") == "http://s/telemetry/n"
    tp["spec"]["sources"]["gpu"] = {"type": "none"}
    assert parse_gpu_routing(tp).telemetry_http is None


@pytest.mark.parametrize(
    ("controls", "field"),
    [
        ({"gpu": {"type": "nvml"}}, "spec.controls.gpu.type"),
        ({"gpu": {"type": "http"}}, "spec.controls.gpu.http.endpoint"),
        (
            {"gpu": {"type": "http", "http": {"endpoint": "http://x", "mode": "rapl"}}},
            "spec.controls.gpu.http.mode",
        ),
    ],
)
def test_malformed_gpu_routing_names_the_field(controls: Any, field: str) -> None:
    tp = {"metadata": {"name": "tp"}, "spec": {"controls": controls}}
    with pytest.raises(ProfileError) as caught:
        parse_gpu_routing(tp)
    assert caught.value.field == field


# -- shrunk examples of tests/properties/test_resources.py, kept as regressions -------------------


@pytest.mark.parametrize("field", ["packagePowerCapWatts", "packagePowerCapPctOfMax"])
def test_an_integer_beyond_float_range_is_not_a_number(field: str) -> None:
    # JSON integers have no limit; math.isfinite() raised OverflowError on this one.
    obj = {"spec": {"nodeName": "0", "profile": "performance", "cpu": {field: 10**400}}}
    with pytest.raises(ProfileError) as caught:
        parse_power_profile(obj)
    assert caught.value.field == f"spec.cpu.{field}"
    assert "is not a number" in str(caught.value)


def test_a_huge_bad_value_is_quoted_shortened() -> None:
    obj = {"spec": {"nodeName": "0", "profile": "performance",
                    "cpu": {"packagePowerCapWatts": "x" * 1000}}}
    with pytest.raises(ProfileError) as caught:
        parse_power_profile(obj)
    assert "spec.cpu.packagePowerCapWatts: 'xxxx" in str(caught.value)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        ("http://[", "is not a URL: Invalid IPv6 URL"),  # urlsplit raised ValueError
        ("http://:", "is not an http:// or https:// URL"),  # no host
        ("http://sim:abc", "is not a URL: Port could not be cast"),  # http.client raised
        ("http://sim:65536", "is not a URL: Port out of range"),
        ("http://sim:0/", "port 0"),
        ("http://sim/a b", "whitespace"),
        ("http://sim/\x00", "control"),
        ("http://sim/é", "non-ASCII"),
        ("http://user:pw@sim/", "credentials"),
    ],
)
def test_an_endpoint_that_cannot_be_requested_is_refused(endpoint: str, problem: str) -> None:
    obj = tp(controls={"cpu": {"type": "http", "http": {"endpoint": endpoint}}})
    with pytest.raises(ProfileError) as caught:
        parse_telemetry_profile(obj)
    assert caught.value.field == "spec.controls.cpu.http.endpoint"
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    "endpoint", ["http://{node}.sim:8080/x", "HTTPS://sim/telemetry/{node}?a=b", "http://[::1]:9/"]
)
def test_usable_endpoints_are_kept(endpoint: str) -> None:
    obj = tp(controls={"cpu": {"type": "http", "http": {"endpoint": endpoint}}})
    assert parse_telemetry_profile(obj).control_http == HttpEndpoint(endpoint)


# Shrunk examples of tests/properties/test_crd_schema.py: the parser took what the chart's
# CRD refuses on a real API server (a block without its required ``type``; an ``http`` block
# that breaks its bounds under a type that does not use it).
@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (tp(sources={"cpu": {}}), "spec.sources.cpu.type"),
        (tp(controls={"cpu": {}}), "spec.controls.cpu.type"),
        (tp(controls={"cpu": {"http": {"endpoint": "http://sim/x"}}}), "spec.controls.cpu.type"),
        (tp(controls={"cpu": {"type": "none", "http": {}}}), "spec.controls.cpu.http.endpoint"),
        (
            tp(sources={"cpu": {"type": "host", "http": {"endpoint": "x", "timeoutSeconds": 500}}}),
            "spec.sources.cpu.http.endpoint",
        ),
        (
            tp(controls={"cpu": {"type": "host", "http": {"endpoint": "http://s/", "mode": "x"}}}),
            "spec.controls.cpu.http.mode",
        ),
    ],
)
def test_what_the_crd_refuses_is_refused_even_where_unused(obj: Any, field: str) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_telemetry_profile(obj)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("sources", "controls", "field"),
    [
        ({"gpu": {}}, None, "spec.sources.gpu.type"),
        (None, {"gpu": {}}, "spec.controls.gpu.type"),
        (None, {"gpu": {"type": "host", "http": {"endpoint": "http://s/", "timeoutSeconds": 0}}},
         "spec.controls.gpu.http.timeoutSeconds"),
    ],
)
def test_gpu_blocks_need_their_type_and_a_valid_http_block(
    sources: Any, controls: Any, field: str
) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_gpu_routing(tp(sources=sources, controls=controls))
    assert caught.value.field == field


def test_a_null_block_is_an_absent_one() -> None:
    # The API server prunes null values of fields that are not nullable: no type needed.
    routing = parse_telemetry_profile(tp(sources={"cpu": None}, controls={"cpu": None}))
    assert (routing.source, routing.control) == (SourceType.HOST, ControlType.HOST)
