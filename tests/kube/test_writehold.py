"""Enforce first, report after: the hold on status and NodeHardware writes."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from agentpool.kube.api import KubeApi, load_client
from agentpool.kube.status import StatusWriter
from agentpool.kube.writehold import POLL_S, WriteHold
from agentpool.results import Backend, Result, TickResult
from agentpool.sim.apiserver import ApiEmulator
from agentpool.sim.objects import telemetry_profile
from agentpool.sim.polling import wait_until
from tests.support.clock import Clock

PATCHES = ("patch", "telemetryprofiles/status")


def test_a_hold_lasts_until_released_and_never_past_its_bound() -> None:
    clock = Clock(100.0)
    hold = WriteHold(max_s=15.0, clock=clock)
    assert hold.remaining() == 0.0
    assert hold.wait_s() == 0.0
    hold.hold()
    assert hold.remaining() == 15.0
    assert hold.wait_s() == POLL_S
    clock.now += 10.0
    hold.hold()  # still starting: the bound counts from the first call
    assert hold.remaining() == 5.0
    clock.now += 6.0
    hold.hold()
    assert hold.remaining() == 0.0, "past the bound, writes go out however long starts take"
    hold.release()
    hold.hold()  # a new mass start: a new bound
    assert hold.remaining() == 15.0
    hold.release()
    assert hold.remaining() == 0.0


class CountingHold(WriteHold):
    """A hold that says when a writer has looked at it ``looks`` times."""

    def __init__(self, looks: int) -> None:
        super().__init__(max_s=60.0)
        self.looked = 0
        self.enough = threading.Event()
        self._looks = looks

    def wait_s(self) -> float:
        self.looked += 1
        if self.looked >= self._looks:
            self.enough.set()
        return super().wait_s()


@pytest.fixture
def api(api_emulator: ApiEmulator) -> Iterator[KubeApi]:
    assert api_emulator.kubeconfig is not None
    client = KubeApi(load_client(str(api_emulator.kubeconfig)))
    api_emulator.create("telemetryprofiles", telemetry_profile("node-a", None))
    yield client
    client.close()


def applied() -> TickResult:
    return TickResult(Backend.RAPL, Result.APPLIED, "RAPL PL1 120 W")


def held_writer(api: KubeApi, hold: WriteHold) -> StatusWriter:
    """A started writer, held, with node-a's status offered."""
    writer = StatusWriter(api, hold=hold)
    hold.hold()
    writer.start()
    assert writer.offer("node-a", "node-a", applied())
    return writer


def test_a_held_status_waits_for_the_release(api_emulator: ApiEmulator, api: KubeApi) -> None:
    hold = CountingHold(looks=3)
    writer = held_writer(api, hold)
    try:
        assert hold.enough.wait(30.0), "the writer never looked at the hold"
        assert api_emulator.request_counts().get(PATCHES, 0) == 0  # looked three times, held
        hold.release()
        wait_until(lambda: writer.writes == 1, 30.0)
        assert api_emulator.request_counts()[PATCHES] == 1
    finally:
        writer.stop()


def test_a_flush_writes_through_a_hold(api_emulator: ApiEmulator, api: KubeApi) -> None:
    writer = held_writer(api, WriteHold(max_s=60.0))
    try:
        assert writer.flush(30.0)  # shutdown: the final statuses go out held or not
        assert api_emulator.request_counts()[PATCHES] == 1
    finally:
        writer.stop()
