"""GPU caps: parsing spec.gpu.powerCap (errors name the field), per-device resolution, routing."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.errors import ProfileError
from agentpool.spec.gpu import DeviceLimits, GpuCap, parse_gpu_cap, resolve_cap
from agentpool.spec.gpu_parse import GpuControlMode, parse_gpu_routing
from agentpool.spec.parse import parse_power_profile
from agentpool.spec.values import ControlType


def npp(gpu: Any) -> dict[str, Any]:
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
    assert parse_power_profile(npp({"powerCap": power_cap})).gpu_cap == expected


def test_no_gpu_block_means_no_gpu_cap() -> None:
    assert parse_power_profile(npp(None)).gpu_cap is None
    assert parse_power_profile(npp({})).gpu_cap is None


@pytest.mark.parametrize(
    ("gpu", "field", "problem"),
    [
        ("300", "spec.gpu", "expected an object"),
        ({"powerCap": 300}, "spec.gpu.powerCap", "expected an object"),
        ({"powerCap": {"capWattsPerGpu": 0}}, "spec.gpu.powerCap.capWattsPerGpu", "> 0"),
        ({"powerCap": {"capWattsPerGpu": -1}}, "spec.gpu.powerCap.capWattsPerGpu", "> 0"),
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
        parse_power_profile(npp(gpu))
    assert caught.value.field == field
    assert problem in caught.value.problem
    assert caught.value.kind == "NodePowerProfile"
    assert "gpu-0" in str(caught.value)


def test_same_shape_serves_another_kind() -> None:
    spec = {"gpu": {"powerCap": {"capPctOfMax": 0}}}
    with pytest.raises(ProfileError, match=r"NodeTwin 'n': spec.gpu.powerCap.capPctOfMax"):
        parse_gpu_cap(spec, "NodeTwin", "n")


@pytest.mark.parametrize(
    ("cap", "limits", "target", "clamped"),
    [
        (GpuCap(watts_per_gpu=250), DeviceLimits(100, 400), 250, 250),
        (GpuCap(watts_per_gpu=50), DeviceLimits(100, 400), 50, 100),
        (GpuCap(watts_per_gpu=500), DeviceLimits(100, 400), 500, 400),
        (GpuCap(pct_of_max=50), DeviceLimits(100, 400), 200, 200),
        (GpuCap(pct_of_max=50), DeviceLimits(150, 250), 125, 150),
        (GpuCap(pct_of_max=100), DeviceLimits(150, 250), 250, 250),
    ],
)
def test_resolve_against_each_device(
    cap: GpuCap, limits: DeviceLimits, target: float, clamped: float
) -> None:
    assert resolve_cap(cap, limits) == (target, clamped)


def test_routing_defaults_to_host_and_borrows_cpu_telemetry() -> None:
    assert parse_gpu_routing(None).control is ControlType.HOST
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
