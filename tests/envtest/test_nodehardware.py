"""NodeHardware on a real kube-apiserver, written as the chart's ServiceAccount.

What only a real server shows: how a merge patch and a replacement of
``status`` differ through the status subresource, what the CRD's schema
keeps, and the agent's own publishing as Joulie's operator and scheduler
wait for it (within two reconcile intervals of a node's first tick, in
simulate-only mode too).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agentpool.hardware.catalog import load_catalog
from agentpool.kube.api import KubeApi, load_client
from agentpool.kube.nodehardware import HardwareInputs, HardwarePublisher
from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from agentpool.sim.sysfs.trees import build_nodes, intel_2socket, read_int
from tests.support.agents import pl1_files, published_hardware

CATALOG_FILE = Path(__file__).parents[1] / "hardware" / "catalog.yaml"
NFD = "feature.node.kubernetes.io/"
# Label values: no brackets, spaces or '+' (the catalog has the alias).
XEON = {NFD + "cpu-model.name": "Xeon-Platinum-8480-Plus", NFD + "cpu-vendor": "Intel"}
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", NFD + "pci-10de.present": "true"}


def joulies_agent_status() -> dict[str, Any]:
    """A NodeHardware status as Joulie's agent writes one for a host it can measure (its
    ``upsertNodeHardwareStatus``): stated here as a fixture, values of our own."""
    return {
        "cpu": {
            "rawModel": "Xeon-Platinum-8480-Plus", "vendor": "GenuineIntel",
            "sockets": 2, "totalCores": 112, "coresPerSocket": 56,
            "driverFamily": "intel_pstate", "controlAvailable": True, "telemetryAvailable": True,
            "capRange": {"type": "package", "minWattsPerSocket": 110.5,
                         "maxWattsPerSocket": 350.5},
        },
        "gpu": {
            "rawModel": "NVIDIA-H100-80GB-HBM3", "vendor": "nvidia", "count": 8,
            "currentCapWatts": 0,
            "controlAvailable": False, "telemetryAvailable": True,
            "slicing": {"supported": True, "modes": ["dra-timeslice"]},
            "warnings": ["gpu model not recognized"],
        },
        "capabilities": {"cpuControl": True, "gpuControl": False, "cpuTelemetry": True,
                         "gpuTelemetry": True},
        "quality": {"overall": "heuristic", "warnings": ["cpu model not recognized"]},
        "network": {"linkClass": "100G"},
        "updatedAt": "2026-01-01T00:00:00Z",
    }


def test_the_first_write_replaces_what_another_agent_left_then_patches_only_changes(
    envtest_server: EnvtestServer, nodetwin_account: tuple[str, str], tmp_path: Path
) -> None:
    admin = envtest_server.api()
    admin.wipe(["nodehardwares"])
    admin.create("nodehardwares", {"metadata": {"name": "gpu-1"}, "spec": {"nodeName": "gpu-1"}})
    admin.patch("nodehardwares", "gpu-1", {"status": joulies_agent_status()},
                subresource="status")
    kubeconfig = envtest_server.service_account_kubeconfig(tmp_path / "kc", *nodetwin_account)
    api = KubeApi(load_client(str(kubeconfig)))
    try:
        publisher = HardwarePublisher(api, catalog=load_catalog(str(CATALOG_FILE)))
        # Moved to HTTP control: Joulie's stale host capRange must not survive (the agent
        # would turn a percent cap into RAPL watts with it, where Joulie throttles).
        node = HardwareInputs(
            "gpu-1", {**XEON, **H100}, {"cpu": "112"}, {"nvidia.com/gpu": "8"}, None,
            http_control=True, http_telemetry=True, gpu_control="http", gpu_telemetry=True,
        )
        publisher.offer(node)
        assert publisher.publish_due(time.monotonic()) == 1  # the object exists: no create
        status = admin.get("nodehardwares", "gpu-1")["status"]
        assert set(status) == {"cpu", "gpu", "inventoryResolution", "quality", "capabilities",
                               "updatedAt", "lastUpdated"}
        assert "capRange" not in status["cpu"]
        assert status["cpu"]["model"] == "XEON_PLAT_8480P"
        assert "slicing" not in status["gpu"]
        assert status["gpu"]["model"] == "H100_SXM_80G"
        assert status["gpu"]["capRangePerGpu"] == {"minWatts": 200, "maxWatts": 700}
        assert status["gpu"]["controlAvailable"] is True
        assert "warnings" not in status["gpu"]
        assert status["quality"]["overall"] == "exact"
        # Later writes are merge patches of what changed: a key another writer adds stays.
        admin.patch("nodehardwares", "gpu-1", {"status": {"network": {"linkClass": "25G"}}},
                    subresource="status")
        publisher.offer(HardwareInputs(
            "gpu-1", {**XEON, **H100}, {"cpu": "112"}, {"nvidia.com/gpu": "4"}, None,
            http_control=True, http_telemetry=True, gpu_control="http", gpu_telemetry=True,
        ))
        assert publisher.publish_due(time.monotonic()) == 1
        status = admin.get("nodehardwares", "gpu-1")["status"]
        assert status["gpu"]["count"] == 4
        assert status["network"] == {"linkClass": "25G"}
    finally:
        api.close()
        admin.wipe(["nodehardwares"])


def _host_nodes(cluster: SimCluster, names: list[str]) -> tuple[str, dict[str, Any]]:
    template = str(cluster.workdir / "sys" / "{node}")
    trees = build_nodes(template, names, intel_2socket, min_watts=50.0)
    for name in names:
        cluster.add_node(name, cap=100, http=False, labels=XEON)
    return template, trees


def _published_after_first_tick(
    cluster: SimCluster, names: list[str], interval_s: float
) -> dict[str, dict[str, Any]]:
    """Each node's NodeHardware, checked to appear within two intervals of its first tick
    (its first status: ticks, statuses and NodeHardware writes all wait for the last of a
    start's first ticks, so the status is when the NodeHardware may go out)."""
    wait_until(lambda: all(cluster.status(n).get("result") == "applied" for n in names), 60)
    ticked = time.monotonic()
    wait_until(lambda: len(published_hardware(cluster)) == len(names), 2 * interval_s)
    assert time.monotonic() - ticked <= 2 * interval_s
    return published_hardware(cluster)


def test_host_nodes_are_published_within_two_intervals_of_their_first_tick_simulated_or_not(
    envtest_server: EnvtestServer, nodetwin_account: tuple[str, str]
) -> None:
    names = ["hw-0", "hw-1", "hw-2"]
    interval = 2.0
    with SimCluster(server=envtest_server, api="nodetwin",
                    service_account=nodetwin_account) as cluster:
        template, trees = _host_nodes(cluster, names)
        env = {"JOULIE_API": "nodetwin", "SYSFS_ROOT": template, "RECONCILE_INTERVAL": "2s",
               "HARDWARE_CATALOG_PATH": str(CATALOG_FILE)}
        # Simulate-only: Joulie's agent publishes NodeHardware before its simulate-only check.
        agent = cluster.start_agent({**env, "SIMULATE_ONLY": "true"})
        agent.wait_ready(60)
        hardware = _published_after_first_tick(cluster, names, interval)
        assert all(read_int(f) != 100_000_000 for f in pl1_files(trees))  # nothing written
        status = hardware["hw-1"]["status"]
        assert status["cpu"]["model"] == "XEON_PLAT_8480P"  # the catalog's key
        assert status["cpu"]["capRange"] == {"type": "package", "minWattsPerSocket": 50,
                                             "maxWattsPerSocket": 165}
        assert status["quality"]["overall"] == "exact"
        assert status["gpu"]["present"] is False
        assert agent.terminate() == 0
        envtest_server.api().wipe(["nodehardwares"])
        for name in names:
            cluster.api.patch("nodetwins", name, {"status": {"controlStatus": None}},
                              subresource="status")
        agent = cluster.start_agent(env)
        agent.wait_ready(60)
        _published_after_first_tick(cluster, names, interval)
        assert all(read_int(f) == 100_000_000 for f in pl1_files(trees))  # 100 W per package
        assert agent.terminate() == 0
