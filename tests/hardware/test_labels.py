"""Hardware hints from Node Feature Discovery labels (agentpool/hardware/labels.py)."""

from __future__ import annotations

import pytest

from agentpool.hardware.labels import discover, normalise_cpu_vendor
from agentpool.spec.values import Hardware

NFD = "feature.node.kubernetes.io/"
VENDOR = NFD + "cpu-vendor"
VENDOR_ID = NFD + "cpu-model.vendor_id"


@pytest.mark.parametrize(
    ("raw", "vendor"),
    [
        ("AMD", "AuthenticAMD"),
        ("amd", "AuthenticAMD"),
        ("AuthenticAMD", "AuthenticAMD"),
        ("AUTHENTICAMD", "AuthenticAMD"),
        ("authenticamd", "AuthenticAMD"),
        ("intel", "GenuineIntel"),
        ("Intel", "GenuineIntel"),
        ("INTEL", "GenuineIntel"),
        ("GenuineIntel", "GenuineIntel"),
        ("genuineintel", "GenuineIntel"),
        (" GenuineIntel ", "GenuineIntel"),
        ("ARM", "ARM"),
        ("HygonGenuine", "HygonGenuine"),
    ],
)
def test_vendor_normalisation(raw: str, vendor: str) -> None:
    assert normalise_cpu_vendor(raw) == vendor
    assert discover({VENDOR: raw}).cpu_vendor == vendor
    assert discover({VENDOR_ID: raw}).cpu_vendor == vendor


def test_cpu_vendor_label_wins_over_vendor_id() -> None:
    labels = {VENDOR: "AMD", VENDOR_ID: "GenuineIntel"}
    assert discover(labels).cpu_vendor == "AuthenticAMD"
    # An empty cpu-vendor is no answer: fall back to vendor_id.
    assert discover({VENDOR: " ", VENDOR_ID: "Intel"}).cpu_vendor == "GenuineIntel"
    assert discover({}).cpu_vendor is None


@pytest.mark.parametrize(
    "form", ["pci-{v}.present", "pci-0300_{v}.present", "pci-0302_{v}.present"]
)
@pytest.mark.parametrize(
    ("code", "vendor"), [("10de", "NVIDIA"), ("1002", "AMD"), ("8086", "Intel")]
)
def test_every_gpu_label_form(form: str, code: str, vendor: str) -> None:
    key = NFD + form.format(v=code)
    assert discover({key: "true"}).gpu_vendors == (vendor,)
    assert discover({key: "false"}).gpu_vendors == ()
    assert discover({key: "True"}).gpu_vendors == ()  # the contract says equal to "true"


def test_several_gpu_vendors_and_unrelated_pci_classes() -> None:
    labels = {
        NFD + "pci-0300_10de.present": "true",
        NFD + "pci-1002.present": "true",
        NFD + "pci-0200_8086.present": "true",  # a network card (class 0200) is no GPU
        NFD + "pci-0302_abcd.present": "true",  # unknown vendor
    }
    assert discover(labels).gpu_vendors == ("NVIDIA", "AMD")


@pytest.mark.parametrize(
    ("vendor", "capable"),
    [(None, True), ("GenuineIntel", True), ("AuthenticAMD", True), ("ARM", False)],
)
def test_rapl_capable_unless_known_to_be_neither_intel_nor_amd(
    vendor: str | None, capable: bool
) -> None:
    assert Hardware(cpu_vendor=vendor).rapl_capable is capable
