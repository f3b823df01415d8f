"""GPU caps of one node (docs/resources.md), through NodeController: raw CRs in, statuses out.

HTTP control runs against the power simulator on 127.0.0.1 (real HTTP, GPUs
simulated); host control runs NVML against the fake libnvidia-ml.so.1 built
from C (tests/backends/fake_nvml), which stands in for a driver that cannot
exist on this machine, loaded through nvidia-ml-py's own lookup.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agentpool.backends.sysfs.files import Originals
from agentpool.config.options import AgentMode
from agentpool.config.settings import Settings
from agentpool.controller.metrics import NodeMetrics
from agentpool.controller.node import NodeController
from agentpool.kube.status import status_body
from agentpool.resources.nodeinputs import GpuRange, NodeApi, NodeInputs
from agentpool.results import GpuBackend, GpuSeen, GpuTickResult, Result
from agentpool.sim.objects import power_profile, telemetry_profile
from agentpool.sim.power.gpu import GPU_ACTION, GpuConfig
from agentpool.sim.power.model import NodeConfig, RequestKind
from agentpool.sim.power.server import PowerSim
from tests.support.fake_nvml import FakeGpu, FakeNvml, build, preload

GPUS = GpuConfig(count=4, min_watts=100, max_watts=400, default_watts=350, settle_s=0)
GPU_NODE = {"nvidia.com/gpu": "4"}


class Node:
    """One node's controller, with its own journal and metrics registry."""

    def __init__(self, name: str, tmp: Path, journal: Path | None = None, **settings: Any) -> None:
        self.name = name
        self.registry = CollectorRegistry()
        self.settings = Settings(node_name=name, sysfs_root=str(tmp / "{node}"), **settings)
        self.controller = NodeController(
            self.settings.controller(),
            name,
            NodeMetrics(name, registry=self.registry),
            Originals(journal or tmp / f"{name}.journal"),
        )

    def set(
        self,
        npp: dict[str, Any] | None,
        tp: dict[str, Any] | None = None,
        allocatable: dict[str, str] | None = None,
    ) -> None:
        # A GPU node's device plugin makes its GPUs allocatable: a cap needs some (as in Joulie).
        gpus = GPU_NODE if allocatable is None else allocatable
        inputs = NodeInputs(
            self.name, power_profile=npp, telemetry_profile=tp, gpu_allocatable=gpus
        )
        self.controller.update(inputs)

    def gpu(self) -> GpuTickResult:
        result = self.controller.tick().gpu
        assert result is not None
        return result

    def metric(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, {"node": self.name, **labels})


@pytest.fixture
def sim() -> Iterator[PowerSim]:
    with PowerSim(defaults=NodeConfig(noise_watts=0.0)) as s:
        s.add_node("gpu-0", gpu=GPUS)
        s.add_node("cpu-0")
        yield s


def gpu_posts(sim: PowerSim, node: str) -> list[Any]:
    return [
        r.body["capWattsPerGpu"]
        for r in sim.requests(node, RequestKind.CONTROL)
        if r.body.get("action") == GPU_ACTION
    ]


# -- HTTP ---------------------------------------------------------------------------------------


def test_http_watts_applied_with_status_and_metrics(sim: PowerSim, tmp_path: Path) -> None:
    node = Node("gpu-0", tmp_path)
    node.set(
        power_profile("gpu-0", 150, gpu_cap={"capWattsPerGpu": 250}),
        telemetry_profile("gpu-0", sim),
    )
    gpu = node.gpu()
    assert (gpu.backend, gpu.result) == (GpuBackend.HTTP, Result.APPLIED)
    # Ours, then the endpoint's words (which may say nothing of the cap).
    assert gpu.message == (
        "GPU cap 250 W per GPU over HTTP: GPU cap set to 250 W per GPU on 4 GPU(s)"
    )
    assert sim.state("gpu-0").gpu_cap_watts == 250
    assert sim.state("gpu-0").cap_watts == 150  # the CPU side went on as before
    assert gpu.observed["controlState"]["gpuCapWattsPerGpuApplied"] == 250
    assert node.metric("joulie_gpu_power_cap_watts", device="all") == 250
    assert node.metric("joulie_gpu_backend_mode", backend="http") == 1
    assert node.metric("joulie_gpu_backend_mode", backend="host-nvidia") == 0
    body = status_body(node.controller.tick())
    assert body["control"]["gpu"]["backend"] == "http"
    assert body["control"]["gpu"]["observed"]["devices"] is None  # nulled: merge patch drops it


@pytest.mark.parametrize(
    ("cap", "posted", "applied", "said"),
    [
        # clamped to the devices' minimum
        ({"capWattsPerGpu": 50}, 100, 100, "50 W per GPU -> 100 W per GPU"),
        # and to their maximum
        ({"capWattsPerGpu": 900}, 400, 400, "900 W per GPU -> 400 W per GPU"),
        # percent of each device's maximum
        ({"capPctOfMax": 60}, 240, 240, "60% of each GPU's maximum -> 240 W per GPU"),
        # watts win
        ({"capPctOfMax": 60, "capWattsPerGpu": 300}, 300, 300, "300 W per GPU"),
    ],
)
def test_http_clamping_and_percent(
    sim: PowerSim, tmp_path: Path, cap: dict[str, Any], posted: float, applied: float, said: str
) -> None:
    node = Node("gpu-0", tmp_path)
    node.set(power_profile("gpu-0", None, gpu_cap=cap), telemetry_profile("gpu-0", sim))
    gpu = node.gpu()
    assert gpu.result is Result.APPLIED
    assert gpu.message.startswith(f"GPU cap {said} over HTTP: ")
    assert gpu_posts(sim, "gpu-0") == [posted]
    assert sim.state("gpu-0").gpu_cap_watts == applied


def test_http_gpu_less_node_is_blocked_without_a_loop(sim: PowerSim, tmp_path: Path) -> None:
    node = Node("cpu-0", tmp_path)
    npp = power_profile("cpu-0", 150, gpu_cap={"capWattsPerGpu": 250})
    # No GPU allocatable on the Node: blocked before anything is asked, as Joulie's agent.
    for allocatable in ({}, {"nvidia.com/gpu": "0", "example.com/fpga": "2"}):
        node.set(npp, telemetry_profile("cpu-0", sim), allocatable=allocatable)
        gpu = node.gpu()
        assert (gpu.backend, gpu.result) == (GpuBackend.NONE, Result.BLOCKED)
        assert gpu.message.startswith("node has no allocatable GPU resources")
    assert gpu_posts(sim, "cpu-0") == []
    # A Node that claims GPUs the telemetry says are not there.
    node.set(npp, telemetry_profile("cpu-0", sim))
    first, second = node.gpu(), node.gpu()
    assert (first.result, first.message) == (
        Result.BLOCKED,
        "no GPU on this node (telemetry: gpu.present false)",
    )
    assert second.status_key() == first.status_key()  # stable: one status write, not a loop
    assert gpu_posts(sim, "cpu-0") == []  # telemetry said so: nothing posted
    assert node.metric("joulie_reconcile_errors_total") == 0
    # Without GPU telemetry the endpoint's own "blocked" answer is honoured.
    tp = telemetry_profile("cpu-0", sim)
    tp["spec"]["sources"] = {"cpu": {"type": "host"}}
    node.set(power_profile("cpu-0", 150, gpu_cap={"capWattsPerGpu": 250}), tp)
    gpu = node.gpu()
    assert (gpu.result, gpu.message) == (Result.BLOCKED, "no GPU on this node")
    assert gpu_posts(sim, "cpu-0") == [250]


def test_http_percent_without_the_maximum_is_blocked(sim: PowerSim, tmp_path: Path) -> None:
    node = Node("gpu-0", tmp_path)
    tp = telemetry_profile("gpu-0", sim)
    tp["spec"]["sources"] = {"cpu": {"type": "host"}}  # no GPU telemetry: no device maximum
    node.set(power_profile("gpu-0", None, gpu_cap={"capPctOfMax": 50}), tp)
    gpu = node.gpu()
    assert gpu.result is Result.BLOCKED
    assert "gpu.maxCapWattsPerGpu" in gpu.message
    assert gpu_posts(sim, "gpu-0") == []


def test_http_percent_resolves_against_nodehardware_or_the_catalog_when_telemetry_has_none(
    sim: PowerSim, tmp_path: Path
) -> None:
    # As Joulie's simulator answers: GPU telemetry without any per-device constraint.
    sim.add_node("joulie-gpu", gpu=dataclasses.replace(GPUS, report_limits=False))
    node = Node("joulie-gpu", tmp_path)
    npp = power_profile("joulie-gpu", None, gpu_cap={"capPctOfMax": 50})
    tp = telemetry_profile("joulie-gpu", sim)
    node.controller.update(NodeInputs("joulie-gpu", power_profile=npp, telemetry_profile=tp,
                                      gpu_allocatable=GPU_NODE))
    gpu = node.gpu()
    assert gpu.result is Result.BLOCKED
    assert "capRangePerGpu" in gpu.message
    assert "hardware catalog nor agentpool's table of data sheets" in gpu.message
    assert gpu_posts(sim, "joulie-gpu") == []
    for known, posted in (
        (GpuRange(300.0, 150.0, "NodeHardware"), 150.0),  # 50% of 300, at its minimum
        (GpuRange(360.0, None, "hardware catalog: FAKE_GPU_400"), 180.0),
    ):
        node.controller.update(NodeInputs("joulie-gpu", power_profile=npp, telemetry_profile=tp,
                                          gpu_allocatable=GPU_NODE, gpu_range=known))
        gpu = node.gpu()
        assert (gpu.backend, gpu.result) == (GpuBackend.HTTP, Result.APPLIED)
        assert gpu.observed["maxCapWattsPerGpuFrom"] == known.source
        assert gpu_posts(sim, "joulie-gpu")[-1] == posted
    assert sim.state("joulie-gpu").gpu_cap_watts == 180.0
    # What the telemetry showed goes to NodeHardware: count and cap, no range it did not give.
    assert gpu.seen == GpuSeen("nvidia", 4, cap_watts=180.0, control=True)
    # The telemetry's own maximum wins over both.
    node = Node("gpu-0", tmp_path)
    node.controller.update(NodeInputs(
        "gpu-0", power_profile=power_profile("gpu-0", None, gpu_cap={"capPctOfMax": 50}),
        telemetry_profile=telemetry_profile("gpu-0", sim), gpu_allocatable=GPU_NODE,
        gpu_range=GpuRange(1000.0, None, "NodeHardware")))
    gpu = node.gpu()
    assert "maxCapWattsPerGpuFrom" not in gpu.observed
    assert gpu_posts(sim, "gpu-0") == [200.0]
    assert gpu.seen == GpuSeen("nvidia", 4, None, 100.0, 400.0, 350.0, 200.0, True)


def test_http_restore_on_stop(sim: PowerSim, tmp_path: Path) -> None:
    node = Node("gpu-0", tmp_path)
    node.set(
        power_profile("gpu-0", None, gpu_cap={"capWattsPerGpu": 200}),
        telemetry_profile("gpu-0", sim),
    )
    node.gpu()
    assert sim.state("gpu-0").gpu_cap_watts == 200
    assert node.controller.restore() == []
    assert sim.state("gpu-0").gpu_cap_watts == 350  # the cap found before the first write
    assert not (tmp_path / "gpu-0.journal").exists()


def test_http_worker_restarted_after_a_crash_restores_the_true_original(
    sim: PowerSim, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.json"
    npp = power_profile("gpu-0", None, gpu_cap={"capWattsPerGpu": 200})
    first = Node("gpu-0", tmp_path, journal)
    first.set(npp, telemetry_profile("gpu-0", sim))
    first.gpu()  # ... and the worker dies here without restoring
    second = Node("gpu-0", tmp_path, journal)
    second.set(
        power_profile("gpu-0", None, gpu_cap={"capWattsPerGpu": 300}),
        telemetry_profile("gpu-0", sim),
    )
    second.gpu()  # the simulator says 200 W now; the journal still says 350
    assert second.controller.restore() == []
    assert sim.state("gpu-0").gpu_cap_watts == 350


def test_http_error_answer_and_unreachable_endpoint(sim: PowerSim, tmp_path: Path) -> None:
    node = Node("gpu-0", tmp_path)
    sim.set_behaviour("gpu-0", "error", "board busy", action=GPU_ACTION)
    node.set(
        power_profile("gpu-0", 150, gpu_cap={"capWattsPerGpu": 250}),
        telemetry_profile("gpu-0", sim),
    )
    gpu = node.gpu()
    assert (gpu.result, gpu.message) == (Result.ERROR, "board busy")
    sim.set_behaviour("gpu-0")
    sim.set_fault("gpu-0", "5xx", "control")
    gpu = node.gpu()
    assert gpu.result is Result.ERROR
    assert gpu.message.startswith("GPU control: ")
    assert "HTTP 503" in gpu.message


def test_no_gpu_cap_reports_nothing_then_none(sim: PowerSim, tmp_path: Path) -> None:
    node = Node("gpu-0", tmp_path)
    node.set(power_profile("gpu-0", 150), telemetry_profile("gpu-0", sim))
    result = node.controller.tick()
    assert result.gpu is None
    assert "gpu" not in status_body(result)["control"]
    assert node.metric("joulie_gpu_backend_mode", backend="http") is None
    node.set(
        power_profile("gpu-0", 150, gpu_cap={"capWattsPerGpu": 250}),
        telemetry_profile("gpu-0", sim),
    )
    assert node.gpu().result is Result.APPLIED
    assert sim.state("gpu-0").gpu_cap_watts == 250
    node.set(power_profile("gpu-0", 150), telemetry_profile("gpu-0", sim))
    # The GPU cap is removed: held one tick (the node may be moving to a NodeTwin), then the
    # cap found before the first write goes back, as on a graceful stop.
    gpu = node.gpu()
    none = "nothing to enforce: no spec.gpu.powerCap"
    assert (gpu.result, gpu.message) == (
        Result.NONE,
        f"{none}; the last GPU cap is released at the next tick unless a new desired state "
        "arrives",
    )
    assert sim.state("gpu-0").gpu_cap_watts == 250
    gpu = node.gpu()
    assert (gpu.result, gpu.message) == (
        Result.NONE, f"{none}; GPU cap released: original GPU caps restored"
    )
    assert sim.state("gpu-0").gpu_cap_watts == 350
    assert node.gpu().message == gpu.message
    assert gpu_posts(sim, "gpu-0") == [250, 350]


def test_malformed_gpu_cap_is_an_error_naming_the_field(sim: PowerSim, tmp_path: Path) -> None:
    node = Node("gpu-0", tmp_path)
    node.set(
        power_profile("gpu-0", 150, gpu_cap={"capPctOfMax": 120}), telemetry_profile("gpu-0", sim)
    )
    result = node.controller.tick()
    assert result.gpu is not None
    assert result.gpu.result is Result.ERROR
    assert "spec.gpu.powerCap.capPctOfMax" in result.gpu.message
    # The whole NodePowerProfile is malformed: nothing is written, CPU nor GPU.
    assert result.result is Result.ERROR
    assert sim.requests("gpu-0", RequestKind.CONTROL) == []


def test_simulate_only_writes_nothing(sim: PowerSim, tmp_path: Path) -> None:
    node = Node("gpu-0", tmp_path, simulate_only=True)
    node.set(
        power_profile("gpu-0", 150, gpu_cap={"capWattsPerGpu": 250}),
        telemetry_profile("gpu-0", sim),
    )
    gpu = node.gpu()
    assert gpu.result is Result.APPLIED
    assert gpu.message.startswith("simulate-only: would cap GPUs at 250 W per GPU via HTTP")
    assert sim.requests("gpu-0", RequestKind.CONTROL) == []


# -- host NVML ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nvml_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    library = build(tmp_path_factory.mktemp("fake-nvml"))
    preload(library)
    return library


@pytest.fixture
def nvml(nvml_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml(nvml_library, tmp_path / "nvml-state")
    fake.write(
        [
            FakeGpu("GPU-aaaa", "Fake_A100", 100, 400, 400, power_w=380),
            FakeGpu("GPU-bbbb", "Fake_L4", 40, 72, 72, power_w=70),
            FakeGpu("GPU-cccc", "Fake_H100", 200, 700, 700, power_w=600),
        ]
    )
    monkeypatch.setenv("FAKE_NVML_STATE", str(fake.state))
    return fake


def test_host_nvml_caps_every_device_and_restores(nvml: FakeNvml, tmp_path: Path) -> None:
    node = Node("host-0", tmp_path)
    node.set(power_profile("host-0", None, gpu_cap={"capWattsPerGpu": 150}))
    gpu = node.gpu()
    assert (gpu.backend, gpu.result) == (GpuBackend.HOST_NVIDIA, Result.APPLIED)
    assert gpu.message == "3 GPU(s) capped at 150 W per GPU: GPU 0 150 W, GPU 1 72 W, GPU 2 200 W"
    assert nvml.limits() == [150, 72, 200]
    assert [d["id"] for d in gpu.observed["devices"]] == ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]
    # For NodeHardware: the first device, as Joulie's agent reports it, its new cap read back.
    assert gpu.seen == GpuSeen("nvidia", 3, "Fake A100", 100.0, 400.0, 400.0, 150.0, True)
    assert node.metric("joulie_gpu_power_cap_watts", device="2") == 200
    assert node.metric("joulie_gpu_power_watts", device="0") == 150
    assert node.metric("joulie_gpu_backend_mode", backend="host-nvidia") == 1
    assert node.controller.restore() == []
    assert nvml.limits() == [400, 72, 700]


def test_host_gpu_cap_removed_restores_every_device_at_the_second_tick(
    nvml: FakeNvml, tmp_path: Path
) -> None:
    node = Node("host-0", tmp_path)
    node.set(power_profile("host-0", None, gpu_cap={"capWattsPerGpu": 150}))
    assert node.gpu().result is Result.APPLIED
    node.set(power_profile("host-0", None))  # the profile stays, its GPU cap goes
    assert "released at the next tick" in node.gpu().message
    assert nvml.limits() == [150, 72, 200]
    gpu = node.gpu()
    assert gpu.message.endswith("GPU cap released: original GPU caps restored")
    assert nvml.limits() == [400, 72, 700]


def test_host_refusing_device_is_named_and_the_others_capped(
    nvml: FakeNvml, tmp_path: Path
) -> None:
    nvml.set_fail(2, "no_permission")
    node = Node("host-0", tmp_path)
    node.set(power_profile("host-0", None, gpu_cap={"capPctOfMax": 50}))
    gpu = node.gpu()
    assert gpu.result is Result.BLOCKED
    assert gpu.message.startswith("GPU 2 (GPU-cccc) blocked: NVML: Insufficient Permissions; ")
    assert gpu.message.endswith(
        "2 other GPU(s) capped at 50% of each GPU's maximum: GPU 0 200 W, GPU 1 40 W"
    )
    assert nvml.limits() == [200, 40, 700]
    # A device lost later cannot even say its UUID; the others stay capped.
    nvml.set_fail(1, "lost")
    gpu = node.gpu()
    assert gpu.result is Result.ERROR  # worst of blocked and error
    assert "GPU 1 (index-1) error: NVML: GPU is lost" in gpu.message
    assert node.metric("joulie_gpu_power_cap_watts", device="0") == 200


def test_host_without_any_gpu_library_is_blocked_not_an_error_loop(
    nvml: FakeNvml, tmp_path: Path
) -> None:
    nvml.set_driver(False)
    node = Node("host-0", tmp_path)
    node.set(power_profile("host-0", 120, gpu_cap={"capWattsPerGpu": 150}))
    first = node.gpu()
    assert first.result is Result.BLOCKED
    assert first.message.startswith(
        "no GPU to cap on this node: NVML unavailable: Driver Not Loaded; AMD SMI"
    )
    assert node.gpu().status_key() == first.status_key()
    assert node.metric("joulie_reconcile_errors_total") == 0
    nvml.set_driver(True)  # the driver comes back: the next tick caps
    assert node.gpu().result is Result.APPLIED


def test_host_gpu_less_node_says_what_the_node_reports(nvml: FakeNvml, tmp_path: Path) -> None:
    node = Node("host-0", tmp_path)
    # Joulie counts any */gpu resource and Intel's i915: one of them is a GPU node.
    for allocatable in ({"example.com/gpu": "1"}, {"gpu.intel.com/i915": "1"}):
        node.set(power_profile("host-0", None, gpu_cap={"capWattsPerGpu": 150}),
                 allocatable=allocatable)
        assert node.gpu().result is Result.APPLIED
    nvml.set_driver(False)
    node.set(
        power_profile("host-0", None, gpu_cap={"capWattsPerGpu": 160}),
        allocatable={"nvidia.com/gpu": "2"},
    )
    gpu = node.gpu()
    assert gpu.result is Result.BLOCKED
    assert gpu.message.endswith("; the Node reports 2 GPU(s) (allocatable)")
    assert gpu.observed["discovered"] == {
        "count": 2,
        "model": None,
        "vendor": "NVIDIA",
        "source": "allocatable",
    }
    assert node.gpu().message == gpu.message  # the same every tick: one status write
    # No GPU allocatable: blocked in Joulie's words, and the libraries are not asked.
    nvml.set_driver(True)
    node.set(power_profile("host-0", None, gpu_cap={"capWattsPerGpu": 170}),
             allocatable={"nvidia.com/gpu": "0"})
    gpu = node.gpu()
    assert (gpu.backend, gpu.result) == (GpuBackend.NONE, Result.BLOCKED)
    assert gpu.message.startswith("node has no allocatable GPU resources")
    assert 170 not in nvml.limits()


def test_pool_mode_never_caps_the_pods_own_gpus(nvml: FakeNvml, tmp_path: Path) -> None:
    # A pool worker controls a remote node: NVML here would see the pool pod's host.
    node = Node("remote-0", tmp_path, mode=AgentMode.POOL)
    node.set(power_profile("remote-0", None, gpu_cap={"capWattsPerGpu": 150}))
    gpu = node.gpu()
    assert (gpu.backend, gpu.result) == (GpuBackend.NONE, Result.BLOCKED)
    assert gpu.message.startswith("host GPU control (NVML / AMD SMI) works only in daemonset")
    assert nvml.limits() == [400, 72, 700]


# -- the NodeTwin API ---------------------------------------------------------------------------


def test_nodetwin_gpu_cap_routed_by_environment_with_its_control_status(
    sim: PowerSim, tmp_path: Path
) -> None:
    from agentpool.config.env_routing import routing_from_env
    from agentpool.kube.status import twin_status_body
    from agentpool.sim.objects import node_twin

    telemetry, control = sim.telemetry_endpoint, sim.control_endpoint
    node = Node("gpu-0", tmp_path, routing=routing_from_env({
        "TELEMETRY_CPU_SOURCE": "http", "TELEMETRY_CPU_HTTP_ENDPOINT": telemetry,
        "TELEMETRY_CPU_CONTROL": "http", "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT": control,
        "TELEMETRY_GPU_CONTROL": "http", "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT": control,
    }))
    twin = node_twin("gpu-0", cap=150)
    twin["spec"]["gpu"] = {"powerCap": {"scope": "perGpu", "capPctOfMax": 60}}
    node.controller.update(NodeInputs("gpu-0", node_twin=twin, api=NodeApi.NODETWIN,
                                      gpu_allocatable=GPU_NODE))
    result = node.controller.tick()
    assert result.gpu is not None
    assert (result.gpu.backend, result.gpu.result) == (GpuBackend.HTTP, Result.APPLIED)
    assert sim.state("gpu-0").gpu_cap_watts == 240  # 60 % of each device's 400 W
    assert gpu_posts(sim, "gpu-0") == [240]
    body = twin_status_body(result)["controlStatus"]
    # Joulie's schema declares exactly these four keys under controlStatus.gpu.
    assert set(body["gpu"]) == {"backend", "result", "message", "updatedAt"}
    assert body["gpu"]["backend"] == "http"
    # A twin without a GPU cap writes no controlStatus.gpu: the operator's stays.
    plain = Node("cpu-0", tmp_path)
    plain.controller.update(
        NodeInputs("cpu-0", node_twin=node_twin("cpu-0", cap=150), api=NodeApi.NODETWIN)
    )
    assert "gpu" not in twin_status_body(plain.controller.tick())["controlStatus"]
