"""Acceptance of GPU power caps (docs/resources.md): the real agent, a pool of HTTP nodes and a
host node.

The pool: two GPU nodes and a CPU-only node behind the power simulator
(HTTP), run by a pool agent; and one node with host controls, run by a
daemonset-mode agent (host GPUs are only ever capped on the node itself),
whose 4 GPUs are served by the fake libnvidia-ml.so.1 (tests/backends/
fake_nvml: it stands in for NVIDIA's driver, which cannot exist here), found
by the agent's worker through nvidia-ml-py's own lookup
(``LD_LIBRARY_PATH``). Everything else is real: the agent subprocesses,
their workers, the API emulator and HTTP.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.objects import MANAGED, power_profile, telemetry_profile, twin_name
from agentpool.sim.polling import wait_until
from agentpool.sim.power.gpu import GpuConfig
from tests.support.fake_nvml import FakeGpu, FakeNvml, build
from tests.support.joulie_chart import AGENT_ENV, pool_env

pytest.importorskip("pynvml", reason="nvidia-ml-py (agentpool[nvidia]) is not installed")

HOST_GPUS = [
    FakeGpu("GPU-aaaa", "Fake_A100", 100, 400, 400, power_w=390),
    FakeGpu("GPU-bbbb", "Fake_L4", 40, 72, 72, power_w=70),
    FakeGpu("GPU-cccc", "Fake_H100", 200, 700, 700, limit_w=650, power_w=640),
    FakeGpu("GPU-dddd", "Fake_T4", 150, 300, 300, power_w=280, fail="no_permission"),
]
ORIGINAL = [400.0, 72.0, 650.0, 300.0]


def gpu_status(cluster: SimCluster, node: str) -> dict[str, Any]:
    status = cluster.api.get("telemetryprofiles", node).get("status") or {}
    return dict((status.get("control") or {}).get("gpu") or {})


def agent_gpu_status(cluster: SimCluster, says: str) -> bool:
    """Whether gpu-0's NodeTwin status is the agent's, applied, saying ``says``."""
    twin = cluster.api.get("nodetwins", twin_name("gpu-0"))
    gpu = ((twin.get("status") or {}).get("controlStatus") or {}).get("gpu") or {}
    return gpu.get("result") == "applied" and says in gpu.get("message", "")


def add(cluster: SimCluster, node: str, gpu_cap: dict[str, Any], http: bool, gpus: int) -> None:
    labels = {MANAGED: "true", "control": "http" if http else "host"}
    # The device plugin's count: a GPU cap on a node with none allocatable is blocked.
    status = {"allocatable": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    cluster.api.create("nodes", {"metadata": {"name": node, "labels": labels}, "status": status})
    cluster.api.create("nodepowerprofiles", power_profile(node, 150, gpu_cap=gpu_cap))
    tp = telemetry_profile(node, cluster.power if http else None)
    cluster.api.create("telemetryprofiles", tp)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_pool_of_gpu_and_cpu_nodes_and_a_host_with_four_nvml_devices(tmp_path: Path) -> None:
    nvml = FakeNvml(build(tmp_path / "lib"), tmp_path / "nvml-state")
    nvml.write(HOST_GPUS)
    (tmp_path / "work").mkdir()
    with SimCluster(tmp_path / "work") as cluster:
        power = cluster.power
        power.add_node(
            "gpu-0", gpu=GpuConfig(count=4, min_watts=100, max_watts=400, default_watts=350)
        )
        power.add_node(
            "gpu-1", gpu=GpuConfig(count=8, min_watts=150, max_watts=700, default_watts=700)
        )
        power.add_node("cpu-0")
        add(cluster, "gpu-0", {"capWattsPerGpu": 250}, http=True, gpus=4)
        add(cluster, "gpu-1", {"capPctOfMax": 50}, http=True, gpus=8)
        add(cluster, "cpu-0", {"capWattsPerGpu": 250}, http=True, gpus=0)
        add(cluster, "host-0", {"capWattsPerGpu": 250}, http=False, gpus=4)
        # The pool agent runs the HTTP nodes; host-0 gets its own daemonset-mode agent. Both
        # could load the fake NVML: only the one on host-0 may use it.
        env = {**nvml.env(), "SYSFS_ROOT": str(tmp_path / "sys-{node}")}
        pool = cluster.start_agent(env={**env, "POOL_NODE_SELECTOR": "control=http"})
        agent = cluster.start_agent(env={**env, "AGENT_MODE": "daemonset", "NODE_NAME": "host-0"})
        pool.wait_ready()
        agent.wait_ready()

        # HTTP: watts, percent of each device's max, blocked without GPUs.
        wait_until(lambda: power.state("gpu-0").gpu_cap_watts == 250, 30)
        wait_until(lambda: power.state("gpu-1").gpu_cap_watts == 350, 30)
        wait_until(lambda: gpu_status(cluster, "cpu-0").get("result") == "blocked", 30)
        assert gpu_status(cluster, "cpu-0")["message"].startswith(
            "node has no allocatable GPU resources"
        )
        # The status is written after the simulator took the cap: wait for it too.
        wait_until(lambda: gpu_status(cluster, "gpu-1").get("result") == "applied", 30)
        assert gpu_status(cluster, "gpu-1")["backend"] == "http"

        # Host: every device at its clamped cap, except the one that refuses, which is named.
        wait_until(lambda: nvml.limits()[:3] == [250, 72, 250], 30)
        status = wait_until(lambda: gpu_status(cluster, "host-0") or None, 30)
        assert (status["backend"], status["result"]) == ("host-nvidia", "blocked")
        assert status["message"].startswith(
            "GPU 3 (GPU-dddd) blocked: NVML: Insufficient Permissions; 3 other GPU(s) capped"
        )
        assert nvml.limits()[3] == 300

        # The device accepts again; a percent cap lands within 1 W of pct x each max.
        nvml.set_fail(3, "none")
        cluster.api.patch(
            "nodepowerprofiles",
            "host-0",
            {"spec": {"gpu": {"powerCap": {"capWattsPerGpu": None, "capPctOfMax": 60}}}},
        )
        wait_until(lambda: gpu_status(cluster, "host-0").get("result") == "applied", 30)
        for limit, gpu in zip(nvml.limits(), HOST_GPUS, strict=True):
            assert limit is not None
            assert abs(limit - 0.6 * gpu.max_w) <= 1.0, (gpu.uuid, limit)
        metrics = agent.metrics()
        assert 'joulie_gpu_power_cap_watts{device="2",node="host-0"} 420.0' in metrics
        assert 'joulie_gpu_backend_mode{backend="host-nvidia",node="host-0"} 1.0' in metrics
        assert 'joulie_gpu_power_cap_watts{device="all",node="gpu-0"} 250.0' in pool.metrics()

        # SIGTERM: every device gets its original limit back, HTTP GPUs too.
        assert agent.terminate() == 0
        assert nvml.limits() == ORIGINAL, agent.logs()
        assert pool.terminate() == 0
        assert power.state("gpu-0").gpu_cap_watts == 350
        assert power.state("gpu-1").gpu_cap_watts == 700
        final = gpu_status(cluster, "host-0")
        assert (final["result"], final["message"]) == (
            "none",
            "agent stopped; host limits restored",
        )


def worker_pid(metrics: str, node: str) -> int | None:
    match = re.search(rf'agentpool_worker_pid{{node="{node}"}} (\d+)', metrics)
    return int(match.group(1)) if match else None


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_http_gpu_original_survives_a_worker_crash(tmp_path: Path) -> None:
    with SimCluster(tmp_path) as cluster:
        cluster.power.add_node("gpu-0", gpu=GpuConfig(count=2, default_watts=350))
        add(cluster, "gpu-0", {"capWattsPerGpu": 250}, http=True, gpus=2)
        agent = cluster.start_agent()
        agent.wait_ready()
        wait_until(lambda: cluster.power.state("gpu-0").gpu_cap_watts == 250, 30)
        first = wait_until(lambda: worker_pid(agent.metrics(), "gpu-0"), 30)
        os.kill(first, signal.SIGKILL)  # dies mid-way, with the GPUs at 250 W
        wait_until(lambda: worker_pid(agent.metrics(), "gpu-0") not in (None, first), 30)
        wait_until(lambda: gpu_status(cluster, "gpu-0").get("result") == "applied", 30)
        assert cluster.power.state("gpu-0").gpu_cap_watts == 250
        assert agent.terminate() == 0
        # The restarted worker saw 250 W, but the journal kept the true original.
        assert cluster.power.state("gpu-0").gpu_cap_watts == 350


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_nodetwin_percent_caps_over_http_find_the_maximum_joulies_simulator_does_not_send(
    tmp_path: Path,
) -> None:
    """Joulie's operator writes ``capPctOfMax``; its simulator's GPU telemetry has no per-GPU
    maximum: the hardware catalog's board power for the node's GPU model stands in, and the
    node's NodeHardware says what was found (range from the catalog, cap and count from the
    telemetry)."""
    catalog = Path(__file__).parents[1] / "hardware" / "catalog.yaml"
    with SimCluster(tmp_path, api="nodetwin") as cluster:
        joulies = GpuConfig(count=4, min_watts=100, max_watts=800, default_watts=700,
                            report_limits=False)
        cluster.power.add_node("gpu-0", gpu=joulies)
        cluster.add_node("gpu-0", cap=150, gpus=4,
                         labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
        cluster.api.patch("nodetwins", twin_name("gpu-0"),
                          {"spec": {"gpu": {"powerCap": {"capPctOfMax": 50}}}})
        agent = cluster.start_agent({
            **cluster.routing_env(),
            "TELEMETRY_GPU_CONTROL": "http",
            "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT": cluster.power.control_endpoint,
            "HARDWARE_CATALOG_PATH": str(catalog),
        })
        agent.wait_ready()
        wait_until(lambda: cluster.power.state("gpu-0").gpu_cap_watts == 350.0, 30)  # 50% x 700
        # The agent's own status (the operator's seeded one says "applied" too), written
        # after the cap, through the status writer.
        wait_until(lambda: agent_gpu_status(cluster, "-> 350 W per GPU over HTTP"), 20)

        def published_cap() -> dict[str, Any] | None:
            for obj in cluster.api.list("nodehardwares"):
                gpu: dict[str, Any] = (obj.get("status") or {}).get("gpu") or {}
                if gpu.get("currentCapWatts") == 350.0:
                    return gpu
            return None

        gpu = wait_until(published_cap, 20)
        assert gpu["model"] == "H100_SXM_80G"
        assert gpu["capRangePerGpu"] == {"minWatts": 200.0, "maxWatts": 700.0}
        assert (gpu["count"], gpu["currentCapWatts"], gpu["controlAvailable"]) == (4, 350.0, True)
        assert agent.terminate() == 0


@pytest.fixture(params=["emulator", "envtest"])
def server(request: pytest.FixtureRequest) -> EnvtestServer | None:
    return request.getfixturevalue("envtest_server") if request.param == "envtest" else None


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_joulies_defaults_without_a_catalog_publish_the_data_sheet_range_and_cap_by_it(
    tmp_path: Path, server: EnvtestServer | None
) -> None:
    """Joulie's chart mounts no hardware catalog by default, its operator writes GPU caps
    as a percent (``GPU_ECO_CAP_PCT_OF_MAX``: 60) and its simulator's GPU telemetry sends
    no range: the node's NodeHardware gets ``capRangePerGpu`` from agentpool's table of
    data sheets, ``heuristic``, saying so, and the percent cap resolves against it."""
    with SimCluster(tmp_path, api="nodetwin", server=server) as cluster:
        joulies = GpuConfig(count=8, min_watts=100, max_watts=800, default_watts=700,
                            report_limits=False)
        cluster.power.add_node("gpu-0", gpu=joulies)
        cluster.add_node("gpu-0", cap=150, gpus=8,
                         labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
        cluster.api.patch("nodetwins", twin_name("gpu-0"),
                          {"spec": {"gpu": {"powerCap": {"scope": "perGpu", "capPctOfMax": 60}}}})
        env = {
            # The pool StatefulSet of Joulie's chart with its default agent.env, so no
            # HARDWARE_CATALOG_PATH; but a 1 s interval instead of 20 s (a short test) and
            # SimCluster's free port instead of :8080 (which may be taken here).
            **pool_env(1, AGENT_ENV),
            "RECONCILE_INTERVAL": "1s",
            **cluster.routing_env(),
            "TELEMETRY_GPU_CONTROL": "http",
            "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT": cluster.power.control_endpoint,
        }
        del env["METRICS_ADDR"]
        agent = cluster.start_agent(env)
        agent.wait_ready()
        # 60% of the H100 SXM5's 700 W (its data sheet), within its 200 W minimum.
        wait_until(lambda: cluster.power.state("gpu-0").gpu_cap_watts == 420.0, 30)

        def published() -> dict[str, Any] | None:
            [hardware] = cluster.api.list("nodehardwares") or [None]
            gpu = ((hardware or {}).get("status") or {}).get("gpu") or {}
            return hardware if gpu.get("currentCapWatts") == 420.0 else None

        status = wait_until(published, 30)["status"]
        assert status["gpu"]["capRangePerGpu"] == {
            "minWatts": 200.0, "maxWatts": 700.0, "defaultWatts": 700.0}
        assert status["gpu"]["rawModel"] == "NVIDIA-H100-80GB-HBM3"
        assert "model" not in status["gpu"]
        assert status["quality"]["overall"] == "heuristic"
        [why] = [w for w in status["quality"]["warnings"] if "capRangePerGpu" in w]
        assert "built-in table: NVIDIA H100 SXM5 80GB" in why
        assert why.endswith("no hardware catalog is set")
        wait_until(lambda: agent_gpu_status(cluster, "-> 420 W per GPU over HTTP"), 20)
        assert agent.terminate() == 0
