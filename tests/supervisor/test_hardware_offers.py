"""When the supervisor hands a node's NodeHardware inputs to the publisher.

The loop on a fake clock with stand-in workers (:mod:`tests.support.fakeworkers`), the
publisher real, writing to the API emulator: every running worker's node
gets its NodeHardware whether or not anything about it changed after the
worker started, once NodeHardware is served, and again when the worker's
GPU backend shows something new.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentpool.kube.api import KubeApi
from agentpool.kube.nodehardware import HardwarePublisher
from agentpool.results import GpuBackend, GpuSeen, GpuTickResult, Result
from agentpool.sim.apiserver import ApiEmulator
from tests.support.apiservers import kube_api_on
from tests.support.fakeworkers import Loop


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[ApiEmulator]:
    with ApiEmulator(shape="nodetwin") as emulator:
        emulator.write_kubeconfig(tmp_path / "kubeconfig")
        yield emulator


@pytest.fixture
def api(emu: ApiEmulator) -> Iterator[KubeApi]:
    with kube_api_on(emu) as client:
        yield client


def published(loop: Loop, publisher: HardwarePublisher, emu: ApiEmulator) -> list[str]:
    publisher.publish_due(loop.clock.now)
    return sorted(o["spec"]["nodeName"] for o in emu.list("nodehardwares"))


def test_a_worker_started_after_its_last_event_still_gets_its_nodehardware(
    emu: ApiEmulator, api: KubeApi
) -> None:
    publisher = HardwarePublisher(api)
    publisher.enabled = True
    with Loop(hardware=publisher) as loop:
        loop.synced = False
        loop.nodes("a", "b")  # every event arrives while the caches are still listing
        for _ in range(3):
            loop.turn()
        assert loop.launcher.started == []
        loop.synced = True
        loop.turn()  # the workers start, with no event in this turn
        assert sorted(w.node for w in loop.launcher.started) == ["a", "b"]
        assert published(loop, publisher, emu) == ["a", "b"]


def test_nodes_running_when_nodehardware_becomes_served_get_theirs(
    emu: ApiEmulator, api: KubeApi
) -> None:
    publisher = HardwarePublisher(api)
    with Loop(hardware=publisher) as loop:
        loop.nodes("a")
        loop.turn()
        [worker] = loop.launcher.started
        worker.report()
        loop.turn()
        assert published(loop, publisher, emu) == []  # not served: nothing offered
        publisher.enabled = True  # the CRD arrives: discovery starts its watch
        loop.turn()
        assert published(loop, publisher, emu) == ["a"]


def test_what_a_workers_gpu_backend_shows_reaches_the_nodehardware(
    emu: ApiEmulator, api: KubeApi
) -> None:
    publisher = HardwarePublisher(api)
    publisher.enabled = True
    with Loop(hardware=publisher) as loop:
        loop.nodes("g")
        loop.turn()
        [worker] = loop.launcher.started
        seen = GpuSeen("nvidia", 4, None, 100.0, 400.0, 350.0, 250.0, True)
        worker.report(gpu=GpuTickResult(GpuBackend.HTTP, Result.APPLIED, "capped", seen=seen))
        loop.turn()
        publisher.publish_due(loop.clock.now)
        gpu = emu.get("nodehardwares", "g")["status"]["gpu"]
        assert gpu["count"] == 4
        assert gpu["capRangePerGpu"] == {"minWatts": 100.0, "maxWatts": 400.0,
                                         "defaultWatts": 350.0}
        assert gpu["currentCapWatts"] == 250.0
        # A new cap: the next report carries it, and the object follows.
        lower = GpuSeen("nvidia", 4, None, 100.0, 400.0, 350.0, 200.0, True)
        worker.report(gpu=GpuTickResult(GpuBackend.HTTP, Result.APPLIED, "capped", seen=lower))
        loop.turn()
        publisher.publish_due(loop.clock.now)
        assert emu.get("nodehardwares", "g")["status"]["gpu"]["currentCapWatts"] == 200.0
