"""The tracker: events only on changes of what events are about, never in a steady state."""

from __future__ import annotations

from typing import Any

from agentpool.nodeevents.reasons import EventType, NodeEvent, Reason
from agentpool.nodeevents.tracker import NodeEventTracker
from agentpool.results import Backend, GpuBackend, GpuTickResult, Result, TickResult


def applied(cap: float, backend: Backend = Backend.RAPL, message: str = "ok",
            **observed: Any) -> TickResult:
    return TickResult(backend, Result.APPLIED, message, {"capWatts": cap, **observed})


def reasons(events: list[NodeEvent]) -> list[Reason]:
    return [e.reason for e in events]


def test_a_steady_node_produces_one_event_then_none() -> None:
    tracker = NodeEventTracker()
    message = "RAPL PL1 120 W per package on 2 package zone(s)"
    first = tracker.tick("n", applied(120, message=message))
    assert reasons(first) == [Reason.POWER_CAP_APPLIED]
    assert first[0].note.startswith("CPU power cap 120 W via rapl applied: RAPL PL1 120 W")
    assert first[0].type is EventType.NORMAL
    for _ in range(100):
        assert tracker.tick("n", applied(120, message=message)) == []


def test_dvfs_steps_are_not_news_but_a_cap_change_and_a_backend_change_are() -> None:
    tracker = NodeEventTracker()
    tracker.tick("n", applied(120, Backend.DVFS, "DVFS throttle 10% for cap 120 W"))
    assert tracker.tick("n", applied(120, Backend.DVFS, "DVFS throttle 40% for cap 120 W")) == []
    changed = tracker.tick("n", applied(200, Backend.DVFS, "DVFS throttle 0% for cap 200 W"))
    assert reasons(changed) == [Reason.POWER_CAP_CHANGED]
    assert "CPU power cap 200 W via dvfs (was CPU power cap 120 W via dvfs)" in changed[0].note
    moved = tracker.tick("n", applied(200, Backend.RAPL))
    assert reasons(moved) == [Reason.POWER_CAP_CHANGED]
    assert "via rapl (was CPU power cap 200 W via dvfs)" in moved[0].note


def test_blocked_and_error_say_why_once_per_reason() -> None:
    tracker = NodeEventTracker()
    blocked = TickResult(Backend.NONE, Result.BLOCKED, "RAPL unavailable, no cpufreq", {
        "capWatts": 120})
    events = tracker.tick("n", blocked)
    assert reasons(events) == [Reason.POWER_CAP_BLOCKED]
    assert events[0].note == "CPU power cap 120 W blocked: RAPL unavailable, no cpufreq"
    assert events[0].type is EventType.WARNING
    assert tracker.tick("n", blocked) == []
    error = TickResult(Backend.NONE, Result.ERROR,
                       "NodePowerProfile n: spec.cpu.packagePowerCapWatts: -5 must be >= 1")
    events = tracker.tick("n", error)
    assert reasons(events) == [Reason.POWER_CAP_ERROR]
    assert "spec.cpu.packagePowerCapWatts" in events[0].note
    # Applied again after a problem: applied, not changed (nothing was in force).
    assert reasons(tracker.tick("n", applied(120))) == [Reason.POWER_CAP_APPLIED]


def test_a_removed_cap_is_said_once_and_nothing_to_enforce_from_the_start_is_silent() -> None:
    tracker = NodeEventTracker()
    nothing = TickResult(Backend.NONE, Result.NONE, "nothing to enforce: no NodePowerProfile")
    assert tracker.tick("n", nothing) == []
    tracker.tick("n", applied(120))
    removed = tracker.tick("n", nothing)
    assert reasons(removed) == [Reason.POWER_CAP_REMOVED]
    assert removed[0].note.startswith("CPU power cap 120 W via rapl removed: nothing to enforce")
    assert tracker.tick("n", nothing) == []


def test_dvfs_pinned_over_its_cap_is_a_warning_once_per_episode() -> None:
    tracker = NodeEventTracker()
    under = applied(120, Backend.DVFS, throttlePct=60, emaPowerWatts=118.0)
    pinned = applied(120, Backend.DVFS, "throttling: 168 W > cap 120 W, holding 100%",
                     throttlePct=100, emaPowerWatts=168.0)
    tracker.tick("n", under)
    events = tracker.tick("n", pinned)
    assert reasons(events) == [Reason.DVFS_PINNED_OVER_CAP]
    assert "120 W" in events[0].note
    assert tracker.tick("n", pinned) == []
    # At 100% but under the cap is not pinned over it.
    assert tracker.tick("n", applied(120, Backend.DVFS, throttlePct=100,
                                     emaPowerWatts=110.0)) == []
    assert reasons(tracker.tick("n", pinned)) == [Reason.DVFS_PINNED_OVER_CAP]


def gpu(result: Result, devices: list[dict[str, Any]] | None = None, cap: float = 250,
        message: str = "") -> GpuTickResult:
    observed: dict[str, Any] = {"capWattsPerGpu": cap}
    if devices is not None:
        observed["devices"] = devices
    return GpuTickResult(GpuBackend.HOST_NVIDIA, result, message, observed)


def device(index: int, result: str = "applied", reason: str = "") -> dict[str, Any]:
    return {"index": index, "id": f"GPU-{index}", "result": result, "reason": reason}


def test_a_refusing_gpu_is_named_and_the_others_capped() -> None:
    tracker = NodeEventTracker()
    refusing = gpu(Result.BLOCKED, [device(0), device(1, "blocked", "NVML: Not Supported")])
    events = tracker.tick("n", applied(120, gpu=None))
    events = tracker.tick("n", TickResult(Backend.RAPL, Result.APPLIED, "ok", {"capWatts": 120},
                                          gpu=refusing))
    assert reasons(events) == [Reason.GPU_DEVICE_REFUSED, Reason.GPU_POWER_CAP_APPLIED]
    assert events[0].note == "GPU 1 (GPU-1) refuses the power cap: blocked: NVML: Not Supported"
    assert "250 W per GPU via host-nvidia" in events[1].note
    same = TickResult(Backend.RAPL, Result.APPLIED, "ok", {"capWatts": 120}, gpu=refusing)
    assert tracker.tick("n", same) == []


def test_gpu_blocked_without_devices_says_why() -> None:
    tracker = NodeEventTracker()
    no_gpu = gpu(Result.BLOCKED, message="no GPU to cap on this node: NVML unavailable")
    result = TickResult(Backend.RAPL, Result.APPLIED, "ok", {"capWatts": 120}, gpu=no_gpu)
    events = tracker.tick("n", result)
    assert reasons(events) == [Reason.POWER_CAP_APPLIED, Reason.GPU_POWER_CAP_BLOCKED]
    assert tracker.tick("n", result) == []


def test_a_stop_restores_only_what_was_in_force() -> None:
    tracker = NodeEventTracker()
    tracker.tick("idle", TickResult(Backend.NONE, Result.NONE, "nothing to enforce"))
    assert tracker.stopped("idle", "agent stopped", (), restores=True) == []
    tracker.tick("n", applied(120))
    events = tracker.stopped("n", "agent stopped", (), restores=True)
    assert reasons(events) == [Reason.HOST_RESTORED]
    assert events[0].note == (
        "agent stopped: host limits restored (was CPU power cap 120 W via rapl)")
    tracker.tick("m", applied(90))
    failed = tracker.stopped("m", "node left this pod's scope", ("intel-rapl:0: EACCES",), True)
    assert reasons(failed) == [Reason.HOST_RESTORE_FAILED]
    assert "intel-rapl:0: EACCES" in failed[0].note
    tracker.tick("k", applied(90))
    assert reasons(tracker.stopped("k", "agent stopped", None, True)) == [
        Reason.HOST_RESTORE_FAILED]
    tracker.tick("s", applied(90))
    assert tracker.stopped("s", "agent stopped", (), restores=False) == []


def test_a_restart_makes_the_next_cap_news_again() -> None:
    tracker = NodeEventTracker()
    tracker.tick("n", applied(120))
    events = tracker.restarting("n", "died", "exited with code 70")
    assert reasons(events) == [Reason.CONTROLLER_RESTARTING]
    assert events[0].note == (
        "node controller died (exited with code 70); restarting it with backoff")
    assert reasons(tracker.tick("n", applied(120))) == [Reason.POWER_CAP_APPLIED]


def test_notes_are_clipped_to_what_the_api_accepts() -> None:
    long = NodeEvent("n", Reason.POWER_CAP_ERROR, "é" * 2000)
    assert len(long.note.encode()) <= 1024
    assert long.note.endswith("...")
