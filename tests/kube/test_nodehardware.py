"""The NodeHardware publisher and the NodeTwin status writer against the API emulator.

Both are driven synchronously or with a simulated clock so that minutes of
steady state take no real time; the writes are counted by the emulator.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from agentpool.hardware.catalog import load_catalog
from agentpool.kube.api import KubeApi, Resource
from agentpool.kube.nodehardware import (
    HardwareInputs,
    HardwarePublisher,
    merge_diff,
    node_object_name,
)
from agentpool.kube.status import StatusWriter, twin_status_body
from agentpool.results import Backend, Result, TickResult
from agentpool.sim.apiserver import ApiEmulator
from agentpool.sim.objects import node_twin, operator_status
from agentpool.sim.polling import wait_until
from agentpool.sim.sysfs.trees import intel_2socket
from agentpool.tokenbucket import Budget
from tests.support.apiservers import kube_api_on
from tests.support.clock import Clock
from tests.support.fake_nvml import FakeGpu, FakeNvml, build, preload

CREATES = ("create", "nodehardwares")
PATCHES = ("patch", "nodehardwares/status")


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[ApiEmulator]:
    with ApiEmulator(shape="nodetwin") as emulator:
        emulator.write_kubeconfig(tmp_path / "kubeconfig")
        yield emulator


@pytest.fixture
def api(emu: ApiEmulator) -> Iterator[KubeApi]:
    with kube_api_on(emu) as client:
        yield client


def inputs(node: str, root: Path | None, **labels: str) -> HardwareInputs:
    return HardwareInputs(
        node, dict(labels), {"cpu": "64", "memory": "256Gi"}, {}, str(root) if root else None
    )


def test_created_once_then_zero_writes_in_five_minutes_of_steady_state(
    emu: ApiEmulator, api: KubeApi, tmp_path: Path
) -> None:
    clock = Clock()
    publisher = HardwarePublisher(api, clock=clock, rediscover_s=20.0)
    with intel_2socket(tmp_path / "a"), intel_2socket(tmp_path / "b", packages=1):
        publisher.offer(inputs("Node_A.example", tmp_path / "a"))
        publisher.offer(inputs("node-b", tmp_path / "b"))
        assert publisher.publish_due(clock.now) == 4  # a create and a status patch each
        counts = emu.request_counts()
        assert (counts[CREATES], counts[PATCHES]) == (2, 2)
        hw = emu.get("nodehardwares", "node-a-example")
        assert hw["spec"] == {"nodeName": "Node_A.example"}
        assert hw["status"]["cpu"]["capRange"]["maxWattsPerSocket"] == 165.0
        assert hw["status"]["cpu"]["landmarks"]["maxBoostMHz"] == 3500.0
        emu.reset_counters()
        # Five simulated minutes: 15 rediscoveries per node, the same offers again.
        for _ in range(30):
            clock.now += 10.0
            publisher.offer(inputs("Node_A.example", tmp_path / "a"))
            assert publisher.publish_due(clock.now) == 0
        assert emu.request_counts() == {}


def test_only_a_host_is_rediscovered_a_node_without_one_waits_for_new_inputs(
    emu: ApiEmulator, api: KubeApi, tmp_path: Path
) -> None:
    # An HTTP-controlled node's content follows from its inputs alone: looking at it
    # again every period (a pass over every node of a pool) would find nothing new.
    clock = Clock()
    publisher = HardwarePublisher(api, clock=clock, rediscover_s=20.0)
    publisher.offer(inputs("remote", None))
    assert publisher.publish_due(clock.now) == 2
    assert publisher.next_due() is None
    with intel_2socket(tmp_path / "a"):
        publisher.offer(inputs("local", tmp_path / "a"))
        assert publisher.next_due() == 0.0  # new: due at once
        assert publisher.publish_due(clock.now) == 2
        assert publisher.next_due() == clock.now + 20.0  # the host's rediscovery
    publisher.offer(inputs("remote", None, **{"feature.node.kubernetes.io/cpu-sockets": "2"}))
    assert publisher.next_due() == 0.0  # changed inputs: due again
    assert publisher.publish_due(clock.now) == 1
    assert emu.get("nodehardwares", "remote")["status"]["cpu"]["sockets"] == 2


def test_writes_keep_to_the_budget_and_the_rest_stay_due(emu: ApiEmulator, api: KubeApi) -> None:
    # 4 writes at once, then one every second: 2 nodes now (a create and a patch each),
    # the other 3 as tokens come, none lost, the API never sent more than the budget.
    clock = Clock()
    publisher = HardwarePublisher(api, clock=clock, budget=Budget(burst=4, refill_s=1.0))
    for n in range(5):
        publisher.offer(inputs(f"n{n}", None))
    assert publisher.publish_due(clock.now) == 4
    assert len(emu.list("nodehardwares")) == 2
    assert publisher.publish_due(clock.now) == 0  # no token left: nothing more now
    clock.now += 1.0
    assert publisher.publish_due(clock.now) == 2  # one token: one node, costing two
    clock.now += 1.0
    assert publisher.publish_due(clock.now) == 0  # the bucket is at 0 after going to -1
    clock.now += 10.0
    assert publisher.publish_due(clock.now) == 4  # full again: the last two nodes
    assert sorted(o["spec"]["nodeName"] for o in emu.list("nodehardwares")) == [
        f"n{n}" for n in range(5)]
    assert emu.request_counts() == {CREATES: 5, PATCHES: 5}


def test_a_change_is_one_patch_and_removed_keys_go_away(
    emu: ApiEmulator, api: KubeApi, tmp_path: Path
) -> None:
    clock = Clock()
    publisher = HardwarePublisher(api, clock=clock)
    with intel_2socket(tmp_path / "a"):
        publisher.offer(inputs("n", tmp_path / "a"))
        publisher.publish_due(clock.now)
        emu.reset_counters()
        # The node moves to HTTP control: nothing is measured any more.
        publisher.offer(inputs("n", None, **{"feature.node.kubernetes.io/cpu-sockets": "2"}))
        assert publisher.publish_due(clock.now) == 1
    assert emu.request_counts() == {PATCHES: 1}
    status = emu.get("nodehardwares", "n")["status"]
    assert "capRange" not in status["cpu"]
    assert "landmarks" not in status["cpu"]
    assert "not under host control: nothing measured on the host" in status["quality"]["warnings"]


def test_an_existing_object_is_adopted(emu: ApiEmulator, api: KubeApi) -> None:
    emu.create("nodehardwares", {"metadata": {"name": "n"}, "spec": {"nodeName": "n"}})
    publisher = HardwarePublisher(api, clock=Clock())
    publisher.offer(inputs("n", None))
    assert publisher.publish_due(1000.0) == 1
    assert emu.get("nodehardwares", "n")["status"]["cpu"]["totalCores"] == 64


@pytest.fixture
def nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """The host's GPUs through NVIDIA's binding and the fake libnvidia-ml.so.1 (a driver
    cannot exist here), loaded into this process as the supervisor's publisher loads it."""
    library = build(tmp_path / "lib")
    preload(library)
    fake = FakeNvml(library, tmp_path / "nvml-state")
    fake.write([FakeGpu("GPU-1", "Fake_GPU", 100, 400, 350, limit_w=300),
                FakeGpu("GPU-2", "Fake_GPU", 100, 400, 350)])
    monkeypatch.setenv("FAKE_NVML_STATE", str(fake.state))
    return fake


def test_host_gpus_are_read_through_nvml_and_their_changes_rediscovered(
    emu: ApiEmulator, api: KubeApi, nvml: FakeNvml
) -> None:
    pytest.importorskip("pynvml", reason="nvidia-ml-py (agentpool[nvidia]) is not installed")
    clock = Clock()
    catalog = load_catalog(str(Path(__file__).parents[1] / "hardware" / "catalog.yaml"))
    publisher = HardwarePublisher(api, clock=clock, rediscover_s=20.0, catalog=catalog)
    node = replace(inputs("gpu-host", None), gpu_control="host", gpu_host=True,
                   allocatable={"nvidia.com/gpu": "2"})
    publisher.offer(node)
    assert publisher.publish_due(clock.now) == 2
    gpu = emu.get("nodehardwares", "gpu-host")["status"]["gpu"]
    assert gpu == {
        "present": True, "vendor": "nvidia", "count": 2, "rawModel": "Fake GPU",
        "model": "FAKE_GPU_400",
        "capRangePerGpu": {"minWatts": 100.0, "maxWatts": 400.0, "defaultWatts": 350.0},
        "currentCapWatts": 300.0, "controlAvailable": True, "telemetryAvailable": True,
    }
    # Someone sets the limit by hand: the next rediscovery sees it, and writes once.
    nvml.write([FakeGpu("GPU-1", "Fake_GPU", 100, 400, 350, limit_w=250),
                FakeGpu("GPU-2", "Fake_GPU", 100, 400, 350)])
    assert publisher.next_due() == clock.now + 20.0
    clock.now += 20.0
    assert publisher.publish_due(clock.now) == 1
    assert emu.get("nodehardwares", "gpu-host")["status"]["gpu"]["currentCapWatts"] == 250.0
    # Without a driver: no GPU facts from the host, the Node's count stands, and why is said.
    nvml.set_driver(False)
    clock.now += 20.0
    assert publisher.publish_due(clock.now) == 1
    gpu = emu.get("nodehardwares", "gpu-host")["status"]["gpu"]
    assert (gpu["count"], gpu["controlAvailable"]) == (2, False)
    assert "capRangePerGpu" not in gpu
    assert gpu["warnings"][0].startswith("GPU caps cannot be set here: NVML unavailable")


def test_the_thread_publishes_offers(emu: ApiEmulator, api: KubeApi) -> None:
    publisher = HardwarePublisher(api)
    publisher.start()
    try:
        publisher.offer(inputs("n", None))
        wait_until(lambda: emu.list("nodehardwares") != [], 10)
    finally:
        publisher.stop()


def test_merge_diff_nulls_removed_keys() -> None:
    old = {"a": 1, "b": {"c": 2, "d": 3}, "e": [1]}
    new = {"a": 1, "b": {"c": 2}, "e": [2], "f": True}
    assert merge_diff(old, new) == {"b": {"d": None}, "e": [2], "f": True}
    assert merge_diff(None, new) == new
    assert merge_diff(new, new) == {}


def test_object_names_follow_the_operator() -> None:
    assert node_object_name("Worker_0.Example/x") == "worker-0-example-x"
    assert node_object_name("-a.") == "a"


def test_twin_status_writes_keep_every_operator_field_byte_for_byte(
    emu: ApiEmulator, api: KubeApi
) -> None:
    twin = emu.create("nodetwins", node_twin("w-0", cap=100))
    emu.patch("nodetwins", "w-0", {"status": operator_status("w-0")}, subresource="status")
    before = json.dumps(
        {k: v for k, v in emu.get("nodetwins", "w-0")["status"].items() if k != "controlStatus"},
        sort_keys=True,
    )
    gpu = json.dumps(emu.get("nodetwins", "w-0")["status"]["controlStatus"]["gpu"])
    writer = StatusWriter(
        api, heartbeat_s=3600, resource=Resource.NODE_TWINS, body=twin_status_body
    )
    writer.start()
    try:
        for i in range(12):
            result = TickResult(Backend.RAPL, Result.APPLIED, f"cap {100 + i} W", {"capWatts": i})
            assert writer.offer(twin["metadata"]["name"], "w-0", result)
            assert writer.flush(10)
            status = emu.get("nodetwins", "w-0")["status"]
            assert status["controlStatus"]["cpu"]["message"] == f"cap {100 + i} W"
            assert set(status["controlStatus"]["cpu"]) == {
                "backend",
                "result",
                "message",
                "updatedAt",
            }
            rest = {k: v for k, v in status.items() if k != "controlStatus"}
            assert json.dumps(rest, sort_keys=True) == before
            assert json.dumps(status["controlStatus"]["gpu"]) == gpu
    finally:
        writer.stop()
    assert emu.request_counts()[("patch", "nodetwins/status")] == 12  # the direct API is not HTTP
