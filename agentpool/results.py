"""What one reconcile of a node concluded: the tick results a worker reports.

A node controller returns a :class:`TickResult` every tick (its CPU side and,
when the node has a GPU cap, a :class:`GpuTickResult`); the worker sends it over
its pipe, the supervisor turns it into the node's status, its Events and its
metrics. Plain values: no I/O, no Kubernetes types, nothing of the agent above them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


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

    def status_key(self) -> tuple[str, str, str]:
        return (self.backend.value, self.result.value, self.message)


@dataclass(frozen=True)
class TickResult:
    """What one reconcile concluded; the supervisor turns it into the status."""

    backend: Backend
    result: Result
    message: str
    observed: dict[str, Any] = field(default_factory=dict)
    gpu: GpuTickResult | None = None
    """The GPU side of the same tick (``control.gpu``); None when the node has no GPU cap."""

    def status_key(self) -> tuple[str, ...]:
        """Status writes are skipped while this stays the same (heartbeat aside)."""
        cpu = (self.backend.value, self.result.value, self.message)
        return cpu if self.gpu is None else cpu + self.gpu.status_key()
