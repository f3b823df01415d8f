"""What one reconcile of a node concluded: the tick results a worker reports.

A node controller returns a :class:`TickResult` every tick (its CPU side and,
when the node has a GPU cap, a :class:`GpuTickResult`); the worker sends it over
its pipe, the supervisor turns it into the node's status, its Events and its
metrics. Plain values: no I/O, no Kubernetes types, nothing of the agent above them.

When a status changed (:meth:`TickResult.status_key`): its backend, result or
message, or anything in ``observed`` that says what was enforced (the cap,
GPU caps, a percent resolved to watts, the throttle, the limits read back).
The :data:`READINGS` in ``observed`` do not count, however much they move:
they change every tick (a node's load moves its power, and a DVFS node
swings around its cap by design), so any tolerance band would still rewrite
a pool's statuses tick after tick, and the metrics carry them at every
scrape. A status write for another reason, or its heartbeat, carries them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

READINGS = frozenset({
    "packagePowerWatts",
    # the host's package power this tick
    "observedPowerWatts",
    "emaPowerWatts",
    # what the DVFS controller read, and its moving average
    "powerWattsTotal",
    # the GPUs' power per their telemetry (HTTP)
    "powerWatts",
    # a host GPU's power (in each of ``devices``)
    "controlState",
    # the control endpoint's own account (``state`` of its answer), readings and all;
    # what the agent enforced is in its own keys beside it
})
"""Keys of ``observed``, at any depth, that are measurements, not what was enforced: a
change in them alone does not make a status change."""


def enforced(observed: Mapping[str, Any]) -> dict[str, Any]:
    """``observed`` without its :data:`READINGS` (in nested objects and lists too)."""
    return {k: _without_readings(v) for k, v in observed.items() if k not in READINGS}


def _without_readings(value: Any) -> Any:
    if isinstance(value, Mapping):
        return enforced(value)
    if isinstance(value, list):
        return [_without_readings(v) for v in value]
    return value


class Backend(enum.StrEnum):
    NONE = "none"
    RAPL = "rapl"
    DVFS = "dvfs"


class Result(enum.StrEnum):
    APPLIED = "applied"
    BLOCKED = "blocked"
    ERROR = "error"
    NONE = "none"
    """Nothing to enforce (no profile, or a profile without a cap)."""


class GpuBackend(enum.StrEnum):
    """Values of ``status.control.gpu.backend`` (docs/resources.md, "GPU power caps")."""

    NONE = "none"
    # nothing enforced (no cap, no GPU, or no way to enforce it)
    HTTP = "http"
    # the node's GPU control endpoint (Joulie simulator, BMC gateway)
    HOST_NVIDIA = "host-nvidia"
    # NVML on this host
    HOST_AMD = "host-amd"
    # AMD SMI on this host


@dataclass(frozen=True)
class GpuSeen:
    """What a GPU backend showed of a node's GPUs, for its NodeHardware (watts per GPU,
    of the first device where they differ; None: not shown)."""

    vendor: str | None = None
    """``nvidia`` or ``amd``."""
    count: int | None = None
    model: str | None = None
    min_watts: float | None = None
    max_watts: float | None = None
    default_watts: float | None = None
    cap_watts: float | None = None
    """The power limit in force."""
    control: bool = False
    """Caps can be set through this backend (its limits make a range)."""


@dataclass(frozen=True)
class GpuTickResult:
    """What one reconcile concluded about a node's GPUs; becomes ``control.gpu``."""

    backend: GpuBackend
    result: Result
    message: str
    observed: dict[str, Any] = field(default_factory=dict)
    seen: GpuSeen | None = None
    """The GPUs as the backend showed them (never written to the status: NodeHardware's)."""

    def status_key(self) -> tuple[object, ...]:
        return (self.backend.value, self.result.value, self.message, enforced(self.observed))


@dataclass(frozen=True)
class TickResult:
    """What one reconcile concluded; the supervisor turns it into the status."""

    backend: Backend
    result: Result
    message: str
    observed: dict[str, Any] = field(default_factory=dict)
    gpu: GpuTickResult | None = None
    """The GPU side of the same tick (``control.gpu``); None when the node has no GPU cap."""

    def status_key(self) -> tuple[object, ...]:
        """Status writes are skipped while this stays the same (heartbeat aside): what the
        status says but its readings (see the module's docstring)."""
        cpu = (self.backend.value, self.result.value, self.message, enforced(self.observed))
        return cpu if self.gpu is None else cpu + self.gpu.status_key()
