"""What a host GPU backend (NVML, AMD SMI) reports, and the journal keys of its originals.

A host backend applies one :class:`~agentpool.resources.desired.GpuCap` to every
device it finds and answers one :class:`DeviceOutcome` per device, so one
device that refuses never stops the others. Its originals (the power limit
found before the first write) go into the node's
:class:`~agentpool.backends.sysfs.files.Originals` journal under a key of
:func:`journal_key`, beside the RAPL and cpufreq files, so a worker
restarted after a crash restores the true original.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agentpool.backends.gpucaps import DeviceLimits
from agentpool.resources.desired import GpuCap
from agentpool.results import GpuBackend, Result

JOURNAL_PREFIX = "gpu"


def journal_key(backend: str, device: str) -> Path:
    """``gpu/<backend>/<device id>``: a journal key, entered with :func:`journal_owner`'s
    tag so that each backend restores only its own entries."""
    return Path(JOURNAL_PREFIX, backend, device.replace("/", "_"))


def journal_owner(backend: str) -> str:
    """The owner tag of ``backend``'s journal entries (see ``Originals.remember``)."""
    return f"{JOURNAL_PREFIX}/{backend}"


def journaled(path: Path, backend: str) -> str | None:
    """The device id of a journal key of ``backend``, or None for any other entry."""
    parts = path.parts
    if len(parts) == 3 and parts[0] == JOURNAL_PREFIX and parts[1] == backend:
        return parts[2]
    return None


@dataclass(frozen=True)
class DeviceOutcome:
    """One device after one apply."""

    index: int
    ident: str
    """UUID (NVML) or the backend's stable id."""
    name: str
    limits: DeviceLimits | None
    target_watts: float | None
    """The cap asked of this device, before clamping (percent resolved)."""
    applied_watts: float | None
    """The limit read back after the write; None when it could not be read."""
    power_watts: float | None
    result: Result
    reason: str = ""
    """Why it is not applied (empty when applied)."""

    def as_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "index": self.index,
            "id": self.ident,
            "name": self.name,
            "result": self.result.value,
            "targetWatts": self.target_watts,
            "capWatts": self.applied_watts,
            "powerWatts": None if self.power_watts is None else round(self.power_watts, 3),
        }
        if self.limits is not None:
            doc["minWatts"], doc["maxWatts"] = self.limits.min_watts, self.limits.max_watts
            doc["defaultWatts"] = self.limits.default_watts
        if self.reason:
            doc["reason"] = self.reason
        return doc


@dataclass(frozen=True)
class DeviceInfo:
    """One device as found, nothing written (``agentpool inspect``)."""

    index: int
    ident: str
    name: str
    limits: DeviceLimits | None
    current_watts: float | None
    """The power limit in force now."""
    power_watts: float | None
    problem: str = ""
    """What could not be read, and why (empty: everything was)."""


class HostGpus(Protocol):
    """A host GPU backend. ``apply`` raises GpuUnavailableError when it cannot run at all."""

    kind: GpuBackend

    def apply(self, cap: GpuCap) -> list[DeviceOutcome]: ...

    def restore(self) -> list[str]: ...
