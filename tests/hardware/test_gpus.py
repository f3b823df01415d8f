"""GPU facts from a Node: allocatable, GPU Feature Discovery / AMD labeller labels, NFD hints."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.config.settings import load_settings
from agentpool.hardware.gpus import GpuFacts, discover_gpus, gpu_allocatable
from agentpool.kube.api import Resource
from agentpool.kube.informer import Change, Relisted
from agentpool.supervisor.scope import ClusterView


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
