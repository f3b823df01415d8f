"""NodeTwins and NodeHardwares by node (TwinView): informer events in, a node's twin out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentpool.config.env_routing import routing_from_env
from agentpool.config.options import AgentMode
from agentpool.config.settings import Settings
from agentpool.hardware.catalog import load_catalog
from agentpool.hardware.nodehardware import nodehardware_status
from agentpool.kube.api import Resource
from agentpool.kube.informer import Change, Relisted
from agentpool.resources.nodeinputs import GpuRange
from agentpool.supervisor.clusterview import ClusterView
from agentpool.supervisor.twinview import (
    POOL_HOST_GPUS,
    TwinView,
    hardware_gpu_range,
    hardware_inputs,
    hardware_max_w,
)

CATALOG = Path(__file__).parents[1] / "hardware" / "catalog.yaml"


def twin(name: str, node: str, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": created, "resourceVersion": "7"},
        "spec": {"nodeName": node, "profile": "eco", "cpu": {"packagePowerCapWatts": 100}},
        "status": {"schedulableClass": "eco"},
    }


def hardware(name: str, node: str, per_socket: float | None, sockets: int | None) -> dict[str, Any]:
    cpu: dict[str, Any] = {}
    if per_socket is not None:
        cpu["capRange"] = {"type": "package", "maxWattsPerSocket": per_socket}
    if sockets is not None:
        cpu["sockets"] = sockets
    return {"metadata": {"name": name}, "spec": {"nodeName": node}, "status": {"cpu": cpu}}


def test_a_twin_is_found_by_spec_node_name_not_by_its_own_name() -> None:
    view = TwinView()
    assert view.apply(Relisted(Resource.NODE_TWINS, [twin("whatever", "worker.0")])) == {"worker.0"}
    found, note = view.twin_for("worker.0")
    assert found is not None
    assert found["spec"]["nodeName"] == "worker.0"
    assert note is None
    assert view.twin_name("worker.0") == "whatever"
    assert view.twin_for("whatever") == (None, None)


def test_the_oldest_of_several_twins_wins_and_the_choice_is_said() -> None:
    view = TwinView()
    view.apply(Relisted(Resource.NODE_TWINS, [
        twin("b-new", "n", "2026-03-01T00:00:00Z"), twin("a-old", "n", "2026-01-01T00:00:00Z"),
    ]))
    found, note = view.twin_for("n")
    assert found is not None
    assert found["metadata"]["name"] == "a-old"
    assert note == "2 NodeTwins target node n (a-old, b-new); using the oldest, 'a-old'"


def test_twins_keep_only_metadata_and_spec_so_status_writes_change_nothing() -> None:
    view = TwinView()
    view.apply(Relisted(Resource.NODE_TWINS, [twin("t", "n")]))
    before = view.twin_for("n")[0]
    assert before is not None
    assert set(before) == {"metadata", "spec"}
    written = twin("t", "n")
    written["status"]["controlStatus"] = {"cpu": {"result": "applied"}}
    view.apply(Change(Resource.NODE_TWINS, "MODIFIED", written))
    assert view.twin_for("n")[0] == before


def test_objects_without_a_usable_node_name_index_no_node() -> None:
    view = TwinView()
    specs: list[Any] = [None, "n", {}, {"nodeName": ""}, {"nodeName": 5}, {"nodeName": ["n"]}]
    bad = [dict(twin(f"t{i}", "n"), spec=spec) for i, spec in enumerate(specs)]
    assert view.apply(Relisted(Resource.NODE_TWINS, bad)) == set()
    assert view.twin_for("n") == (None, None)
    assert not view.has_twin("")


def test_a_twin_moving_to_another_node_affects_both_and_deletion_forgets_it() -> None:
    view = TwinView()
    view.apply(Relisted(Resource.NODE_TWINS, [twin("t", "a")]))
    assert view.apply(Change(Resource.NODE_TWINS, "MODIFIED", twin("t", "b"))) == {"a", "b"}
    assert view.twin_for("a") == (None, None)
    assert view.apply(Change(Resource.NODE_TWINS, "DELETED", twin("t", "b"))) == {"b"}
    assert view.twin_for("b") == (None, None)


def test_hardware_maximum_is_per_socket_times_sockets_never_guessed() -> None:
    assert hardware_max_w(hardware("h", "n", 200.0, 2)) == 400.0
    assert hardware_max_w(hardware("h", "n", 200.0, None)) is None
    assert hardware_max_w(hardware("h", "n", None, 2)) is None
    assert hardware_max_w(hardware("h", "n", True, 2)) is None  # type: ignore[arg-type]
    assert hardware_max_w({"status": "junk"}) is None


def test_only_a_new_hardware_maximum_changes_a_nodes_inputs() -> None:
    view = TwinView()
    assert view.apply(Relisted(Resource.NODE_HARDWARES, [hardware("h", "n", 200.0, 2)])) == {"n"}
    assert view.hardware_max == {"n": 400.0}
    # The agent's own NodeHardware writes come back as MODIFIED with the same maximum.
    def event(kind: str, per_socket: float) -> Change:
        return Change(Resource.NODE_HARDWARES, kind, hardware("h", "n", per_socket, 2))

    assert view.apply(event("MODIFIED", 200.0)) == set()
    assert view.apply(event("MODIFIED", 150.0)) == {"n"}
    assert view.apply(event("DELETED", 150.0)) == {"n"}
    assert view.hardware_max == {}


def test_hardware_inputs_read_sysfs_only_under_host_control() -> None:
    settings = Settings(sysfs_root="/sys-{node}")
    node = {"labels": {"a": "b"}, "capacity": {"cpu": "8"}, "allocatable": {"nvidia.com/gpu": "2"}}
    host = hardware_inputs(settings, "n", node, None)
    assert host.sysfs_root == "/sys-n"
    assert (host.labels, host.capacity, host.allocatable) == (
        {"a": "b"}, {"cpu": "8"}, {"nvidia.com/gpu": "2"}
    )
    http_tp = {
        "metadata": {"name": "n"},
        "spec": {
            "sources": {"cpu": {"type": "http", "http": {"endpoint": "http://s/t"}}},
            "controls": {"cpu": {"type": "http", "http": {"endpoint": "http://s/c"}}},
        },
    }
    remote = hardware_inputs(settings, "n", node, http_tp)
    assert remote.sysfs_root is None
    assert (remote.http_control, remote.http_telemetry) == (True, True)
    # A malformed TelemetryProfile is its worker's to report: publish what the env says.
    broken = hardware_inputs(settings, "n", None, {"spec": {"controls": {"cpu": {"type": "x"}}}})
    assert broken.sysfs_root == "/sys-n"


def test_gpu_ranges_come_from_nodehardware_else_the_catalog() -> None:
    view = ClusterView(Settings(), load_catalog(str(CATALOG)))
    gpu_node = {"metadata": {"name": "g", "labels": {
        "joulie.io/managed": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}
    view.apply(Relisted(Resource.NODES, [gpu_node]))
    catalogued = GpuRange(700.0, 200.0, "hardware catalog: H100_SXM_80G")
    assert view.inputs_for("g").gpu_range == catalogued
    published = hardware("h", "g", None, None)
    published["status"]["gpu"] = {"capRangePerGpu": {"minWatts": 150, "maxWatts": 600}}
    assert view.apply(Relisted(Resource.NODE_HARDWARES, [published])) == {"g"}
    assert view.inputs_for("g").gpu_range == GpuRange(600.0, 150.0, "NodeHardware")
    # The agent's own writes come back: the same range changes nothing.
    assert view.apply(Change(Resource.NODE_HARDWARES, "MODIFIED", published)) == set()
    assert ClusterView(Settings()).inputs_for("g").gpu_range is None  # no node, no range


def test_without_a_catalog_gpu_ranges_come_from_agentpools_table() -> None:
    view = ClusterView(Settings())
    nodes = [{"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}}}
             for name, product in (("h", "NVIDIA-H100-80GB-HBM3"), ("x", "Fake_GPU"))]
    view.apply(Relisted(Resource.NODES, nodes))
    known = view.inputs_for("h").gpu_range
    assert known is not None
    assert (known.max_watts, known.min_watts) == (700.0, 200.0)  # the H100 SXM5 data sheet
    assert known.source.startswith("built-in table: NVIDIA H100 SXM5 80GB (")
    assert view.inputs_for("x").gpu_range is None  # a product no table knows


def test_a_nodehardware_range_from_agentpools_table_is_named_for_the_table() -> None:
    labels = {"joulie.io/managed": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    view = ClusterView(Settings())
    view.apply(Relisted(Resource.NODES, [{"metadata": {"name": "h", "labels": labels}}]))
    # What an agent publishes for such a node over HTTP with no catalog mounted.
    status = nodehardware_status(labels, {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8"},
                                 None, http_control=True, http_telemetry=True)
    assert status["gpu"]["capRangePerGpu"]["maxWatts"] == 700
    published = {"metadata": {"name": "h"}, "spec": {"nodeName": "h"}, "status": status}
    view.apply(Relisted(Resource.NODE_HARDWARES, [published]))
    assert hardware_gpu_range(published) is None
    known = view.inputs_for("h").gpu_range
    assert known is not None
    assert (known.max_watts, known.min_watts) == (700.0, 200.0)
    assert known.source.startswith("built-in table: NVIDIA H100 SXM5 80GB (")
    # A range the telemetry or a GPU library reported is the NodeHardware's.
    status["gpu"].pop("warnings")
    assert hardware_gpu_range(published) == GpuRange(700.0, 200.0, "NodeHardware")


def test_nodehardware_gpu_ranges_are_read_as_numbers_or_not_at_all() -> None:
    def gpu(cap_range: Any) -> dict[str, Any]:
        return {"status": {"gpu": {"capRangePerGpu": cap_range}}}

    assert hardware_gpu_range(gpu({"maxWatts": 400})) == GpuRange(400.0, None, "NodeHardware")
    assert hardware_gpu_range(gpu({"maxWatts": 400, "minWatts": 500})) == GpuRange(
        400.0, None, "NodeHardware")  # a minimum above the maximum is no minimum
    assert hardware_gpu_range(gpu({"minWatts": 100})) is None
    assert hardware_gpu_range(gpu({"maxWatts": "400"})) is None
    assert hardware_gpu_range(gpu("junk")) is None
    assert hardware_gpu_range({"status": {"gpu": None}}) is None


def test_gpu_inputs_follow_the_routing_and_the_mode() -> None:
    node = {"labels": {}, "capacity": {}, "allocatable": {"nvidia.com/gpu": "2"}}
    daemonset = hardware_inputs(Settings(mode=AgentMode.DAEMONSET), "n", node, None)
    assert (daemonset.gpu_control, daemonset.gpu_host, daemonset.gpu_problem) == (
        "host", True, None)
    pool = hardware_inputs(Settings(mode=AgentMode.POOL), "n", node, None)
    assert (pool.gpu_host, pool.gpu_problem) == (False, POOL_HOST_GPUS)
    routed = Settings(mode=AgentMode.POOL, routing=routing_from_env({
        "TELEMETRY_CPU_SOURCE": "http", "TELEMETRY_CPU_HTTP_ENDPOINT": "http://s/t/{node}",
        "TELEMETRY_GPU_CONTROL": "http", "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT": "http://s/c",
    }))
    http = hardware_inputs(routed, "n", node, None)
    assert (http.gpu_control, http.gpu_telemetry, http.gpu_host) == ("http", True, False)
