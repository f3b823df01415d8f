"""A node's NodeHardware ``status``, field for field as Joulie's operator and scheduler read it.

Joulie's Go type (``NodeHardware`` in its ``pkg/api``) and its agent decide
every value: ``gpu.vendor`` is ``nvidia``, ``amd`` or ``none``; ``cpu.model``
and ``gpu.model`` are the hardware catalog's keys (:mod:`.catalog`), the raw
names going to ``rawModel``; ``quality.overall`` says how well the catalog
resolved the node (``exact``: the CPU, and the GPUs if any, are catalog
models; ``heuristic``: only raw names; ``unavailable``: nothing), and
``inventoryResolution`` says it per part; ``cpu.capRange`` is the range every
package zone accepts (maximum: the lowest zone's PL1 maximum; minimum: the
highest zone's PL1 minimum); ``gpu.present`` is ``count > 0``.

Sources, in decreasing trust: what the host shows (sysfs,
:mod:`agentpool.hardware.host`, under host control; the GPUs through NVML or
AMD SMI, or a worker's GPU telemetry: a :class:`~agentpool.results.GpuSeen`),
the Node's capacity and allocatable (logical CPUs, memory, GPU resources as
Joulie counts them), its labels (:mod:`agentpool.hardware.labels`), and a
GPU product's board power range where nothing measured one: the catalog's,
else agentpool's own table of data sheets (:mod:`agentpool.hardware.boards`;
said in the warnings, and the node then is ``heuristic`` at best). A pure
function of its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentpool.hardware.boards import BoardPower, board_power
from agentpool.hardware.catalog import ENV as CATALOG_ENV
from agentpool.hardware.catalog import Catalog
from agentpool.hardware.host import HostFacts
from agentpool.hardware.labels import (
    GPU_PRODUCT_LABELS,
    NFD,
    SOCKET_LABELS,
    allocatable_gpus,
    discover,
    first_label,
    parse_quantity,
)
from agentpool.results import GpuSeen

VENDORS = ("nvidia", "amd")
"""``gpu.vendor`` values besides ``none`` (Joulie's agent writes no other)."""


@dataclass(frozen=True)
class GpuAccess:
    """How the agent reaches a node's GPUs, and what it saw of them."""

    control: str = "none"
    """Where GPU caps go: ``host`` (NVML / AMD SMI), ``http`` or ``none``."""
    telemetry: bool = False
    """GPU telemetry comes from an HTTP endpoint."""
    seen: GpuSeen | None = None
    """What NVML / AMD SMI or the GPU telemetry showed; None: nothing did."""
    problem: str | None = None
    """Why host GPU control cannot be used here (no library, a pool pod)."""


def _positive_int(raw: str | None) -> int | None:
    try:
        value = int(raw) if raw is not None else 0
    except ValueError:
        return None
    return value if value > 0 else None


def _unresolved(part: str, catalog: Catalog | None) -> str:
    if catalog is None:
        return f"{part} model not resolved: no hardware catalog ({CATALOG_ENV} unset or unusable)"
    return f"{part} model not recognized"  # Joulie's words


def _cap_range(host: HostFacts) -> dict[str, Any] | None:
    maxima = [z.max_w for z in host.zones if z.max_w is not None]
    if not maxima:
        return None
    cap_range: dict[str, Any] = {"type": "package", "maxWattsPerSocket": min(maxima)}
    minima = [z.min_w for z in host.zones if z.min_w is not None]
    if minima:
        cap_range["minWattsPerSocket"] = max(minima)
    return cap_range


def _cpu_status(
    labels: Mapping[str, str],
    capacity: Mapping[str, Any],
    host: HostFacts | None,
    catalog: Catalog | None,
) -> tuple[dict[str, Any], list[str]]:
    inferred: list[str] = []
    cpu: dict[str, Any] = {}
    vendor = discover(labels).cpu_vendor
    if vendor:
        cpu["vendor"] = vendor
    raw = first_label(labels, (NFD + "cpu-model.name", "beta.kubernetes.io/instance-type"))
    if raw:
        cpu["rawModel"] = raw
        model = catalog.match_cpu(raw) if catalog is not None else None
        if model is not None:
            cpu["model"] = model.key
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
    cap_range = _cap_range(host)
    if cap_range is not None:
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


def _gpu_vendor(labels: Mapping[str, str], seen: GpuSeen | None, allocated: str | None) -> str:
    candidates = [seen.vendor if seen is not None else None,
                  *discover(labels).gpu_vendors, allocated]
    for label, maker in GPU_PRODUCT_LABELS.items():
        if labels.get(label, "").strip():
            candidates.append(maker)
            break
    for vendor in candidates:
        if vendor is not None:
            # Joulie's agent knows NVIDIA and AMD only; any other GPU is "none" to it.
            return vendor.lower() if vendor.lower() in VENDORS else "none"
    return "none"


def _gpu_range(
    seen: GpuSeen | None, raw: str | None, catalog: Catalog | None
) -> tuple[dict[str, Any] | None, BoardPower | None]:
    """``capRangePerGpu``: what the host or the telemetry measured, else the board power of
    the product (the catalog's, else the built-in table's, which is returned too)."""
    if seen is not None and seen.max_watts:
        found = {"minWatts": seen.min_watts, "maxWatts": seen.max_watts,
                 "defaultWatts": seen.default_watts}
        return {k: v for k, v in found.items() if v is not None}, None
    board = board_power(raw, catalog)
    if board is None:
        return None, None
    found = {"minWatts": board.min_watts, "maxWatts": board.max_watts,
             "defaultWatts": board.default_watts}
    return {k: v for k, v in found.items() if v is not None}, board


FROM_TABLE = "gpu capRangePerGpu from agentpool's "
"""How the warning of a range taken from the built-in table begins: a reader of the
NodeHardware (the supervisor's view) tells it from a measured one by it."""


def _from_table(board: BoardPower, catalog: Catalog | None) -> str:
    """Why a range came from the built-in table, for the warnings."""
    unknown = "no hardware catalog is set" if catalog is None else "the hardware catalog lacks it"
    return (f"{FROM_TABLE}{board.source}, not measured: no GPU "
            f"library or telemetry reported a range and {unknown}")


def _gpu_status(
    labels: Mapping[str, str],
    allocatable: Mapping[str, Any],
    access: GpuAccess,
    catalog: Catalog | None,
) -> tuple[dict[str, Any], list[str]]:
    """The ``gpu`` part, and what ``quality.warnings`` must say of it (a range not measured)."""
    seen = access.seen
    allocated, allocated_vendor = allocatable_gpus(allocatable)
    count = seen.count if seen is not None and seen.count is not None else allocated or 0
    raw = (seen.model if seen is not None and seen.model else None) or first_label(
        labels, tuple(GPU_PRODUCT_LABELS)
    )
    gpu: dict[str, Any] = {
        "present": count > 0,
        "vendor": _gpu_vendor(labels, seen, allocated_vendor),
        "count": count,
    }
    warnings: list[str] = []
    notes: list[str] = []
    model = catalog.match_gpu(raw) if catalog is not None and raw else None
    if raw:
        gpu["rawModel"] = raw
    if model is not None:
        gpu["model"] = model.key
    if count:
        cap_range, board = _gpu_range(seen, raw, catalog)
        if cap_range is not None:
            gpu["capRangePerGpu"] = cap_range
        if board is not None and board.heuristic:
            # The model is no catalog's then: quality.overall is at best heuristic.
            notes.append(_from_table(board, catalog))
            warnings.append(notes[-1])
        if seen is not None and seen.cap_watts is not None:
            gpu["currentCapWatts"] = seen.cap_watts
    host_control = access.control == "host" and seen is not None and seen.control
    gpu["controlAvailable"] = bool(count) and (access.control == "http" or host_control)
    gpu["telemetryAvailable"] = bool(count) and (seen is not None or access.telemetry)
    if count and not gpu["controlAvailable"]:
        if access.control == "none":
            warnings.append("no GPU control for this node (GPU control routed to none)")
        elif access.problem:
            warnings.append(f"GPU caps cannot be set here: {access.problem}")
        else:
            warnings.append("GPU caps cannot be set here: no usable power limit range seen")
    if warnings:
        gpu["warnings"] = warnings
    return gpu, notes


def _overall(cpu: Mapping[str, Any], gpu: Mapping[str, Any]) -> str:
    """Joulie's ``overallQuality``: how well the catalog resolved the node."""
    if cpu.get("model") and (not gpu["count"] or gpu.get("model")):
        return "exact"
    if cpu.get("rawModel") or gpu.get("rawModel"):
        return "heuristic"
    return "unavailable"


def _exactness(part: Mapping[str, Any]) -> str:
    if part.get("model"):
        return "exact"
    return "proxy" if part.get("rawModel") else "generic"


def nodehardware_status(
    labels: Mapping[str, str],
    capacity: Mapping[str, Any],
    allocatable: Mapping[str, Any],
    host: HostFacts | None,
    http_control: bool = False,
    http_telemetry: bool = False,
    gpus: GpuAccess | None = None,
    catalog: Catalog | None = None,
) -> dict[str, Any]:
    """The NodeHardware ``status`` content (without its timestamps).

    ``host`` is None where the node is not under host control (HTTP or no
    control): then nothing is measured and the CPU facts come from labels;
    control and telemetry are available when an HTTP endpoint provides them.
    """
    cpu, inferred = _cpu_status(labels, capacity, host, catalog)
    if host is None:
        cpu["controlAvailable"] = http_control
        cpu["telemetryAvailable"] = http_telemetry
    gpu, gpu_notes = _gpu_status(labels, allocatable, gpus or GpuAccess(), catalog)
    status: dict[str, Any] = {"cpu": cpu, "gpu": gpu}
    memory = parse_quantity(capacity.get("memory"))
    if memory:
        status["memory"] = {"totalBytes": memory}
    keys = {part: status[part]["model"] for part in ("cpu", "gpu") if status[part].get("model")}
    status["inventoryResolution"] = {
        "hardwareCatalogKey": keys,
        "exactness": {"cpu": _exactness(cpu), "gpu": _exactness(gpu)},
    }
    # Joulie's warnings (models the catalog does not know), in the part and the quality.
    warnings: list[str] = []
    for name, part in (("cpu", cpu), ("gpu", gpu)):
        if part.get("rawModel") and not part.get("model") and (name == "cpu" or gpu["count"]):
            warning = _unresolved(name, catalog)
            part["warnings"] = [warning, *part.get("warnings", ())]
            warnings.append(warning)
    warnings += gpu_notes  # then what was only looked up
    warnings += inferred  # and how much was measured
    if host is None:
        warnings.append("not under host control: nothing measured on the host")
    elif "capRange" not in cpu or "landmarks" not in cpu:
        warnings.append("CPU cap range or frequency landmarks not found on the host")
    status["quality"] = {"overall": _overall(cpu, gpu), "warnings": warnings}
    status["capabilities"] = {
        "cpuControl": bool(cpu.get("controlAvailable")),
        "cpuTelemetry": bool(cpu.get("telemetryAvailable")),
        "gpuControl": gpu["controlAvailable"],
        "gpuTelemetry": gpu["telemetryAvailable"],
    }
    return status
