"""When a tick result counts as a new status (``status_key``): what was enforced, not what was
read.

The ``observed`` objects here are written as the node controllers fill them
(docs/resources.md), as fixtures of this test, not built with the controllers' code.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from agentpool.results import Backend, GpuBackend, GpuTickResult, Result, TickResult

HTTP_RAPL = {"profile": "eco", "capWatts": 120.0, "controlState": {"capWatts": 120.0,
             "packagePowerWatts": 118.2, "load": 0.5}}
HOST_RAPL = {"profile": "eco", "packagePowerWatts": 97.5, "capWatts": 120.0,
             "raplLimitsUw": {"intel-rapl:0": 120_000_000, "intel-rapl:1": 120_000_000}}
DVFS = {"profile": "eco", "capWatts": 120.0, "throttlePct": 30, "observedPowerWatts": 131.0,
        "emaPowerWatts": 127.25}
PERCENT_THROTTLE = {"profile": "eco", "throttlePct": 40}
GPU_HTTP = {"capWattsPerGpu": 250, "capPctOfMax": None, "targetWattsPerGpu": 250,
            "requestedWattsPerGpu": 250, "gpuCount": 4, "powerWattsTotal": 903.1,
            "discovered": {"count": 4}}
GPU_HOST = {"capWattsPerGpu": 250, "capPctOfMax": None, "devices": [
    {"index": 0, "id": "GPU-a", "result": "applied", "targetWatts": 250, "capWatts": 250,
     "powerWatts": 201.4, "minWatts": 100, "maxWatts": 400},
    {"index": 1, "id": "GPU-b", "result": "applied", "targetWatts": 250, "capWatts": 250,
     "powerWatts": 188.0, "minWatts": 100, "maxWatts": 400},
]}


def cpu(observed: dict[str, Any], message: str = "applied", backend: Backend = Backend.RAPL,
        gpu: GpuTickResult | None = None) -> TickResult:
    return TickResult(backend, Result.APPLIED, message, observed, gpu)


def gpu(observed: dict[str, Any], message: str = "gpu applied") -> TickResult:
    return cpu(HTTP_RAPL, gpu=GpuTickResult(GpuBackend.HTTP, Result.APPLIED, message, observed))


def changed(base: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with the value at ``path`` replaced."""
    result: dict[str, Any] = copy.deepcopy(base)
    target: Any = result
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return result


@pytest.mark.parametrize(
    ("make", "base", "path", "value"),
    [
        (cpu, HOST_RAPL, ("packagePowerWatts",), 99.0),
        (cpu, DVFS, ("observedPowerWatts",), 119.0),
        (cpu, DVFS, ("emaPowerWatts",), 125.0),
        (cpu, HTTP_RAPL, ("controlState", "packagePowerWatts"), 121.7),
        (cpu, HTTP_RAPL, ("controlState", "load"), 0.9),
        (gpu, GPU_HTTP, ("powerWattsTotal",), 1001.0),
        (gpu, GPU_HOST, ("devices", 1, "powerWatts"), 250.5),
    ],
)
def test_readings_alone_are_no_new_status(
    make: Any, base: dict[str, Any], path: tuple[Any, ...], value: Any
) -> None:
    before, after = make(base), make(changed(base, path, value))
    assert before != after
    assert before.status_key() == after.status_key()


@pytest.mark.parametrize(
    ("make", "base", "path", "value"),
    [
        (cpu, HTTP_RAPL, ("capWatts",), 140.0),  # an endpoint that answers the same words
        (cpu, HOST_RAPL, ("raplLimitsUw", "intel-rapl:1"), 95_000_000),
        (cpu, DVFS, ("throttlePct",), 40),
        (cpu, PERCENT_THROTTLE, ("throttlePct",), 30),
        (cpu, HOST_RAPL, ("profile",), "performance"),
        (gpu, GPU_HTTP, ("requestedWattsPerGpu",), 300),
        (gpu, GPU_HTTP, ("capPctOfMax",), 70),
        (gpu, GPU_HOST, ("devices", 0, "capWatts"), 200),
    ],
)
def test_what_was_enforced_is_a_new_status(
    make: Any, base: dict[str, Any], path: tuple[Any, ...], value: Any
) -> None:
    assert make(base).status_key() != make(changed(base, path, value)).status_key()


def test_backend_result_and_message_still_count() -> None:
    base = cpu(HOST_RAPL)
    for other in (
        dataclasses.replace(base, backend=Backend.DVFS),
        dataclasses.replace(base, result=Result.BLOCKED),
        dataclasses.replace(base, message="another"),
        dataclasses.replace(base, gpu=GpuTickResult(GpuBackend.HTTP, Result.APPLIED, "g")),
    ):
        assert other.status_key() != base.status_key()
