"""How a GPU cap lands on one device: percent of the device's own maximum, clamped to its range.

Shared by every way a GPU cap is enforced: the host bindings (:mod:`.gpu`, per
device), the HTTP control (:mod:`agentpool.controller.gpu`, per device of the
telemetry) and ``agentpool inspect`` (what would be written), so the three agree.
Never: reads or writes a device; the backends bring the limits they read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentpool.resources.desired import GpuCap


@dataclass(frozen=True)
class DeviceLimits:
    """What one device allows, in watts (NVML reports milliwatts; backends convert)."""

    min_watts: float
    max_watts: float
    default_watts: float | None = None


def limits_problem(limits: DeviceLimits) -> str | None:
    """Why a device's reported limits make no range a cap can be clamped into; None if they do.

    A driver that reports a maximum of 0, or a minimum above its maximum, has no
    limit the agent could set: the device is ``blocked``, never written.
    """
    low, high = limits.min_watts, limits.max_watts
    if not (math.isfinite(low) and math.isfinite(high)) or not 0 <= low <= high or high <= 0:
        return f"reports no usable power limit range (min {low:g} W, max {high:g} W)"
    return None


def resolve_cap(cap: GpuCap, limits: DeviceLimits) -> tuple[float, float]:
    """(target, clamped) watts for one device: percent against its own max, then clamped."""
    if cap.watts_per_gpu is not None:
        target = cap.watts_per_gpu
    else:
        assert cap.pct_of_max is not None
        target = limits.max_watts * cap.pct_of_max / 100.0
    return target, min(limits.max_watts, max(limits.min_watts, target))
