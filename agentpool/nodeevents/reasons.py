"""The reasons the agent records on a Node, each with its event type and action.

Reasons are CamelCase, like the kubelet's (``NodeReady``, ``Rebooted``): a
fixed vocabulary operators can filter on (``kubectl get events
--field-selector reason=PowerCapBlocked``). Each fact (type, action) is in
:data:`_TABLE` once; :class:`NodeEvent` reads it from there.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class EventType(enum.StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class Reason(enum.StrEnum):
    POWER_CAP_APPLIED = "PowerCapApplied"
    """A CPU power cap is in force (value, backend), where none was."""
    POWER_CAP_CHANGED = "PowerCapChanged"
    """The CPU power cap in force changed value or backend."""
    POWER_CAP_REMOVED = "PowerCapRemoved"
    """A cap was in force and now there is nothing to enforce."""
    POWER_CAP_BLOCKED = "PowerCapBlocked"
    """There is a CPU cap to enforce and no way to enforce it (why)."""
    POWER_CAP_ERROR = "PowerCapError"
    """Enforcing failed: a malformed resource (the field) or an endpoint (which)."""
    DVFS_PINNED_OVER_CAP = "DvfsPinnedOverCap"
    """DVFS throttles at 100% and power is still over the cap."""
    GPU_POWER_CAP_APPLIED = "GpuPowerCapApplied"
    """A GPU power cap is in force where none was."""
    GPU_POWER_CAP_CHANGED = "GpuPowerCapChanged"
    """The GPU power cap in force changed value or backend."""
    GPU_POWER_CAP_BLOCKED = "GpuPowerCapBlocked"
    """A GPU cap to enforce and no way to (no library, no GPU, pool pod)."""
    GPU_POWER_CAP_ERROR = "GpuPowerCapError"
    """Enforcing the GPU cap failed (malformed cap, endpoint)."""
    GPU_DEVICE_REFUSED = "GpuDeviceRefused"
    """One GPU refuses its power limit (not supported, no permission, lost)."""
    HOST_RESTORED = "HostRestored"
    """The host values found at start were put back when the node's controller stopped."""
    HOST_RESTORE_FAILED = "HostRestoreFailed"
    """They could not all be put back, or the worker did not confirm it."""
    NODE_TAKEN_OVER = "NodeTakenOver"
    """This pool pod took the node over from another one."""
    CONTROLLER_RESTARTING = "ControllerRestarting"
    """The node's worker died or hung and is restarted with backoff."""


@dataclass(frozen=True)
class _Meta:
    type: EventType
    action: str
    """events.k8s.io ``action``: what the agent did or failed to do (CamelCase too)."""


_N, _W = EventType.NORMAL, EventType.WARNING
_TABLE: dict[Reason, _Meta] = {
    Reason.POWER_CAP_APPLIED: _Meta(_N, "SetPowerCap"),
    Reason.POWER_CAP_CHANGED: _Meta(_N, "SetPowerCap"),
    Reason.POWER_CAP_REMOVED: _Meta(_N, "ReleasePowerCap"),
    Reason.POWER_CAP_BLOCKED: _Meta(_W, "SetPowerCap"),
    Reason.POWER_CAP_ERROR: _Meta(_W, "SetPowerCap"),
    Reason.DVFS_PINNED_OVER_CAP: _Meta(_W, "Throttle"),
    Reason.GPU_POWER_CAP_APPLIED: _Meta(_N, "SetGpuPowerCap"),
    Reason.GPU_POWER_CAP_CHANGED: _Meta(_N, "SetGpuPowerCap"),
    Reason.GPU_POWER_CAP_BLOCKED: _Meta(_W, "SetGpuPowerCap"),
    Reason.GPU_POWER_CAP_ERROR: _Meta(_W, "SetGpuPowerCap"),
    Reason.GPU_DEVICE_REFUSED: _Meta(_W, "SetGpuPowerCap"),
    Reason.HOST_RESTORED: _Meta(_N, "Restore"),
    Reason.HOST_RESTORE_FAILED: _Meta(_W, "Restore"),
    Reason.NODE_TAKEN_OVER: _Meta(_N, "TakeOver"),
    Reason.CONTROLLER_RESTARTING: _Meta(_W, "Restart"),
}

NOTE_LIMIT_BYTES = 1024
"""events.k8s.io/v1 refuses a longer ``note`` (1 kB, counted in bytes)."""


def _clip(note: str) -> str:
    raw = note.encode()
    if len(raw) <= NOTE_LIMIT_BYTES:
        return note
    return raw[: NOTE_LIMIT_BYTES - 3].decode(errors="ignore") + "..."


@dataclass(frozen=True)
class NodeEvent:
    """One occurrence of something worth telling about one node."""

    node: str
    reason: Reason
    note: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "note", _clip(self.note))

    @property
    def type(self) -> EventType:
        return _TABLE[self.reason].type

    @property
    def action(self) -> str:
        return _TABLE[self.reason].action
