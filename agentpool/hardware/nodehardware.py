"""A node's NodeHardware ``status``: its CPU, GPUs and memory, and how much was measured.

Three sources, in decreasing trust: what the host's sysfs shows
(:mod:`agentpool.hardware.host`, on host control), the Node object's
capacity and allocatable (logical CPUs, memory, ``nvidia.com/gpu`` /
``amd.com/gpu``), and its labels (:mod:`agentpool.hardware.labels`: CPU
model, vendor and sockets; GPU vendors and products). ``quality.overall``
says how much was measured: ``full`` when the CPU cap range and frequency
landmarks were read from the host, ``partial`` when some facts are only
inferred from labels, ``unknown`` when nothing is known. A pure function of
its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentpool.hardware.host import HostFacts
from agentpool.hardware.labels import (
    GPU_PRODUCT_LABELS,
    GPU_RESOURCES,
    NFD,
    SOCKET_LABELS,
    discover,
    first_label,
    parse_quantity,
)

_CPU_FACTS = {"vendor", "rawModel", "sockets", "totalCores", "capRange", "landmarks"}
"""CPU keys that are facts about the hardware (not availability flags)."""


def _positive_int(raw: str | None) -> int | None:
    try:
        value = int(raw) if raw is not None else 0
    except ValueError:
        return None
    return value if value > 0 else None


def _cpu_status(
    labels: Mapping[str, str], capacity: Mapping[str, Any], host: HostFacts | None
) -> tuple[dict[str, Any], list[str]]:
    inferred: list[str] = []
    cpu: dict[str, Any] = {}
    vendor = discover(labels).cpu_vendor
    if vendor:
        cpu["vendor"] = vendor
    model = first_label(labels, (NFD + "cpu-model.name", "beta.kubernetes.io/instance-type"))
    if model:
        cpu["rawModel"] = cpu["model"] = model
    sockets = _positive_int(first_label(labels, SOCKET_LABELS))
    if host is not None and host.zones:
        sockets = len(host.zones)  # measured: one package zone per socket
    elif sockets is not None:
        inferred.append("cpu sockets from node labels")
    cores = parse_quantity(capacity.get("cpu"))
    if sockets:
        cpu["sockets"] = sockets
    if cores:
        cpu["totalCores"] = cores
        if sockets:
            cpu["coresPerSocket"] = cores // sockets
    if host is None:
        return cpu, inferred
    if host.driver:
        cpu["driverFamily"] = host.driver
    maxima = [z.max_w for z in host.zones]
    if host.zones and all(m is not None for m in maxima):
        cap_range: dict[str, Any] = {"type": "package", "maxWattsPerSocket": max(maxima)}  # type: ignore[type-var]
        minima = [z.min_w for z in host.zones if z.min_w is not None]
        if minima:
            cap_range["minWattsPerSocket"] = min(minima)
        cpu["capRange"] = cap_range
    landmarks = {
        "minFreqMHz": host.min_mhz,
        "nominalFreqMHz": host.nominal_mhz,
        "maxBoostMHz": host.max_mhz,
    }
    if any(v is not None for v in landmarks.values()):
        cpu["landmarks"] = {k: v for k, v in landmarks.items() if v is not None}
    cpu["controlAvailable"] = host.control_available
    cpu["telemetryAvailable"] = host.energy_readable
    if host.warnings:
        cpu["warnings"] = list(host.warnings)
    return cpu, inferred


def _gpu_status(labels: Mapping[str, str], allocatable: Mapping[str, Any]) -> dict[str, Any]:
    vendors = list(discover(labels).gpu_vendors)
    count = 0
    for resource, vendor in GPU_RESOURCES.items():
        n = parse_quantity(allocatable.get(resource)) or 0
        if n and vendor not in vendors:
            vendors.append(vendor)
        count += n
    product = first_label(labels, tuple(GPU_PRODUCT_LABELS))
    gpu: dict[str, Any] = {"present": bool(count or vendors or product), "count": count}
    if vendors:
        gpu["vendor"] = vendors[0]
    if product:
        gpu["rawModel"] = gpu["model"] = product
    gpu["controlAvailable"] = False
    gpu["telemetryAvailable"] = False
    if gpu["present"]:
        gpu["warnings"] = ["GPU power caps are not measured or enforced by this agent"]
    return gpu


def nodehardware_status(
    labels: Mapping[str, str],
    capacity: Mapping[str, Any],
    allocatable: Mapping[str, Any],
    host: HostFacts | None,
    http_control: bool = False,
    http_telemetry: bool = False,
) -> dict[str, Any]:
    """The NodeHardware ``status`` content (without its timestamps).

    ``host`` is None where the node is not under host control (HTTP or no
    control): then nothing is measured and the CPU facts come from labels;
    control and telemetry are available when an HTTP endpoint provides them.
    """
    cpu, inferred = _cpu_status(labels, capacity, host)
    if host is None:
        cpu["controlAvailable"] = http_control
        cpu["telemetryAvailable"] = http_telemetry
    status: dict[str, Any] = {"cpu": cpu, "gpu": _gpu_status(labels, allocatable)}
    memory = parse_quantity(capacity.get("memory"))
    if memory:
        status["memory"] = {"totalBytes": memory}
    measured = "capRange" in cpu and "landmarks" in cpu
    warnings: list[str] = list(inferred)
    if host is None:
        warnings.append("not under host control: nothing measured on the host")
    elif not measured:
        warnings.append("CPU cap range or frequency landmarks not found on the host")
    if measured and not inferred:
        overall = "full"
    elif cpu.keys() & _CPU_FACTS or status.get("memory"):
        overall = "partial"
    else:
        overall = "unknown"
    status["quality"] = {"overall": overall, "warnings": warnings}
    status["capabilities"] = {
        "cpuControl": bool(cpu.get("controlAvailable")),
        "cpuTelemetry": bool(cpu.get("telemetryAvailable")),
        "gpuControl": False,
        "gpuTelemetry": False,
    }
    return status
