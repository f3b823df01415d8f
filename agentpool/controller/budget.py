"""How long one reconcile of a node may legally take: the timeouts of the requests it makes.

The supervisor takes a worker silent for longer than its longest legal tick
(plus slack) for hung, and kills it; a slow but valid endpoint must not get
there. The requests a tick makes are counted here, once, next to the code that
makes them, and their timeouts come from whatever routes the node: its
TelemetryProfile, else the ``TELEMETRY_*`` variables (either API, the same
:func:`~agentpool.resources.parse.cpu_routing` and
:func:`~agentpool.resources.parse.gpu_routing` the controller uses), CPU and GPU.

A routing that does not parse costs nothing: the controller reports the error
without sending anything. Host controls (sysfs writes, NVML calls) are not
counted: they take microseconds, and a driver that hangs is a hang.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentpool.errors import ProfileError
from agentpool.resources.parse import cpu_routing, gpu_routing
from agentpool.resources.routing import ControlType, HttpEndpoint, NodeRouting

CPU_READS_PER_TICK = 2
"""Telemetry reads: the power the DVFS fallback steers by, and the node's maximum for a
percent cap (until it is known)."""
CPU_WRITES_PER_TICK = 2
"""Control requests: the RAPL cap (refused, the DVFS throttle follows), or, when the cap
is removed, the throttle released and the RAPL cap raised to the maximum."""
GPU_READS_PER_TICK = 1
"""The GPU telemetry (limits, applied cap)."""
GPU_WRITES_PER_TICK = 1
"""The GPU cap, or the original cap given back."""


def _seconds(endpoint: HttpEndpoint | None, requests: int) -> float:
    return 0.0 if endpoint is None else requests * endpoint.timeout_s


def longest_tick_s(telemetry_profile: Mapping[str, Any] | None, env: NodeRouting) -> float:
    """The longest one tick of this node may spend on its HTTP endpoints, legally."""
    total = 0.0
    try:
        cpu = cpu_routing(telemetry_profile, env)
    except ProfileError:
        pass
    else:
        total += _seconds(cpu.source_http, CPU_READS_PER_TICK)
        total += _seconds(cpu.control_http, CPU_WRITES_PER_TICK)
    try:
        gpu = gpu_routing(telemetry_profile, env)
    except ProfileError:
        pass
    else:
        if gpu.control is ControlType.HTTP:
            total += _seconds(gpu.telemetry_http, GPU_READS_PER_TICK)
            total += _seconds(gpu.control_http, GPU_WRITES_PER_TICK)
    return total
