"""The coalescing status writer against the API emulator."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentpool.kube.api import KubeApi, load_client
from agentpool.kube.status import StatusWriter
from agentpool.results import Backend, Result, TickResult
from agentpool.sim.apiserver import ApiEmulator
from agentpool.sim.objects import telemetry_profile
from agentpool.sim.polling import wait_until
from tests.support.clock import Clock

PATCHES = ("patch", "telemetryprofiles/status")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def writer(api_emulator: ApiEmulator, clock: Clock) -> Iterator[StatusWriter]:
    assert api_emulator.kubeconfig is not None
    api = KubeApi(load_client(str(api_emulator.kubeconfig)))
    api_emulator.create("telemetryprofiles", telemetry_profile("node-a", None))
    w = StatusWriter(api, heartbeat_s=60.0, clock=clock, max_backoff_s=0.2)
    w.start()
    yield w
    w.stop()
    api.close()


def cpu_status(emu: ApiEmulator) -> dict[str, Any]:
    status: dict[str, Any] = emu.get("telemetryprofiles", "node-a").get("status") or {}
    return dict(status.get("control", {}).get("cpu", {}))


def applied(message: str = "RAPL PL1 120 W", **observed: Any) -> TickResult:
    return TickResult(Backend.RAPL, Result.APPLIED, message, dict(observed))


def test_writes_only_on_change_or_heartbeat(
    api_emulator: ApiEmulator, writer: StatusWriter, clock: Clock
) -> None:
    assert writer.offer("node-a", "node-a", applied(powerWatts=100))
    assert writer.flush(5)
    assert not writer.offer("node-a", "node-a", applied(powerWatts=101)), "same status key"
    clock.now += 30
    assert not writer.offer("node-a", "node-a", applied(powerWatts=102))
    assert writer.offer("node-a", "node-a", applied("RAPL PL1 90 W"))
    assert writer.flush(5)
    clock.now += 61
    assert writer.offer("node-a", "node-a", applied("RAPL PL1 90 W")), "heartbeat due"
    assert writer.flush(5)
    assert api_emulator.request_counts()[PATCHES] == 3
    status = cpu_status(api_emulator)
    assert (status["backend"], status["result"], status["message"]) == (
        "rapl",
        "applied",
        "RAPL PL1 90 W",
    )
    assert status["updatedAt"].endswith("Z")


def test_a_new_cap_is_written_even_in_the_same_words(
    api_emulator: ApiEmulator, writer: StatusWriter, clock: Clock
) -> None:
    """A gateway answers "ok" to every request: the message stays, the cap in force moves."""
    words = "rapl.set_power_cap_watts accepted"
    assert writer.offer("node-a", "node-a", applied(words, capWatts=120.0, packagePowerWatts=99))
    assert writer.flush(5)
    clock.now += 1
    assert not writer.offer(
        "node-a", "node-a", applied(words, capWatts=120.0, packagePowerWatts=104)
    ), "a reading alone"
    assert writer.offer("node-a", "node-a", applied(words, capWatts=140.0, packagePowerWatts=104))
    assert writer.flush(5)
    assert cpu_status(api_emulator)["observed"] == {"capWatts": 140.0, "packagePowerWatts": 104}
    assert api_emulator.request_counts()[PATCHES] == 2


def test_a_heartbeat_keeps_its_tick_of_the_grid(api_emulator: ApiEmulator, clock: Clock) -> None:
    """Offers come on the workers' 20 s grid, every other tick a second early (a fence
    renewal woke the worker) and otherwise half a second into the burst. The heartbeat
    is due on the tick 300 s after the offer it wrote, whichever kind of tick that is.
    Timed from the write and due only once the period was up, it waited for the next
    tick (320 s) and drifted onto the ticks without a renewal, every other tick."""
    assert api_emulator.kubeconfig is not None
    api = KubeApi(load_client(str(api_emulator.kubeconfig)))
    api_emulator.create("telemetryprofiles", telemetry_profile("node-a", None))
    w = StatusWriter(api, heartbeat_s=300.0, clock=clock)
    w.start()
    try:
        start, beats = clock.now, []
        for tick in range(100):
            clock.now = start + 20 * tick + (-1.0 if tick % 2 else 0.5)
            if w.offer("node-a", "node-a", applied()):
                beats.append(tick)
                assert w.flush(5)
    finally:
        w.stop()
        api.close()
    assert beats[0] == 0
    assert [b - a for a, b in itertools.pairwise(beats)] == [15] * (len(beats) - 1)
    assert api_emulator.request_counts()[PATCHES] == len(beats) == 7


@pytest.mark.parametrize("fault", ["500", "409"])
def test_failures_retry_and_the_last_result_wins(
    api_emulator: ApiEmulator, writer: StatusWriter, fault: str
) -> None:
    api_emulator.inject(
        verb="patch", resource="telemetryprofiles", subresource="status", fault=fault,
        times=None,
    )
    writer.offer("node-a", "node-a", applied("first"))
    wait_until(lambda: writer.failures >= 1, 5)
    writer.offer("node-a", "node-a", applied("second"))
    # Attempts go one at a time, each with the latest result: once two more have failed,
    # the one that may have been sending "first" when "second" came is over.
    failed = writer.failures
    wait_until(lambda: writer.failures >= failed + 2, 10)
    api_emulator.clear_faults()
    wait_until(lambda: cpu_status(api_emulator).get("message") == "second", 10)
    assert writer.flush(5)
    assert cpu_status(api_emulator)["message"] == "second"
    # Failed attempts, then exactly one successful write; "first" was never written.
    assert writer.writes == 1
    assert api_emulator.request_counts()[PATCHES] == writer.failures + 1


def test_a_failing_server_gets_one_write_at_a_time_then_every_pending_one(
    api_emulator: ApiEmulator, clock: Clock
) -> None:
    assert api_emulator.kubeconfig is not None
    api = KubeApi(load_client(str(api_emulator.kubeconfig)))
    names = [f"node-{i}" for i in range(20)]
    for name in names:
        api_emulator.create("telemetryprofiles", telemetry_profile(name, None))
    api_emulator.inject(verb="patch", resource="telemetryprofiles", subresource="status",
                        fault="503", times=None)
    writer = StatusWriter(api, heartbeat_s=60.0, clock=clock, max_backoff_s=0.2)
    writer.start()
    try:
        for name in names:
            writer.offer(name, name, applied(f"status of {name}"))
        wait_until(lambda: writer.failures >= len(names) + 2, 10)  # each once, then probes
        before = api_emulator.request_counts()[PATCHES]
        time.sleep(1.0)  # a window to count requests in, not a wait for something
        probes = api_emulator.request_counts()[PATCHES] - before
        # One write at a time, at least half the cap (0.1 s) apart; one per profile and
        # attempt (0.2 s apart) without the pause: about 100.
        assert probes <= 11
        api_emulator.clear_faults()
        assert writer.flush(5)
        for name in names:
            status = api_emulator.get("telemetryprofiles", name)["status"]["control"]["cpu"]
            assert status["message"] == f"status of {name}"
    finally:
        writer.stop()
        api.close()


def test_a_missing_profile_is_not_retried(api_emulator: ApiEmulator, writer: StatusWriter) -> None:
    writer.offer("no-such-profile", "node-x", applied())
    assert writer.flush(5)
    assert writer.failures == 1
    assert api_emulator.request_counts()[PATCHES] == 1


def test_observed_keys_that_went_away_are_removed(
    api_emulator: ApiEmulator, writer: StatusWriter
) -> None:
    writer.offer("node-a", "node-a", TickResult(Backend.DVFS, Result.APPLIED, "a", {"t": 10}))
    assert writer.flush(5)
    writer.offer("node-a", "node-a", TickResult(Backend.RAPL, Result.APPLIED, "b", {"cap": 9}))
    assert writer.flush(5)
    assert cpu_status(api_emulator)["observed"] == {"cap": 9}


def test_only_the_status_subresource_is_written(
    api_emulator: ApiEmulator, writer: StatusWriter
) -> None:
    before = api_emulator.get("telemetryprofiles", "node-a")
    writer.offer("node-a", "node-a", applied())
    assert writer.flush(5)
    after = api_emulator.get("telemetryprofiles", "node-a")
    assert after["spec"] == before["spec"]
    counts = api_emulator.request_counts()
    assert counts.get(("update", "telemetryprofiles"), 0) == 0
    assert counts.get(("patch", "telemetryprofiles"), 0) == 0


def test_an_unexpected_error_loses_that_write_not_the_writer(
    api_emulator: ApiEmulator, writer: StatusWriter
) -> None:
    # Whatever a write runs into, the writer thread goes on: a value the client cannot
    # serialise stands in for a bug in a write.
    assert writer.offer("node-a", "node-a", applied(bad=object()))
    wait_until(lambda: writer.failures == 1, 10)
    assert writer.offer("node-a", "node-a", applied("RAPL PL1 90 W"))
    wait_until(lambda: cpu_status(api_emulator).get("message") == "RAPL PL1 90 W", 10)


def test_a_deleted_profile_is_forgotten(api_emulator: ApiEmulator, writer: StatusWriter) -> None:
    # Memory bounded by the live objects: a 404 drops what the writer kept of a profile.
    assert writer.offer("node-a", "node-a", applied())
    wait_until(lambda: writer.writes == 1, 10)
    assert writer.remembered() == 1
    api_emulator.delete("telemetryprofiles", "node-a")
    assert writer.offer("node-a", "node-a", applied("RAPL PL1 90 W"))
    wait_until(lambda: writer.failures == 1, 10)
    wait_until(lambda: writer.remembered() == 0, 10)


def test_final_statuses_are_written_concurrently(api_emulator: ApiEmulator) -> None:
    assert api_emulator.kubeconfig is not None
    api = KubeApi(load_client(str(api_emulator.kubeconfig)))
    names = [f"node-{i}" for i in range(80)]
    for name in names:
        api_emulator.create("telemetryprofiles", telemetry_profile(name, None))
    # Every status write takes 0.25 s: 20 s one after the other.
    api_emulator.inject(verb="patch", fault="slow", delay=0.25, times=None)
    writer = StatusWriter(api, concurrency=8)
    writer.start()
    try:
        for name in names:
            writer.offer(name, name, applied(), force=True)
        started = time.monotonic()
        # Measured 2.8 s with 8 in flight on 2 busy cores; 14 s keeps 5x headroom and
        # still fails when writes go one at a time (20 s).
        assert writer.flush(timeout=14.0)
        print(f"\n80 status writes of 0.25 s each: {time.monotonic() - started:.2f}s")
        assert writer.writes == len(names)
    finally:
        writer.stop()
        api.close()
