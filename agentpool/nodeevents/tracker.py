"""From what the supervisor learns about a node to the events worth recording, on changes only.

A worker reports a :class:`~agentpool.results.TickResult` every
reconcile interval; nearly all of them say what the previous one said. The
tracker keeps, per node, the few facts events are about (the cap in force
and its backend, why it is blocked, whether DVFS is pinned, which GPUs
refuse) and returns events only when one of them changes, so a node in a
steady state produces none. Message details that move every tick (a DVFS
throttle step, a power reading) are not part of those facts.

Not thread safe: the supervisor loop owns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentpool.nodeevents.reasons import NodeEvent, Reason
from agentpool.results import Backend, GpuTickResult, Result, TickResult

PINNED_THROTTLE_PCT = 100
"""DVFS can do no more than this."""


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None


def _cpu_cap(result: TickResult) -> str | None:
    """The CPU cap the result enforces, for people: ``120 W``; None when it does not say."""
    watts = _number(result.observed.get("capWatts"))
    return None if watts is None else f"{watts:g} W"


def _gpu_cap(result: GpuTickResult) -> str | None:
    watts = _number(result.observed.get("capWattsPerGpu"))
    if watts is not None:
        return f"{watts:g} W per GPU"
    pct = _number(result.observed.get("capPctOfMax"))
    return None if pct is None else f"{pct:g}% of each GPU's maximum"


def _pinned(result: TickResult) -> bool:
    """DVFS at full throttle with the smoothed power still over the cap."""
    if result.backend is not Backend.DVFS or result.result is not Result.APPLIED:
        return False
    throttle = _number(result.observed.get("throttlePct"))
    cap = _number(result.observed.get("capWatts"))
    power = _number(result.observed.get("emaPowerWatts"))
    if power is None:
        power = _number(result.observed.get("observedPowerWatts"))
    if throttle is None or cap is None or power is None:
        return False
    return throttle >= PINNED_THROTTLE_PCT and power > cap


def _refusals(result: GpuTickResult) -> dict[str, str]:
    """Device -> why, for each host GPU that did not take its limit."""
    devices = result.observed.get("devices")
    refused: dict[str, str] = {}
    for device in devices if isinstance(devices, list) else ():
        if not isinstance(device, dict) or device.get("result") == Result.APPLIED.value:
            continue
        name = f"GPU {device.get('index')} ({device.get('id')})"
        refused[name] = f"{device.get('result')}: {device.get('reason') or 'refused'}"
    return refused


@dataclass
class _Node:
    cpu: tuple[str, ...] | None = None
    """The CPU facts of the last result: (applied, backend, cap) or (result, message)."""
    cpu_cap: str | None = None
    """Cap and backend in force, as the last applied event said it."""
    pinned: bool = False
    gpu: tuple[str, ...] | None = None
    gpu_cap: str | None = None
    refused: dict[str, str] = field(default_factory=dict)
    enforced: list[str] = field(default_factory=list)
    """What is in force on the host now, for the restore event (CPU, GPU)."""


class NodeEventTracker:
    """Per node, the facts events are about; each method returns the events of a change."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {}

    def forget(self, node: str) -> None:
        self._nodes.pop(node, None)

    def nodes(self) -> int:
        return len(self._nodes)

    def tick(self, node: str, result: TickResult) -> list[NodeEvent]:
        """A worker's result (every tick): events for what changed since the last one."""
        state = self._nodes.setdefault(node, _Node())
        events = self._cpu(node, state, result)
        if result.gpu is not None:
            events += self._gpu(node, state, result.gpu)
        state.enforced = [
            what for what in (state.cpu_cap, state.gpu_cap) if what is not None
        ]
        return events

    def _cpu(self, node: str, state: _Node, result: TickResult) -> list[NodeEvent]:
        events: list[NodeEvent] = []
        pinned = _pinned(result)
        if result.result is Result.APPLIED:
            cap = _cpu_cap(result)
            facts: tuple[str, ...] = (result.result.value, result.backend.value, cap or "")
            if facts != state.cpu:
                what = f"CPU power cap {cap}" if cap else "CPU power cap"
                in_force = f"{what} via {result.backend.value}"
                if state.cpu_cap is None:
                    note = f"{in_force} applied: {result.message}"
                    events.append(NodeEvent(node, Reason.POWER_CAP_APPLIED, note))
                else:
                    note = f"{in_force} (was {state.cpu_cap}): {result.message}"
                    events.append(NodeEvent(node, Reason.POWER_CAP_CHANGED, note))
                state.cpu_cap = in_force
        else:
            facts = (result.result.value, result.message)
            if facts != state.cpu:
                events += self._cpu_problem(node, state, result)
        if pinned and not state.pinned:
            cap = _cpu_cap(result) or "its cap"
            note = (
                f"DVFS throttles at {PINNED_THROTTLE_PCT}% and power is still over the cap of "
                f"{cap}: it cannot be held by frequency alone"
            )
            events.append(NodeEvent(node, Reason.DVFS_PINNED_OVER_CAP, note))
        state.cpu, state.pinned = facts, pinned
        return events

    def _cpu_problem(self, node: str, state: _Node, result: TickResult) -> list[NodeEvent]:
        if result.result is Result.BLOCKED:
            cap = _cpu_cap(result)
            what = f"CPU power cap {cap}" if cap else "CPU power cap"
            state.cpu_cap = None
            return [NodeEvent(node, Reason.POWER_CAP_BLOCKED, f"{what} blocked: {result.message}")]
        if result.result is Result.ERROR:
            state.cpu_cap = None
            return [NodeEvent(node, Reason.POWER_CAP_ERROR, result.message)]
        # Result.NONE: nothing to enforce. Worth saying only when something was.
        was, state.cpu_cap = state.cpu_cap, None
        if was is None:
            return []
        return [NodeEvent(node, Reason.POWER_CAP_REMOVED, f"{was} removed: {result.message}")]

    def _gpu(self, node: str, state: _Node, result: GpuTickResult) -> list[NodeEvent]:
        events: list[NodeEvent] = []
        refused = _refusals(result)
        for device, why in sorted(refused.items()):
            if state.refused.get(device) != why:
                note = f"{device} refuses the power cap: {why}"
                events.append(NodeEvent(node, Reason.GPU_DEVICE_REFUSED, note))
        state.refused = refused
        cap = _gpu_cap(result)
        backend = result.backend.value
        devices = result.observed.get("devices")
        some_capped = result.result is Result.APPLIED or (
            isinstance(devices, list) and len(refused) < len(devices)
        )
        if some_capped:
            facts: tuple[str, ...] = (Result.APPLIED.value, backend, cap or "")
        else:
            facts = (result.result.value, "" if refused else result.message)
        if facts == state.gpu:
            return events
        state.gpu = facts
        what = f"GPU power cap {cap}" if cap else "GPU power cap"
        if some_capped:
            in_force = f"{what} via {backend}"
            if state.gpu_cap is None:
                events.append(NodeEvent(
                    node, Reason.GPU_POWER_CAP_APPLIED, f"{in_force} applied: {result.message}"
                ))
            else:
                events.append(NodeEvent(
                    node, Reason.GPU_POWER_CAP_CHANGED,
                    f"{in_force} (was {state.gpu_cap}): {result.message}",
                ))
            state.gpu_cap = in_force
            return events
        state.gpu_cap = None
        if refused:
            return events  # every device said why, one event each
        if result.result is Result.BLOCKED:
            events.append(
                NodeEvent(node, Reason.GPU_POWER_CAP_BLOCKED, f"{what} blocked: {result.message}")
            )
        elif result.result is Result.ERROR:
            events.append(NodeEvent(node, Reason.GPU_POWER_CAP_ERROR, result.message))
        return events

    def restarting(self, node: str, cause: str, how: str) -> list[NodeEvent]:
        """The worker died or hung; a new one starts after its backoff."""
        state = self._nodes.setdefault(node, _Node())
        # What the new worker reports is news again (a crashed worker restores the host).
        state.cpu = state.gpu = None
        state.cpu_cap = state.gpu_cap = None
        state.pinned = False
        state.refused = {}
        note = f"node controller {cause} ({how}); restarting it with backoff"
        return [NodeEvent(node, Reason.CONTROLLER_RESTARTING, note)]

    def stopped(
        self, node: str, why: str, problems: tuple[str, ...] | None, restores: bool
    ) -> list[NodeEvent]:
        """The node's worker is gone for good (scope lost, agent stopping).

        ``problems``: what the worker could not restore; None when it did not
        say (killed). ``restores``: RESTORE_ON_EXIT is on and not simulate-only.
        Only a node with something in force gets an event.
        """
        state = self._nodes.pop(node, None)
        if state is None or not state.enforced or not restores:
            return []
        was = " and ".join(state.enforced)
        if problems is None:
            note = f"{why}: the worker did not confirm the host was restored (was {was})"
            return [NodeEvent(node, Reason.HOST_RESTORE_FAILED, note)]
        if problems:
            note = f"{why}: could not restore: {'; '.join(problems)} (was {was})"
            return [NodeEvent(node, Reason.HOST_RESTORE_FAILED, note)]
        note = f"{why}: host limits restored (was {was})"
        return [NodeEvent(node, Reason.HOST_RESTORED, note)]

    def taken_over(self, node: str, previous: str) -> list[NodeEvent]:
        """This pod starts controlling a node another pool pod claimed before."""
        note = f"taken over from pool pod {previous}"
        return [NodeEvent(node, Reason.NODE_TAKEN_OVER, note)]
