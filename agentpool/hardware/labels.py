"""What the Node object says about its hardware: NFD labels, GPU labels, allocatable.

Node Feature Discovery labels give the CPU vendor (``cpu-vendor``, else
``cpu-model.vendor_id``) and the GPU vendors (PCI ``pci-<v>.present``
labels); NVIDIA's GPU Feature Discovery and AMD's node labeller give GPU
products and counts; the device plugins' allocatable GPU resources give
counts (counted as Joulie counts them: any ``<domain>/gpu``, and
``gpu.intel.com/i915``). They are only hints: on the host, sysfs and NVML /
AMD SMI are the truth (:mod:`agentpool.hardware.host`). A node known to be
neither Intel nor AMD skips RAPL; an unknown vendor tries it. Of the GPU
facts only the allocatable count decides anything (no GPU allocatable: a GPU
cap is ``blocked``, as in Joulie); the rest is for reports (status, logs,
NodeHardware).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NFD = "feature.node.kubernetes.io/"
_VENDOR_LABELS = (NFD + "cpu-vendor", NFD + "cpu-model.vendor_id")
_CPU_VENDORS = {
    "amd": "AuthenticAMD",
    "authenticamd": "AuthenticAMD",
    "intel": "GenuineIntel",
    "genuineintel": "GenuineIntel",
}
_GPU_VENDORS = {"10de": "NVIDIA", "1002": "AMD", "8086": "Intel"}
_GPU_LABEL_FORMS = ("pci-{v}.present", "pci-0300_{v}.present", "pci-0302_{v}.present")
SOCKET_LABELS = (NFD + "cpu-sockets", "joulie.io/hw.cpu-sockets")
"""The CPU socket count, NFD's or Joulie's."""
GPU_RESOURCES = {"nvidia.com/gpu": "NVIDIA", "amd.com/gpu": "AMD", "gpu.intel.com/i915": "Intel"}
"""Extended resources of the device plugins whose vendor is known."""
GPU_PRODUCT_LABELS: dict[str, str | None] = {
    "joulie.io/gpu.product": None,
    "nvidia.com/gpu.product": "NVIDIA",
    "amd.com/gpu.product": "AMD",
    "amd.com/gpu.product-name": "AMD",
    "amd.com/gpu.family": "AMD",
}
"""Labels naming the GPU product, the first set one wins, and the vendor each implies:
Joulie's own, NVIDIA GPU Feature Discovery's, and the AMD node labeller's (whose releases
name it ``product`` or ``product-name``; ``family`` where neither is set)."""
_COUNT_LABELS = {"nvidia.com/gpu.count": "NVIDIA"}


@dataclass(frozen=True)
class Hardware:
    """What Node Feature Discovery labels say about the node."""

    cpu_vendor: str | None = None
    """``GenuineIntel``, ``AuthenticAMD``, another raw vendor id, or None if unknown."""
    gpu_vendors: tuple[str, ...] = ()
    """From NFD PCI labels: a hint for which host GPU library to try first."""

    @property
    def rapl_capable(self) -> bool:
        """False only when the node is known to be neither Intel nor AMD."""
        return self.cpu_vendor is None or self.cpu_vendor in ("GenuineIntel", "AuthenticAMD")



def normalise_cpu_vendor(raw: str) -> str:
    """``AMD``/``AuthenticAMD`` and ``intel``/``GenuineIntel``, any case, to the CPUID name."""
    return _CPU_VENDORS.get(raw.strip().lower(), raw.strip())


def discover(labels: Mapping[str, str]) -> Hardware:
    """The CPU vendor and GPU vendors the NFD labels say."""
    vendor: str | None = None
    for key in _VENDOR_LABELS:
        raw = labels.get(key, "").strip()
        if raw:
            vendor = normalise_cpu_vendor(raw)
            break
    gpus = tuple(
        name
        for code, name in _GPU_VENDORS.items()
        if any(labels.get(NFD + form.format(v=code)) == "true" for form in _GPU_LABEL_FORMS)
    )
    return Hardware(cpu_vendor=vendor, gpu_vendors=gpus)


def first_label(labels: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    """The first of ``keys`` set (not blank) in ``labels``, stripped."""
    for key in keys:
        value = labels.get(key, "").strip()
        if value:
            return value
    return None


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


def parse_quantity(raw: object) -> int | None:
    """A Kubernetes quantity (``64``, ``263855804Ki``, ``2G``) as an integer; None if not one."""
    match = _QUANTITY.match(str(raw).strip()) if raw is not None else None
    if match is None:
        return None
    number, suffix = match.groups()
    if suffix in ("m", "u"):
        return None  # fractions: not a count of anything here
    return int(float(number) * _FACTORS[suffix])


def is_gpu_resource(name: str) -> bool:
    """Whether an extended resource counts GPUs, as Joulie counts them: any ``<domain>/gpu``
    (NVIDIA's, AMD's, a vendor's own), and Intel's ``gpu.intel.com/i915``."""
    key = name.lower()
    return key.endswith("/gpu") or key == "gpu.intel.com/i915"


def gpu_allocatable(node: Mapping[str, Any]) -> dict[str, str]:
    """The GPU entries of a Node's ``status.allocatable`` (the only ones the agent keeps)."""
    status = node.get("status")
    allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(allocatable, Mapping):
        return {}
    return {str(k): str(v) for k, v in allocatable.items() if is_gpu_resource(str(k))}


def allocatable_gpus(allocatable: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """(GPUs the Node's allocatable counts, the vendor of the first resource with some).

    The count is None when no GPU resource is there at all (no device plugin),
    0 when one is there with nothing allocatable.
    """
    count: int | None = None
    vendor: str | None = None
    for resource, raw in allocatable.items():
        if not is_gpu_resource(resource):
            continue
        value = _count(str(raw))
        if value is None:
            continue
        count = (count or 0) + value
        if value and vendor is None:
            vendor = GPU_RESOURCES.get(resource.lower())
    return count, vendor


def _count(raw: str) -> int | None:
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


@dataclass(frozen=True)
class GpuFacts:
    count: int | None
    """GPUs the Node reports; None when it says nothing."""
    model: str | None
    vendor: str | None
    source: str
    """Where the count came from: allocatable, labels, or none."""

    def as_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "model": self.model,
            "vendor": self.vendor,
            "source": self.source,
        }


def discover_gpus(
    labels: Mapping[str, str], allocatable: Mapping[str, str], pci_vendors: tuple[str, ...] = ()
) -> GpuFacts:
    """GPU facts from a Node's allocatable and labels (``pci_vendors``: NFD's, as a hint)."""
    count, vendor = allocatable_gpus(allocatable)
    source = "none" if count is None else "allocatable"
    if count is None:
        for label, who in _COUNT_LABELS.items():
            value = _count(labels.get(label, ""))
            if value is not None:
                count, vendor, source = value, who, "labels"
    model = None
    for label, maker in GPU_PRODUCT_LABELS.items():
        if labels.get(label, "").strip():
            model, vendor = labels[label].strip(), vendor or maker
            break
    if vendor is None and pci_vendors:
        vendor = pci_vendors[0]
    return GpuFacts(count, model, vendor, source)
