"""The GPUs of a simulated node: their limits, their cap, and power that settles to it.

A stand-in for the GPU side of Joulie's simulator (real GPUs cannot exist on
a CI box). Every GPU of a node is alike: ``count`` devices with one
[min, max] power-limit constraint and a default limit. The answer to
``gpu.set_power_cap_watts`` (docs/resources.md, "GPU power caps") clamps the asked cap to the
constraint, and the devices' power moves towards ``min(demand, cap)``
exponentially with time constant ``settle_s``, like a board whose power
controller needs a moment to follow a new limit. A node with ``count`` 0
answers ``blocked``. No I/O: the caller passes the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

GPU_ACTION = "gpu.set_power_cap_watts"


@dataclass(frozen=True)
class GpuConfig:
    """The GPUs of one simulated node. Validated on construction."""

    count: int = 0
    """Devices on the node; 0 is a CPU-only node."""
    min_watts: float = 100.0
    """Lowest power limit a device accepts."""
    max_watts: float = 400.0
    """Highest power limit a device accepts (also its draw at full load, uncapped)."""
    default_watts: float = 400.0
    """The limit a device has before anyone sets one."""
    idle_watts: float = 50.0
    """Draw of one device with no load."""
    load: float = 0.8
    """Utilisation in [0, 1]."""
    settle_s: float = 1.0
    """Time constant of the power following a new cap (0: at once)."""
    vendor: str = "nvidia"
    report_limits: bool = True
    """The telemetry carries each device's constraint; False answers as Joulie's simulator,
    which sends none (a percent cap then needs the maximum from elsewhere)."""

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"count must be >= 0, got {self.count}")
        if not 0.0 < self.min_watts <= self.default_watts <= self.max_watts:
            raise ValueError(
                "need 0 < min_watts <= default_watts <= max_watts, got "
                f"{self.min_watts}, {self.default_watts}, {self.max_watts}"
            )
        if not 0.0 <= self.idle_watts <= self.max_watts:
            raise ValueError(f"need 0 <= idle_watts <= max_watts, got {self.idle_watts}")
        if not 0.0 <= self.load <= 1.0:
            raise ValueError(f"load must be in [0, 1], got {self.load}")
        if self.settle_s < 0.0:
            raise ValueError(f"settle_s must be >= 0, got {self.settle_s}")


class GpuModel:
    """Mutable GPU state of one node. Not thread-safe: the simulator locks around it."""

    def __init__(self, config: GpuConfig, now: float) -> None:
        self.config = config
        self.target_watts: float | None = None
        """The cap last asked for (before clamping); None until one is asked."""
        self.applied_watts = config.default_watts
        self._from = self._goal()
        self._since = now
        self._energy_avg: float | None = None

    def _goal(self) -> float:
        c = self.config
        demand = c.idle_watts + c.load * (c.max_watts - c.idle_watts)
        return min(demand, self.applied_watts)

    def power_per_gpu(self, now: float) -> float:
        goal = self._goal()
        settle = self.config.settle_s
        if settle <= 0.0:
            return goal
        fraction = math.exp(-max(0.0, now - self._since) / settle)
        return goal + (self._from - goal) * fraction

    def set_cap(self, watts: float, now: float) -> float:
        """Clamp and apply a cap; returns the watts applied per device."""
        c = self.config
        self._from = self.power_per_gpu(now)
        self._since = now
        self.target_watts = watts
        self.applied_watts = min(c.max_watts, max(c.min_watts, watts))
        return self.applied_watts

    def reconfigure(self, config: GpuConfig, now: float) -> None:
        self._from = self.power_per_gpu(now)
        self._since = now
        if config.count != self.config.count or config.default_watts != self.config.default_watts:
            self.applied_watts = config.default_watts
        self.config = config

    def total_power(self, now: float) -> float:
        return self.config.count * self.power_per_gpu(now)

    def telemetry(self, now: float) -> dict[str, Any]:
        """The ``gpu`` object of a telemetry answer (docs/resources.md, "GPU power caps"), plus
        the limits."""
        c = self.config
        if c.count == 0:
            return {"present": False, "count": 0}
        total = self.total_power(now)
        # A slow average, as Joulie's simulator reports beside the instant reading.
        avg = total if self._energy_avg is None else 0.8 * self._energy_avg + 0.2 * total
        self._energy_avg = avg
        answer: dict[str, Any] = {
            "present": True,
            "vendor": c.vendor,
            "count": c.count,
            "powerWattsTotal": round(total, 3),
            "avgPowerWattsTotal": round(avg, 3),
            "capWattsPerGpuApplied": self.applied_watts,
            "capWattsPerGpuTarget": self.target_watts,
        }
        if c.report_limits:
            # Not in Joulie's simulator: the per-device constraint, so that a percent cap
            # can be resolved against each device's maximum over HTTP.
            answer["minCapWattsPerGpu"] = c.min_watts
            answer["maxCapWattsPerGpu"] = c.max_watts
            answer["defaultCapWattsPerGpu"] = c.default_watts
        return answer

    def state(self) -> dict[str, Any]:
        """What a control answer's ``state`` carries about the GPUs."""
        return {
            "gpuCount": self.config.count,
            "gpuCapWattsPerGpuApplied": self.applied_watts if self.config.count else None,
            "gpuCapWattsPerGpuTarget": self.target_watts,
        }
