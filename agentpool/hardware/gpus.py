"""What the Kubernetes Node says about its GPUs: count, model and vendor.

On the host, NVML or AMD SMI are the truth (the host backends report every
device and its name). Otherwise the Node tells: its allocatable
``nvidia.com/gpu`` / ``amd.com/gpu`` (device plugins), the product labels of
NVIDIA's GPU Feature Discovery (``nvidia.com/gpu.product``,
``nvidia.com/gpu.count``) and AMD's node labeller
(``amd.com/gpu.product-name``), and NFD's PCI vendor labels
(:mod:`agentpool.hardware.labels`). These facts are for reports (status, logs, a
future NodeHardware); they never decide a cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GPU_RESOURCES = {"nvidia.com/gpu": "NVIDIA", "amd.com/gpu": "AMD"}
"""Extended resources of the device plugins, and the vendor each means."""
_COUNT_LABELS = {"nvidia.com/gpu.count": "NVIDIA"}
_PRODUCT_LABELS = {"nvidia.com/gpu.product": "NVIDIA", "amd.com/gpu.product-name": "AMD"}


def gpu_allocatable(node: Mapping[str, Any]) -> dict[str, str]:
    """The GPU entries of a Node's ``status.allocatable`` (the only ones the agent keeps)."""
    status = node.get("status")
    allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(allocatable, Mapping):
        return {}
    return {k: str(v) for k, v in allocatable.items() if k in GPU_RESOURCES}


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
    count, vendor, source = None, None, "none"
    for resource, who in GPU_RESOURCES.items():
        value = _count(allocatable.get(resource, ""))
        if value is not None:
            count, source = (count or 0) + value, "allocatable"
            vendor = vendor or (who if value else None)
    if count is None:
        for label, who in _COUNT_LABELS.items():
            value = _count(labels.get(label, ""))
            if value is not None:
                count, vendor, source = value, who, "labels"
    model = None
    for label, who in _PRODUCT_LABELS.items():
        if labels.get(label):
            model, vendor = labels[label], vendor or who
            break
    if vendor is None and pci_vendors:
        vendor = pci_vendors[0]
    return GpuFacts(count, model, vendor, source)
