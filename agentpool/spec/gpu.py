"""GPU power caps as plain values: the desired cap, its parsing, and per-device resolution.

The same desired-state type serves both Joulie APIs: NodePowerProfile
``spec.gpu.powerCap`` (profile API) and NodeTwin ``spec.gpu.powerCap``
(current API) have one shape, so :func:`parse_gpu_cap` takes the
``powerCap`` block and the kind/name/path to name in errors. No I/O here:
backends (HTTP, NVML, AMD SMI) report :class:`DeviceLimits`, and
:func:`resolve_cap` turns the desired cap into one device's clamped watts.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentpool.errors import ProfileError, shown
from agentpool.spec.values import Result, finite_number


class GpuBackend(enum.StrEnum):
    """Values of ``status.control.gpu.backend`` (README "GPU power caps")."""

    NONE = "none"
    # nothing enforced (no cap, no GPU, or no way to enforce it)
    HTTP = "http"
    # the node's GPU control endpoint (Joulie simulator, BMC gateway)
    HOST_NVIDIA = "host-nvidia"
    # NVML on this host
    HOST_AMD = "host-amd"
    # AMD SMI on this host


@dataclass(frozen=True)
class GpuCap:
    """A node's desired GPU cap: watts per GPU, or a percent of each device's maximum.

    Exactly one is set; when the resource carries both, watts win (the parser
    keeps only them).
    """

    watts_per_gpu: float | None = None
    pct_of_max: float | None = None

    def describe(self) -> str:
        if self.watts_per_gpu is not None:
            return f"{self.watts_per_gpu:g} W per GPU"
        return f"{self.pct_of_max:g}% of each GPU's maximum"


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


def _number(value: Any) -> bool:
    # bool is an int subclass; JSON true is not a wattage. NaN/inf are not either.
    return finite_number(value) is not None


def parse_gpu_cap(
    spec: Mapping[str, Any], kind: str, name: str, path: str = "spec"
) -> GpuCap | None:
    """The ``gpu.powerCap`` of a NodePowerProfile or NodeTwin ``spec``; None when absent.

    Raises :class:`ProfileError` naming the exact field when malformed.
    """
    gpu = spec.get("gpu")
    if gpu is None:
        return None
    if not isinstance(gpu, Mapping):
        raise ProfileError(
            kind, name, f"{path}.gpu", f"expected an object, got {type(gpu).__name__}"
        )
    block = gpu.get("powerCap")
    if block is None:
        return None
    where = f"{path}.gpu.powerCap"
    if not isinstance(block, Mapping):
        raise ProfileError(kind, name, where, f"expected an object, got {type(block).__name__}")
    watts, pct = block.get("capWattsPerGpu"), block.get("capPctOfMax")
    if watts is not None and (not _number(watts) or watts <= 0):
        problem = f"{shown(watts)} must be a number > 0"
        raise ProfileError(kind, name, f"{where}.capWattsPerGpu", problem)
    if pct is not None and (not _number(pct) or not 0 < pct <= 100):
        problem = f"{shown(pct)} must be a number, 0 < pct <= 100"
        raise ProfileError(kind, name, f"{where}.capPctOfMax", problem)
    if watts is not None:
        return GpuCap(watts_per_gpu=float(watts))
    if pct is not None:
        return GpuCap(pct_of_max=float(pct))
    return None


@dataclass(frozen=True)
class GpuTickResult:
    """What one reconcile concluded about a node's GPUs; becomes ``control.gpu``."""

    backend: GpuBackend
    result: Result
    message: str
    observed: dict[str, Any] = field(default_factory=dict)

    def status_key(self) -> tuple[str, str, str]:
        return (self.backend.value, self.result.value, self.message)


GPU_OBSERVED_KEYS = (
    "capWattsPerGpu",
    "capPctOfMax",
    "targetWattsPerGpu",
    "requestedWattsPerGpu",
    "gpuCount",
    "powerWattsTotal",
    "controlState",
    "devices",
    "discovered",
)
"""Every key ``control.gpu.observed`` may carry; the ones a tick leaves out are nulled in
the merge patch, so a key observed once does not linger."""


def gpu_status(result: GpuTickResult, updated_at: str) -> dict[str, Any]:
    """``status.control.gpu`` (TelemetryProfile) or ``status.controlStatus.gpu`` (NodeTwin)."""
    observed: dict[str, Any] = dict.fromkeys(GPU_OBSERVED_KEYS)
    observed.update(result.observed)
    return {
        "backend": result.backend.value,
        "result": result.result.value,
        "message": result.message,
        "observed": observed,
        "updatedAt": updated_at,
    }
