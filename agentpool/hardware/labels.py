"""Hardware hints from Node Feature Discovery labels.

They are only hints: on the host the sysfs tree is the truth. A node known to
be neither Intel nor AMD skips RAPL; an unknown vendor tries it.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentpool.spec.values import Hardware

_NFD = "feature.node.kubernetes.io/"
_VENDOR_LABELS = (_NFD + "cpu-vendor", _NFD + "cpu-model.vendor_id")
_CPU_VENDORS = {
    "amd": "AuthenticAMD",
    "authenticamd": "AuthenticAMD",
    "intel": "GenuineIntel",
    "genuineintel": "GenuineIntel",
}
_GPU_VENDORS = {"10de": "NVIDIA", "1002": "AMD", "8086": "Intel"}
_GPU_LABEL_FORMS = ("pci-{v}.present", "pci-0300_{v}.present", "pci-0302_{v}.present")


def normalise_cpu_vendor(raw: str) -> str:
    """``AMD``/``AuthenticAMD`` and ``intel``/``GenuineIntel``, any case, to the CPUID name."""
    return _CPU_VENDORS.get(raw.strip().lower(), raw.strip())


def discover(labels: Mapping[str, str]) -> Hardware:
    vendor: str | None = None
    for key in _VENDOR_LABELS:
        raw = labels.get(key, "").strip()
        if raw:
            vendor = normalise_cpu_vendor(raw)
            break
    gpus = tuple(
        name
        for code, name in _GPU_VENDORS.items()
        if any(labels.get(_NFD + form.format(v=code)) == "true" for form in _GPU_LABEL_FORMS)
    )
    return Hardware(cpu_vendor=vendor, gpu_vendors=gpus)
