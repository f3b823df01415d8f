"""What a node's hardware is, for its NodeHardware object and for ``agentpool inspect``.

Three sources, in decreasing trust: what the host's sysfs shows (on host
control: RAPL package zones and their PL1 min/max, cpufreq policies and
their frequency landmarks, whether limits look writable and energy counters
readable), the Node object's capacity and allocatable (logical CPUs, memory,
``nvidia.com/gpu``/``amd.com/gpu``), and Node Feature Discovery labels (CPU
model, vendor and sockets; GPU vendors and product labels). ``quality.overall``
says how much was measured: ``full`` when the CPU cap range and frequency
landmarks were read from the host, ``partial`` when some facts are only
inferred from labels, ``unknown`` when nothing is known.

Pure functions of their inputs plus read-only sysfs access: nothing here
writes anywhere, which is what lets ``agentpool inspect`` promise so.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentpool.backends.sysfs.cpufreq import discover_policies
from agentpool.backends.sysfs.files import read_text, try_read_int
from agentpool.backends.sysfs.rapl import PackageZone, discover_package_zones
from agentpool.errors import SysfsError
from agentpool.hardware.labels import discover

NFD = "feature.node.kubernetes.io/"
_SOCKET_LABELS = (NFD + "cpu-sockets", "joulie.io/hw.cpu-sockets")
_GPU_PRODUCT_LABELS = (
    "joulie.io/gpu.product",
    "nvidia.com/gpu.product",
    "amd.com/gpu.product",
    "amd.com/gpu.family",
)
_CPU_FACTS = {"vendor", "rawModel", "sockets", "totalCores", "capRange", "landmarks"}
"""CPU keys that are facts about the hardware (not availability flags)."""
_GPU_RESOURCES = {"nvidia.com/gpu": "NVIDIA", "amd.com/gpu": "AMD"}
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)([KMGTPE]i?|[kmu]?)$")
_FACTORS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


@dataclass(frozen=True)
class ZoneFacts:
    label: str
    max_w: float | None
    min_w: float | None
    limit_w: float | None
    """The PL1 limit set now."""
    writable: bool
    """The PL1 file's permissions allow a write (a BIOS lock only shows when writing)."""


@dataclass(frozen=True)
class HostFacts:
    """What the host's sysfs shows about CPU power control."""

    zones: tuple[ZoneFacts, ...] = ()
    policies: int = 0
    driver: str | None = None
    min_mhz: float | None = None
    nominal_mhz: float | None = None
    max_mhz: float | None = None
    energy_readable: bool = False
    warnings: tuple[str, ...] = field(default=())

    @property
    def control_available(self) -> bool:
        return any(z.writable for z in self.zones) or self.policies > 0


def _watts(path: Path | None) -> float | None:
    value = try_read_int(path) if path is not None else None
    return value / 1_000_000 if value is not None and value > 0 else None


def _zone_facts(zone: PackageZone) -> ZoneFacts:
    writable = zone.limit_file is not None and os.access(zone.limit_file, os.W_OK)
    return ZoneFacts(
        zone.label, _watts(zone.max_file), _watts(zone.min_file), _watts(zone.limit_file), writable
    )


def _mhz(path: Path) -> float | None:
    value = try_read_int(path)
    return value / 1000 if value is not None and value > 0 else None


def discover_host(root: Path) -> HostFacts:
    """Read the host's powercap and cpufreq trees under ``root`` (a sysfs mount)."""
    zones = tuple(_zone_facts(z) for z in discover_package_zones(root))
    policies = discover_policies(root)
    warnings: list[str] = []
    if not zones:
        warnings.append("no RAPL package zone under powercap")
    elif not any(z.writable for z in zones):
        warnings.append("RAPL package limits are not writable")
    if zones and any(z.max_w is None for z in zones):
        warnings.append("a RAPL package zone reports no PL1 max_power_uw")
    if not policies:
        warnings.append("no cpufreq policy")
    driver = min_mhz = nominal = max_mhz = None
    if policies:
        first = policies[0].path
        try:
            driver = read_text(first / "scaling_driver")
        except SysfsError:
            driver = None
        min_mhz = min(p.cpuinfo_min for p in policies) / 1000
        max_mhz = max(p.cpuinfo_max for p in policies) / 1000
        nominal = _mhz(first / "base_frequency")  # intel_pstate exposes the nominal clock
    energy = any(
        try_read_int(z.path / "energy_uj") is not None for z in discover_package_zones(root)
    )
    return HostFacts(
        zones, len(policies), driver, min_mhz, nominal, max_mhz, energy, tuple(warnings)
    )


def parse_quantity(raw: object) -> int | None:
    """A Kubernetes quantity (``64``, ``263855804Ki``, ``2G``) as an integer; None if not one."""
    match = _QUANTITY.match(str(raw).strip()) if raw is not None else None
    if match is None:
        return None
    number, suffix = match.groups()
    if suffix in ("m", "u"):
        return None  # fractions: not a count of anything here
    return int(float(number) * _FACTORS[suffix])


def _first_label(labels: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = labels.get(key, "").strip()
        if value:
            return value
    return None


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
    model = _first_label(labels, (NFD + "cpu-model.name", "beta.kubernetes.io/instance-type"))
    if model:
        cpu["rawModel"] = cpu["model"] = model
    sockets = _positive_int(_first_label(labels, _SOCKET_LABELS))
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
    for resource, vendor in _GPU_RESOURCES.items():
        n = parse_quantity(allocatable.get(resource)) or 0
        if n and vendor not in vendors:
            vendors.append(vendor)
        count += n
    product = _first_label(labels, _GPU_PRODUCT_LABELS)
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
