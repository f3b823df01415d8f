"""The power simulator's GPUs (docs/resources.md, GPU power caps), over real HTTP and as a model."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from agentpool.sim.power.gpu import GPU_ACTION, GpuConfig, GpuModel
from agentpool.sim.power.model import NodeConfig
from agentpool.sim.power.server import PowerSim

GPUS = GpuConfig(
    count=4, min_watts=100, max_watts=400, default_watts=350, idle_watts=50, load=1.0, settle_s=0
)


@pytest.fixture
def sim() -> Iterator[PowerSim]:
    with PowerSim(defaults=NodeConfig(idle_watts=60, max_watts=260, load=0.5)) as s:
        s.add_node("g", gpu=GPUS)
        yield s


def get(sim: PowerSim, node: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{sim.url}/telemetry/{node}", timeout=5) as resp:
        doc: dict[str, Any] = json.loads(resp.read())
        return doc


def post(sim: PowerSim, node: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        f"{sim.url}/control/{node}",
        json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def gpu_cap(sim: PowerSim, node: str, watts: Any) -> tuple[int, dict[str, Any]]:
    return post(
        sim,
        node,
        {"node": node, "action": GPU_ACTION, "capWattsPerGpu": watts, "ts": "2026-02-27T00:00:00Z"},
    )


def test_telemetry_gpu_object_and_cpu_apart(sim: PowerSim) -> None:
    doc = get(sim, "g")
    gpu = doc["gpu"]
    assert gpu["present"] is True
    assert (gpu["count"], gpu["vendor"]) == (4, "nvidia")
    assert gpu["powerWattsTotal"] == pytest.approx(4 * 350)  # full load, held at the default cap
    assert gpu["capWattsPerGpuApplied"] == 350
    assert gpu["capWattsPerGpuTarget"] is None
    assert (gpu["minCapWattsPerGpu"], gpu["maxCapWattsPerGpu"]) == (100, 400)
    # The top level is CPU + GPU, like Joulie's simulator; the CPU reading stays apart.
    assert doc["cpu"]["packagePowerWatts"] == pytest.approx(160)
    assert doc["packagePowerWatts"] == pytest.approx(160 + 1400)


def test_gpu_cap_clamped_and_answered_with_state(sim: PowerSim) -> None:
    status, answer = gpu_cap(sim, "g", 50)
    assert (status, answer["result"]) == (200, "applied")
    assert answer["state"]["gpuCapWattsPerGpuApplied"] == 100
    assert answer["state"]["gpuCapWattsPerGpuTarget"] == 50
    assert get(sim, "g")["gpu"]["powerWattsTotal"] == pytest.approx(400)
    assert sim.state("g").gpu_cap_watts == 100
    status, answer = gpu_cap(sim, "g", 1000)
    assert answer["state"]["gpuCapWattsPerGpuApplied"] == 400


def test_gpu_less_node_answers_blocked(sim: PowerSim) -> None:
    status, answer = gpu_cap(sim, "cpu-only", 200)
    assert (status, answer["result"], answer["message"]) == (200, "blocked", "no GPU on this node")
    assert get(sim, "cpu-only")["gpu"] == {"present": False, "count": 0}
    assert sim.state("cpu-only").gpu_cap_watts is None


@pytest.mark.parametrize("bad", [0, -5, "250", True, None])
def test_bad_gpu_cap_is_400_naming_the_field(sim: PowerSim, bad: Any) -> None:
    status, answer = gpu_cap(sim, "g", bad)
    assert status == 400
    assert "capWattsPerGpu" in answer["message"]
    assert sim.state("g").gpu_cap_watts == 350


def test_power_settles_to_a_new_cap() -> None:
    config = GpuConfig(
        count=2,
        min_watts=100,
        max_watts=400,
        default_watts=400,
        idle_watts=50,
        load=1.0,
        settle_s=2.0,
    )
    model = GpuModel(config, now=0.0)
    assert model.power_per_gpu(0.0) == pytest.approx(400)
    model.set_cap(200, now=10.0)
    assert model.power_per_gpu(10.0) == pytest.approx(400)  # no jump at the instant of the cap
    assert model.power_per_gpu(12.0) == pytest.approx(200 + 200 * math.exp(-1))
    assert model.power_per_gpu(30.0) == pytest.approx(200, abs=0.01)
    assert model.total_power(30.0) == pytest.approx(400, abs=0.02)


@pytest.mark.parametrize(
    "kwargs",
    [{"count": -1}, {"min_watts": 500}, {"default_watts": 50}, {"load": 2}, {"settle_s": -1}],
)
def test_config_is_validated(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"must be|need"):
        GpuConfig(**kwargs)
