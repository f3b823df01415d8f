"""The host's GPUs as NVML or AMD SMI show them, for the node's NodeHardware.

Read only, through the same libraries and getters as ``agentpool inspect``
(:mod:`agentpool.hardware.gpu_report`): the first library that finds GPUs
gives their count, the first device's name, power-limit range, default and
current limit (Joulie's agent reports the first device too). Only where the
agent runs on the node itself (daemonset mode): a pool pod's libraries would
show its own host's GPUs.
"""

from __future__ import annotations

from agentpool.backends.gpu.host import DeviceInfo
from agentpool.backends.gpucaps import limits_problem
from agentpool.errors import GpuUnavailableError
from agentpool.hardware.gpu_report import Surveyor, host_backends
from agentpool.results import GpuBackend, GpuSeen

VENDOR = {GpuBackend.HOST_NVIDIA: "nvidia", GpuBackend.HOST_AMD: "amd"}


def seen_devices(kind: GpuBackend, count: int, first: DeviceInfo) -> GpuSeen:
    limits = first.limits
    return GpuSeen(
        vendor=VENDOR.get(kind),
        count=count,
        model=first.name if first.name != "?" else None,
        min_watts=limits.min_watts if limits else None,
        max_watts=limits.max_watts if limits else None,
        default_watts=limits.default_watts if limits else None,
        cap_watts=first.current_watts,
        control=limits is not None and limits_problem(limits) is None,
    )


class HostGpuSurvey:
    """Asks the host's GPU libraries, keeping them between surveys. Not thread safe."""

    def __init__(self, backends: list[tuple[str, Surveyor]] | None = None) -> None:
        self._backends = backends

    def __call__(self, amd_first: bool = False) -> tuple[GpuSeen | None, str | None]:
        """(what the first library with GPUs shows, None), or (None, why none showed any)."""
        if self._backends is None:
            self._backends = host_backends()
        order = list(reversed(self._backends)) if amd_first else self._backends
        reasons: list[str] = []
        for label, backend in order:
            try:
                devices = backend.survey()
            except GpuUnavailableError as exc:
                reasons.append(str(exc))
                continue
            if devices:
                return seen_devices(backend.kind, len(devices), devices[0]), None
            reasons.append(f"{label}: no GPU found")
        return None, "; ".join(reasons)
