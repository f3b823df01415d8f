"""status.control.gpu through the real status writer, on the emulator and a real kube-apiserver.

The chart's CRDs declare the GPU status fields; a real server (envtest,
where its binaries exist) keeps exactly what the agent writes, and refuses
a malformed ``spec.gpu.powerCap`` itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentpool.kube.api import KubeApi, load_client
from agentpool.kube.status import StatusWriter
from agentpool.results import Backend, GpuBackend, GpuTickResult, Result, TickResult
from agentpool.sim.apiserver import ApiEmulator, ApiError
from agentpool.sim.objects import power_profile, telemetry_profile
from tests.support.apiservers import Backend as ApiBackend

PATCHES = ("patch", "telemetryprofiles/status")
DEVICE = {
    "index": 0,
    "id": "GPU-aaaa",
    "name": "Fake A100",
    "result": "applied",
    "targetWattsPerGpu": 250,
    "capWatts": 250.0,
    "powerWatts": 240.5,
}


def tick(gpu_message: str = "1 GPU(s) capped", power: float = 240.5) -> TickResult:
    gpu = GpuTickResult(
        GpuBackend.HOST_NVIDIA,
        Result.APPLIED,
        gpu_message,
        {"capWattsPerGpu": 250, "devices": [{**DEVICE, "powerWatts": power}]},
    )
    return TickResult(Backend.RAPL, Result.APPLIED, "RAPL PL1 120 W", {"capWatts": 120}, gpu)


def writer_for(kubeconfig: Any) -> tuple[StatusWriter, KubeApi]:
    api = KubeApi(load_client(str(kubeconfig)))
    w = StatusWriter(api, heartbeat_s=60.0, max_backoff_s=0.2)
    w.start()
    return w, api


def test_server_keeps_the_gpu_status_and_refuses_a_bad_cap(backend: ApiBackend) -> None:
    backend.direct.create("telemetryprofiles", telemetry_profile("gpu-s", None))
    writer, api = writer_for(backend.kubeconfig)
    try:
        assert writer.offer("gpu-s", "gpu-s", tick())
        assert writer.flush(10)
    finally:
        writer.stop()
        api.close()
    gpu = backend.direct.get("telemetryprofiles", "gpu-s")["status"]["control"]["gpu"]
    assert (gpu["backend"], gpu["result"], gpu["message"]) == (
        "host-nvidia",
        "applied",
        "1 GPU(s) capped",
    )
    assert gpu["observed"] == {"capWattsPerGpu": 250, "devices": [DEVICE]}  # nulls dropped
    assert gpu["updatedAt"].endswith("Z")
    good = power_profile("gpu-s", 120, gpu_cap={"capWattsPerGpu": 250, "capPctOfMax": 60})
    kept = backend.direct.create("nodepowerprofiles", good)
    assert kept["spec"]["gpu"] == {"powerCap": {"capWattsPerGpu": 250, "capPctOfMax": 60}}
    bad = power_profile("gpu-bad", 120, gpu_cap={"capPctOfMax": 150})
    bad["metadata"]["name"] = "gpu-bad"
    with pytest.raises(ApiError, match="capPctOfMax") as refused:
        backend.direct.create("nodepowerprofiles", bad)
    assert refused.value.code == 422


@pytest.fixture
def emu_writer(api_emulator: ApiEmulator) -> Iterator[StatusWriter]:
    api_emulator.create("telemetryprofiles", telemetry_profile("node-a", None))
    writer, api = writer_for(api_emulator.kubeconfig)
    yield writer
    writer.stop()
    api.close()


def test_gpu_status_written_only_when_it_changes(
    api_emulator: ApiEmulator, emu_writer: StatusWriter
) -> None:
    assert emu_writer.offer("node-a", "node-a", tick())
    assert emu_writer.flush(5)
    # A new power reading alone is no change; a new GPU message is, with the CPU unchanged.
    assert not emu_writer.offer("node-a", "node-a", tick(power=230.0))
    assert emu_writer.offer(
        "node-a", "node-a", tick("GPU 0 (GPU-aaaa) blocked: NVML: Not Supported")
    )
    assert emu_writer.flush(5)
    assert api_emulator.request_counts()[PATCHES] == 2
    status = api_emulator.get("telemetryprofiles", "node-a")["status"]["control"]
    assert status["gpu"]["message"] == "GPU 0 (GPU-aaaa) blocked: NVML: Not Supported"
    assert status["cpu"]["message"] == "RAPL PL1 120 W"
