"""The GPU part of ``agentpool inspect``: each vendor library, its devices, and a cap's plan.

Asks NVML and AMD SMI through the vendors' bindings (the ``nvidia`` and
``amd`` extras) what the agent's host GPU control would see: per device its
power-limit range, default and current limit, and power draw; and, for a
given cap (watts per GPU, or a percent of each GPU's maximum), the limit the
agent would set on each device, clamped to that device's range exactly as
the controller does (:func:`agentpool.backends.gpucaps.resolve_cap`). Read only: the
bindings' getters, never a setter. A library that does not load says why.
"""

from __future__ import annotations

from typing import Protocol

from agentpool.backends.gpu.amdsmi import AmdSmiGpus
from agentpool.backends.gpu.host import DeviceInfo
from agentpool.backends.gpu.nvml import NvmlGpus
from agentpool.backends.gpucaps import resolve_cap
from agentpool.backends.sysfs.files import Originals
from agentpool.errors import GpuUnavailableError
from agentpool.resources.desired import GpuCap
from agentpool.results import GpuBackend


class Surveyor(Protocol):
    kind: GpuBackend

    def survey(self) -> list[DeviceInfo]: ...


def host_backends() -> list[tuple[str, Surveyor]]:
    """The libraries the agent's host GPU control uses, as it would build them."""
    return [("NVML", NvmlGpus(Originals())), ("AMD SMI", AmdSmiGpus(Originals()))]


def _w(value: float | None) -> str:
    return "?" if value is None else f"{value:g} W"


def _device(d: DeviceInfo) -> str:
    head = f"  GPU {d.index} {d.name} ({d.ident}): "
    parts = [f"limit {_w(d.current_watts)}"]
    if d.limits is not None:
        parts.append(f"(min {_w(d.limits.min_watts)}, max {_w(d.limits.max_watts)}, "
                     f"default {_w(d.limits.default_watts)})")
    if d.power_watts is not None:
        parts.append(f"drawing {d.power_watts:g} W")
    line = head + " ".join(parts)
    return f"{line}; {d.problem}" if d.problem else line


def _plan(cap: GpuCap, devices: list[DeviceInfo]) -> list[str]:
    lines = [f"GPU cap {cap.describe()}: the agent would set"]
    for d in devices:
        if d.limits is None:
            lines.append(f"  GPU {d.index}: nothing (its limits are unknown: {d.problem})")
            continue
        target, watts = resolve_cap(cap, d.limits)
        why = ""
        if cap.pct_of_max is not None:
            why = f" ({cap.pct_of_max:g}% of {_w(d.limits.max_watts)})"
        if watts > target:
            why += f", raised to its minimum from {target:g} W"
        elif watts < target:
            why += f", lowered to its maximum from {target:g} W"
        lines.append(f"  GPU {d.index}: {watts:g} W{why} (read back to check)")
    return lines


def gpu_lines(
    cap: GpuCap | None, backends: list[tuple[str, Surveyor]] | None = None
) -> list[str]:
    """The report's GPU lines; ``backends`` defaults to the real NVML and AMD SMI."""
    lines: list[str] = []
    found: list[DeviceInfo] = []
    for label, backend in backends if backends is not None else host_backends():
        try:
            devices = backend.survey()
        except GpuUnavailableError as exc:
            lines.append(f"GPUs through {label}: unavailable ({exc})")
            continue
        lines.append(f"GPUs through {label} ({backend.kind.value}): {len(devices)}")
        lines += [_device(d) for d in devices]
        if devices and not found:
            found = devices  # the agent caps through the first library that has GPUs
    if cap is not None:
        lines += _plan(cap, found) if found else [
            f"GPU cap {cap.describe()}: blocked, no GPU found to cap"]
    return lines
