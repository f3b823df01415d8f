"""Joulie's current API on a real kube-apiserver: the chart's NodeTwin/NodeHardware CRDs,
and the real agent as the chart's ServiceAccount with ``joulie.api=nodetwin`` RBAC.

A real server prunes every field a CRD does not declare and enforces RBAC;
this is where a forgotten schema field or permission shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentpool.hardware.catalog import load_catalog
from agentpool.hardware.host import discover_host
from agentpool.hardware.nodehardware import GpuAccess, nodehardware_status
from agentpool.kube.nodehardware import node_object_name
from agentpool.results import GpuSeen
from agentpool.sim.apiserver.errors import ApiError
from agentpool.sim.cluster import SimCluster
from agentpool.sim.clusterapi import ClusterApi
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.objects import node_twin, operator_status
from agentpool.sim.polling import wait_until
from agentpool.sim.sysfs.trees import intel_2socket
from tests.envtest.accounts import as_agent


def without_cpu_control(status: dict[str, Any]) -> dict[str, Any]:
    """Everything but the agent's part. Compared as values: a real server re-encodes
    numbers (Go writes 65.0 back as 65), so its bytes differ from what was sent."""
    rest = {k: v for k, v in status.items() if k != "controlStatus"}
    control = {k: v for k, v in (status.get("controlStatus") or {}).items() if k != "cpu"}
    return {**rest, "controlStatus": control}


def test_the_crds_keep_what_the_operator_and_the_agent_write(
    envtest_server: EnvtestServer, tmp_path: Path
) -> None:
    with SimCluster(server=envtest_server, api="nodetwin") as cluster:
        admin = cluster.api
        cluster.add_node("real.node-0.example", cap=None, pct=60)
        name = node_object_name("real.node-0.example")
        twin = admin.get("nodetwins", name)
        assert twin["spec"]["cpu"] == {"packagePowerCapPctOfMax": 60}
        assert twin["status"] == operator_status("real.node-0.example")  # nothing pruned
        cpu = {"backend": "rapl", "result": "applied", "message": "m", "updatedAt": "t"}
        admin.patch("nodetwins", name, {"status": {"controlStatus": {"cpu": cpu}}},
                    subresource="status")
        after = admin.get("nodetwins", name)["status"]
        assert after["controlStatus"]["cpu"] == cpu
        operator = operator_status("real.node-0.example")
        assert without_cpu_control(after) == without_cpu_control(operator)
        # The NodeHardware content the agent computes for a 2-socket host with NVIDIA GPUs
        # seen through NVML loses nothing: every field is in the CRD's schema.
        seen = GpuSeen("nvidia", 4, "Fake GPU", 100.0, 400.5, 350.0, 300.0, True)
        with intel_2socket(tmp_path / "sys", min_watts=50.0):
            content = nodehardware_status(
                {"feature.node.kubernetes.io/cpu-model.name": "Xeon-Platinum-8480-Plus"},
                {"cpu": "64", "memory": "256Gi"}, {"nvidia.com/gpu": "4"},
                discover_host(tmp_path / "sys"), gpus=GpuAccess("host", seen=seen),
                catalog=load_catalog(str(Path(__file__).parents[1] / "hardware" / "catalog.yaml")),
            )
        assert content["gpu"]["capRangePerGpu"]["maxWatts"] == 400.5
        assert content["inventoryResolution"]["hardwareCatalogKey"] == {
            "cpu": "XEON_PLAT_8480P", "gpu": "FAKE_GPU_400"}
        admin.create("nodehardwares", {"metadata": {"name": name},
                                       "spec": {"nodeName": "real.node-0.example"}})
        stamped = {**content, "updatedAt": "2026-01-01T00:00:00Z",
                   "lastUpdated": "2026-01-01T00:00:00Z"}
        admin.patch("nodehardwares", name, {"status": stamped}, subresource="status")
        assert admin.get("nodehardwares", name)["status"] == stamped
        # The schema refuses what the operator could never mean.
        with pytest.raises(ApiError) as caught:
            admin.create("nodetwins", node_twin("bad", pct=0))
        assert caught.value.code == 422


def test_agent_with_nodetwin_rbac_enforces_reports_and_publishes(
    envtest_server: EnvtestServer, nodetwin_account: tuple[str, str], tmp_path: Path
) -> None:
    nodes = ["real-twin-0", "real-twin-1", "real-twin-2"]
    with SimCluster(server=envtest_server, api="nodetwin",
                    service_account=nodetwin_account) as cluster:
        for i, name in enumerate(nodes):
            cluster.add_node(name, cap=130.0 if i else None, pct=None if i else 40.0)
        before = {n: without_cpu_control(cluster.api.get("nodetwins", n)["status"])
                  for n in nodes}
        # The chart renders JOULIE_API=nodetwin with this RBAC: the agent gets it too.
        agent = cluster.start_agent({**cluster.routing_env(), "JOULIE_API": "nodetwin"})
        agent.wait_ready(60)
        wait_until(lambda: all(cluster.status(n).get("result") == "applied" for n in nodes), 60)
        assert cluster.power.state("real-twin-0").cap_watts == 100.0  # 40% of 250 W
        for step in range(3):
            for name in nodes:
                cluster.set_cap(name, 110.0 + step)
            wait_until(lambda s=step: all(f"{110 + s} W" in cluster.status(n)["message"]
                                          for n in nodes), 30)
        for name in nodes:
            status = cluster.api.get("nodetwins", name)["status"]
            assert without_cpu_control(status) == before[name]
            assert set(status["controlStatus"]["cpu"]) == {"backend", "result", "message",
                                                           "updatedAt"}
        wait_until(lambda: len(cluster.api.list("nodehardwares")) == len(nodes), 30)
        logs = agent.logs()
        assert "Joulie kinds watched (JOULIE_API=nodetwin): telemetryprofiles, nodetwins" in logs
        assert "HTTP 403" not in logs  # not a port number that contains 403
        assert agent.terminate() == 0
        # Least privilege: the agent's account may not touch the operator's desired state.
        sa: ClusterApi = as_agent(envtest_server, nodetwin_account, tmp_path)
        for attempt in (
            lambda: sa.patch("nodetwins", "real-twin-0", {"spec": {"profile": "performance"}}),
            lambda: sa.create("nodetwins", node_twin("x", cap=1)),
            lambda: sa.patch("nodehardwares", "real-twin-0", {"spec": {"nodeName": "x"}}),
            lambda: sa.patch("nodes", "real-twin-0", {"metadata": {"labels": {"x": "y"}}}),
        ):
            with pytest.raises(ApiError) as caught:
                attempt()
            assert caught.value.code == 403
