"""The Node event recorder, through the real client, against the emulator.

What the recorder sends (the Event's fields, a series patch for a repeat),
what it does when the server misbehaves (a 500 is retried, a 403 dropped and
counted, an Event expired on the server created again), and that it never
blocks the caller. The Events on a real server, as the chart's
ServiceAccount: ``tests/envtest/test_events.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentpool.kube.api import KubeApi, load_client
from agentpool.kube.events import NAMESPACE, REFUSED_PAUSE_S, EventRecorder, event_name
from agentpool.nodeevents.reasons import NodeEvent, Reason
from agentpool.sim.apiserver import ApiEmulator
from agentpool.sim.polling import wait_until
from tests.support.clock import Clock


@pytest.fixture
def recorder(api_emulator: ApiEmulator) -> Iterator[EventRecorder]:
    assert api_emulator.kubeconfig is not None
    api = KubeApi(load_client(str(api_emulator.kubeconfig)))
    rec = EventRecorder(api, "pool-3")
    rec.start()
    try:
        yield rec
    finally:
        rec.stop()
        api.close()


def events(emu: ApiEmulator) -> list[dict[str, Any]]:
    return emu.list("events", namespace=NAMESPACE)


APPLIED = NodeEvent("n-0", Reason.POWER_CAP_APPLIED, "CPU power cap 120 W via rapl applied: ok")


def test_an_event_as_kubectl_describe_node_expects_it(
    recorder: EventRecorder, api_emulator: ApiEmulator
) -> None:
    recorder.record(APPLIED)
    assert recorder.flush(10)
    (event,) = events(api_emulator)
    assert event["metadata"]["name"].startswith("n-0.")
    assert {k: event[k] for k in ("reportingController", "reportingInstance", "action",
                                  "reason", "type", "note", "regarding")} == {
        "reportingController": "agentpool", "reportingInstance": "pool-3",
        "action": "SetPowerCap", "reason": "PowerCapApplied", "type": "Normal",
        "note": APPLIED.note,
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": "n-0", "uid": "n-0"},
    }
    assert "series" not in event
    recorder.record(APPLIED)
    recorder.record(APPLIED)
    assert recorder.flush(10)
    (repeated,) = events(api_emulator)
    assert repeated["metadata"]["name"] == event["metadata"]["name"]
    assert repeated["series"]["count"] == 3
    assert repeated["series"]["lastObservedTime"] >= event["eventTime"]
    assert recorder.counts()["create"] == 1
    assert recorder.counts()["patch"] in (1, 2)  # the repeats may fold into one patch


def test_events_created_back_to_back_get_names_of_their_own(
    recorder: EventRecorder, api_emulator: ApiEmulator
) -> None:
    for i in range(30):
        recorder.record(NodeEvent("n-0", Reason.POWER_CAP_ERROR, f"error {i}"))
    assert recorder.flush(20)
    names = [e["metadata"]["name"] for e in events(api_emulator)]
    assert len(names) == len(set(names)) == 11  # 10 notes, then one combined
    assert recorder.counts()["failed"] == 0
    assert event_name("x" * 300, 2**60).endswith(f".{2**60:x}")
    assert len(event_name("x" * 300, 2**60)) == 253


def test_a_500_is_retried_and_a_403_dropped(
    recorder: EventRecorder, api_emulator: ApiEmulator
) -> None:
    api_emulator.inject(verb="create", resource="events", fault="500")
    recorder.record(APPLIED)
    wait_until(lambda: len(events(api_emulator)) == 1, 20)
    assert recorder.counts()["failed"] == 1
    api_emulator.inject(verb="create", resource="events", fault="403")
    recorder.record(NodeEvent("n-1", Reason.POWER_CAP_BLOCKED, "blocked: why"))
    wait_until(lambda: recorder.counts()["dropped"] == 1, 20)
    assert recorder.flush(5)
    assert [e["regarding"]["name"] for e in events(api_emulator)] == ["n-0"]


def test_an_event_the_server_no_longer_has_is_created_again(
    recorder: EventRecorder, api_emulator: ApiEmulator
) -> None:
    recorder.record(APPLIED)
    assert recorder.flush(10)
    (first,) = events(api_emulator)
    api_emulator.delete("events", first["metadata"]["name"], NAMESPACE)  # its TTL ran out
    recorder.record(APPLIED)
    wait_until(lambda: len(events(api_emulator)) == 1, 20)
    (again,) = events(api_emulator)
    assert again["metadata"]["name"] != first["metadata"]["name"]
    assert again["series"]["count"] == 2


def test_record_never_waits_for_a_hung_server(
    recorder: EventRecorder, api_emulator: ApiEmulator
) -> None:
    api_emulator.inject(verb="create", resource="events", fault="hang", times=None, delay=30)
    started = time.monotonic()
    for i in range(200):
        recorder.record(NodeEvent(f"n-{i}", Reason.POWER_CAP_APPLIED, "applied"))
    # The 200 calls take about 1 ms (measured, idle machine); the bound leaves far more than 5x.
    assert time.monotonic() - started < 1.0
    api_emulator.clear_faults()


def test_a_refusal_is_said_once_and_pauses_the_writes_until_one_goes_through(
    api_emulator: ApiEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    # Joulie's own agent ClusterRole grants no Events: every write would be refused.
    assert api_emulator.kubeconfig is not None
    api = KubeApi(load_client(str(api_emulator.kubeconfig)))
    clock = Clock()
    rec = EventRecorder(api, "pool-0", clock=clock)
    caplog.set_level(logging.INFO, logger="agentpool.kube.events")
    api_emulator.inject(verb="create", resource="events", fault="403", times=None)
    rec.start()
    try:
        rec.record(APPLIED)
        wait_until(lambda: rec.refused is not None, 20)
        assert rec.refused is not None
        assert "RBAC does not let this agent create and patch events.events.k8s.io" in rec.refused
        creates = api_emulator.request_counts()[("create", "events")]
        for i in range(20):
            rec.record(NodeEvent(f"n-{i}", Reason.POWER_CAP_APPLIED, "applied"))
        assert rec.flush(10)
        # Refused a moment ago: dropped without asking the server again.
        assert api_emulator.request_counts()[("create", "events")] == creates
        assert rec.counts()["dropped"] >= 20
        refusals = [r for r in caplog.records if "Node events are not recorded" in r.message]
        assert len(refusals) == 1
        # After the pause the next event is tried; RBAC now allows it: recorded again.
        api_emulator.clear_faults()
        clock.now += REFUSED_PAUSE_S
        rec.record(NodeEvent("n-late", Reason.POWER_CAP_APPLIED, "applied"))
        wait_until(lambda: rec.refused is None, 20)
        wait_until(lambda: [e["regarding"]["name"] for e in events(api_emulator)] == ["n-late"],
                   20)
        assert any("Node events are recorded again" in r.message for r in caplog.records)
    finally:
        rec.stop()
        api.close()
