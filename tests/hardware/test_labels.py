"""What the Node object says about its hardware: NFD hints, GPU labels and allocatable."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.config.settings import load_settings
from agentpool.hardware.labels import (
    GpuFacts,
    Hardware,
    discover,
    discover_gpus,
    gpu_allocatable,
    normalise_cpu_vendor,
)
from agentpool.kube.api import Resource
from agentpool.kube.informer import Change, Relisted
from agentpool.supervisor.clusterview import ClusterView

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


def node(name: str, allocatable: dict[str, str], **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"joulie.io/managed": "true", **labels}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", **allocatable}},
    }


def test_allocatable_keeps_only_gpu_resources() -> None:
    obj = node("a", {"nvidia.com/gpu": "8", "example.com/fpga": "1"})
    assert gpu_allocatable(obj) == {"nvidia.com/gpu": "8"}
    assert gpu_allocatable({"metadata": {"name": "b"}}) == {}
    assert gpu_allocatable({"status": {"allocatable": "junk"}}) == {}


@pytest.mark.parametrize(
    ("labels", "allocatable", "nfd", "facts"),
    [
        (
            {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            {"nvidia.com/gpu": "8"},
            (),
            GpuFacts(8, "NVIDIA-H100-80GB-HBM3", "NVIDIA", "allocatable"),
        ),
        ({}, {"amd.com/gpu": "4"}, (), GpuFacts(4, None, "AMD", "allocatable")),
        (
            {"amd.com/gpu.product-name": "AMD_Instinct_MI300X"},
            {},
            ("AMD",),
            GpuFacts(None, "AMD_Instinct_MI300X", "AMD", "none"),
        ),
        ({"nvidia.com/gpu.count": "2"}, {}, (), GpuFacts(2, None, "NVIDIA", "labels")),
        ({}, {"nvidia.com/gpu": "0"}, (), GpuFacts(0, None, None, "allocatable")),
        ({}, {}, ("NVIDIA",), GpuFacts(None, None, "NVIDIA", "none")),
        ({}, {"nvidia.com/gpu": "many"}, (), GpuFacts(None, None, None, "none")),
    ],
)
def test_discover(
    labels: dict[str, str], allocatable: dict[str, str], nfd: tuple[str, ...], facts: GpuFacts
) -> None:
    assert discover_gpus(labels, allocatable, nfd) == facts


def test_workers_get_gpu_allocatable_and_other_churn_changes_nothing() -> None:
    view = ClusterView(load_settings({"AGENT_MODE": "pool"}))
    view.apply(Relisted(Resource.NODES, [node("g", {"nvidia.com/gpu": "4"})]))
    first = view.inputs_for("g")
    assert first.gpu_allocatable == {"nvidia.com/gpu": "4"}
    # The kubelet rewrites status often; only the GPU entries reach the worker.
    view.apply(Change(Resource.NODES, "MODIFIED", node("g", {"nvidia.com/gpu": "4", "cpu": "63"})))
    assert view.inputs_for("g") == first
    view.apply(Change(Resource.NODES, "MODIFIED", node("g", {"nvidia.com/gpu": "3"})))
    assert view.inputs_for("g").gpu_allocatable == {"nvidia.com/gpu": "3"}
    view.apply(Change(Resource.NODES, "DELETED", node("g", {})))
    assert view.gpus == {}
