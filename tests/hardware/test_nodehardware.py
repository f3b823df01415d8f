"""NodeHardware content per hardware tree, field for field as Joulie's Go type and agent have it.

What Joulie's readers (its operator's ``fetchNodeHardware`` and scheduler's
``parseNodeHardware``) take from each field, stated here as expectations:
``gpu.vendor`` one of nvidia/amd/none, ``quality.overall`` one of
exact/heuristic/unavailable, ``model`` the catalog's key, ``capRange`` the
range every package zone takes, ``gpu.present`` only with GPUs counted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentpool.hardware.catalog import load_catalog
from agentpool.hardware.host import discover_host
from agentpool.hardware.labels import parse_quantity
from agentpool.hardware.nodehardware import GpuAccess, nodehardware_status
from agentpool.results import GpuSeen
from agentpool.sim.sysfs.trees import (
    amd_no_writable_limits,
    intel_2socket,
    no_rapl,
    read_only_rapl,
    write_value,
)

NFD = "feature.node.kubernetes.io/"
LABELS = {
    NFD + "cpu-model.name": "Intel(R) Xeon(R) Platinum 8480+",
    NFD + "cpu-vendor": "Intel",
    NFD + "cpu-sockets": "2",
}
CAPACITY = {"cpu": "112", "memory": "527935556Ki"}
CATALOG = load_catalog(str(Path(__file__).with_name("catalog.yaml")))
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", NFD + "pci-10de.present": "true"}


def test_intel_two_sockets_measured_and_resolved_by_the_catalog(tmp_path: Path) -> None:
    with intel_2socket(tmp_path, tdp_watts=350.0, min_watts=150.0):
        host = discover_host(tmp_path)
        status = nodehardware_status(LABELS, CAPACITY, {}, host, catalog=CATALOG)
    assert status["cpu"] == {
        "vendor": "GenuineIntel",
        "rawModel": "Intel(R) Xeon(R) Platinum 8480+",
        "model": "XEON_PLAT_8480P",
        "sockets": 2,
        "totalCores": 112,
        "coresPerSocket": 56,
        "driverFamily": "intel_pstate",
        "capRange": {"type": "package", "maxWattsPerSocket": 350.0, "minWattsPerSocket": 150.0},
        "landmarks": {"minFreqMHz": 800.0, "maxBoostMHz": 3500.0},
        "controlAvailable": True,
        "telemetryAvailable": True,
    }
    assert status["memory"] == {"totalBytes": 527935556 * 1024}
    assert status["quality"] == {"overall": "exact", "warnings": []}
    assert status["inventoryResolution"] == {
        "hardwareCatalogKey": {"cpu": "XEON_PLAT_8480P"},
        "exactness": {"cpu": "exact", "gpu": "generic"},
    }
    assert status["gpu"] == {
        "present": False,
        "vendor": "none",
        "count": 0,
        "controlAvailable": False,
        "telemetryAvailable": False,
    }


def test_cap_range_is_what_every_zone_accepts(tmp_path: Path) -> None:
    # Joulie's agent: the lowest zone's PL1 maximum, the highest zone's PL1 minimum.
    with intel_2socket(tmp_path, tdp_watts=350.0, min_watts=150.0) as tree:
        first, second = (z.pl1 for z in tree.packages)
        assert first is not None
        assert first.max_file is not None
        assert second is not None
        assert second.max_file is not None
        write_value(second.max_file, 300_000_000)
        write_value(first.limit_file.with_name("constraint_0_min_power_uw"), 170_000_000)
        # Package zones only: a DRAM subzone's maximum is no package's (Joulie's agent globs
        # intel-rapl:*, which takes it in).
        dram = tree.zone("intel-rapl:0:2").path / "constraint_0_max_power_uw"
        dram.write_text("30000000\n")
        status = nodehardware_status({}, {}, {}, discover_host(tmp_path))
    assert status["cpu"]["capRange"] == {
        "type": "package", "maxWattsPerSocket": 300.0, "minWattsPerSocket": 170.0}


def test_one_socket_counted_from_the_zones_when_labels_say_nothing(tmp_path: Path) -> None:
    with intel_2socket(tmp_path, packages=1, tdp_watts=205.0):
        status = nodehardware_status({}, {"cpu": "32"}, {}, discover_host(tmp_path))
    assert status["cpu"]["sockets"] == 1
    assert status["cpu"]["coresPerSocket"] == 32
    assert status["cpu"]["capRange"] == {"type": "package", "maxWattsPerSocket": 205.0}
    assert status["quality"]["overall"] == "unavailable"  # no model name at all


def test_amd_without_writable_limits_says_why(tmp_path: Path) -> None:
    with amd_no_writable_limits(tmp_path):
        status = nodehardware_status({NFD + "cpu-vendor": "AMD"}, {}, {}, discover_host(tmp_path))
    cpu = status["cpu"]
    assert cpu["vendor"] == "AuthenticAMD"
    assert "capRange" not in cpu
    assert cpu["controlAvailable"] is True  # cpufreq still works
    assert "RAPL package limits are not writable" in cpu["warnings"]
    assert "CPU cap range or frequency landmarks not found on the host" in (
        status["quality"]["warnings"])


def test_no_rapl_and_locked_rapl(tmp_path: Path) -> None:
    with no_rapl(tmp_path / "a"):
        cpu = nodehardware_status({}, {}, {}, discover_host(tmp_path / "a"))["cpu"]
    assert cpu["warnings"] == ["no RAPL package zone under powercap"]
    assert cpu["telemetryAvailable"] is False
    with read_only_rapl(tmp_path / "b"):
        host = discover_host(tmp_path / "b")
    # A BIOS lock shows only when writing: the maximum is still measured.
    assert [z.max_w for z in host.zones] == [165.0, 165.0]


def test_host_gpus_seen_through_nvml_give_their_range_and_current_cap() -> None:
    seen = GpuSeen("nvidia", 4, "NVIDIA H100 80GB HBM3", 200.0, 700.0, 700.0, 500.0, True)
    status = nodehardware_status(
        LABELS, CAPACITY, {"nvidia.com/gpu": "4"}, None,
        gpus=GpuAccess("host", seen=seen), catalog=CATALOG,
    )
    assert status["gpu"] == {
        "present": True,
        "vendor": "nvidia",
        "count": 4,
        "rawModel": "NVIDIA H100 80GB HBM3",
        "model": "H100_SXM_80G",
        "capRangePerGpu": {"minWatts": 200.0, "maxWatts": 700.0, "defaultWatts": 700.0},
        "currentCapWatts": 500.0,
        "controlAvailable": True,
        "telemetryAvailable": True,
    }
    assert status["capabilities"]["gpuControl"] is True
    assert status["quality"]["overall"] == "exact"
    assert status["inventoryResolution"]["hardwareCatalogKey"] == {
        "cpu": "XEON_PLAT_8480P", "gpu": "H100_SXM_80G"}


def test_http_gpus_take_their_range_from_the_catalog_and_caps_are_enforced() -> None:
    status = nodehardware_status(
        {**LABELS, **H100}, CAPACITY, {"nvidia.com/gpu": "8"}, None,
        http_control=True, http_telemetry=True,
        gpus=GpuAccess("http", telemetry=True), catalog=CATALOG,
    )
    gpu = status["gpu"]
    assert gpu["count"] == 8
    assert gpu["vendor"] == "nvidia"
    assert gpu["rawModel"] == "NVIDIA-H100-80GB-HBM3"
    assert gpu["model"] == "H100_SXM_80G"
    assert gpu["capRangePerGpu"] == {"minWatts": 200.0, "maxWatts": 700.0}
    assert "currentCapWatts" not in gpu
    assert gpu["controlAvailable"] is True
    assert "warnings" not in gpu  # caps are enforced: nothing to warn about
    assert status["cpu"]["controlAvailable"] is True
    assert "cpu sockets from node labels" in status["quality"]["warnings"]


def test_gpu_telemetry_over_http_wins_over_the_catalog() -> None:
    seen = GpuSeen("nvidia", 8, None, 150.0, 600.0, None, 450.0, True)
    gpu = nodehardware_status({**LABELS, **H100}, {}, {"nvidia.com/gpu": "8"}, None,
                              gpus=GpuAccess("http", True, seen), catalog=CATALOG)["gpu"]
    assert gpu["capRangePerGpu"] == {"minWatts": 150.0, "maxWatts": 600.0}
    assert gpu["currentCapWatts"] == 450.0
    assert gpu["model"] == "H100_SXM_80G"  # the product label, resolved


def test_http_gpus_without_a_catalog_take_their_range_from_agentpools_table() -> None:
    # Joulie's chart defaults: no catalog mounted, and its simulator's telemetry sends no range.
    status = nodehardware_status(
        {**LABELS, **H100}, CAPACITY, {"nvidia.com/gpu": "8"}, None,
        http_control=True, http_telemetry=True, gpus=GpuAccess("http", telemetry=True),
    )
    gpu = status["gpu"]
    # The H100 SXM5 data sheet: up to 700 W; nvidia-smi's minimum 200 W; 700 W by default.
    assert gpu["capRangePerGpu"] == {"minWatts": 200.0, "maxWatts": 700.0, "defaultWatts": 700.0}
    assert "model" not in gpu
    assert status["quality"]["overall"] == "heuristic"
    [table] = [w for w in status["quality"]["warnings"] if "capRangePerGpu" in w]
    assert table.startswith("gpu capRangePerGpu from agentpool's built-in table: NVIDIA H100 "
                            "SXM5 80GB (NVIDIA H100 Tensor Core GPU datasheet")
    assert table.endswith("not measured: no GPU library or telemetry reported a range and no "
                          "hardware catalog is set")
    assert table in gpu["warnings"]
    # A catalog that lacks the product: the table still, and the warning says why.
    l40s = {"nvidia.com/gpu.product": "NVIDIA-L40S"}
    gpu = nodehardware_status(l40s, {}, {"nvidia.com/gpu": "4"}, None,
                              gpus=GpuAccess("http"), catalog=CATALOG)["gpu"]
    assert gpu["capRangePerGpu"] == {"maxWatts": 350.0}  # no minimum published
    assert any(w.endswith("the hardware catalog lacks it") for w in gpu["warnings"])


def test_what_is_measured_ranks_above_the_catalog_and_the_table() -> None:
    labels = {**LABELS, **H100}
    telemetry = GpuSeen("nvidia", 8, None, 150.0, 600.0, None, 450.0, True)
    nvml = GpuSeen("nvidia", 8, "NVIDIA H100 80GB HBM3", 250.0, 690.0, 690.0, 500.0, True)
    for access, cap_range in (
        (GpuAccess("http", True, telemetry), {"minWatts": 150.0, "maxWatts": 600.0}),
        (GpuAccess("host", seen=nvml), {"minWatts": 250.0, "maxWatts": 690.0,
                                        "defaultWatts": 690.0}),
    ):
        for catalog in (None, CATALOG):
            status = nodehardware_status(labels, {}, {"nvidia.com/gpu": "8"}, None,
                                         gpus=access, catalog=catalog)
            assert status["gpu"]["capRangePerGpu"] == cap_range
            assert not any("capRangePerGpu" in w for w in status["quality"]["warnings"])


def test_gpu_labels_without_gpus_are_not_present() -> None:
    gpu = nodehardware_status(H100, {}, {"nvidia.com/gpu": "0"}, None, catalog=CATALOG)["gpu"]
    assert gpu["present"] is False
    assert gpu["count"] == 0
    assert gpu["vendor"] == "nvidia"
    assert "capRangePerGpu" not in gpu


@pytest.mark.parametrize(
    ("allocatable", "labels", "count", "vendor"),
    [
        ({"amd.com/gpu": "4"}, {}, 4, "amd"),
        ({"gpu.intel.com/i915": "2"}, {}, 2, "none"),
        ({"example.com/gpu": "3", "nvidia.com/gpu": "1"}, {}, 4, "nvidia"),
        ({"example.com/fpga": "3"}, {NFD + "pci-1002.present": "true"}, 0, "amd"),
        ({}, {}, 0, "none"),
    ],
)
def test_gpus_are_counted_and_named_as_joulie_does(
    allocatable: dict[str, str], labels: dict[str, str], count: int, vendor: str
) -> None:
    gpu = nodehardware_status(labels, {}, allocatable, None)["gpu"]
    assert (gpu["count"], gpu["vendor"], gpu["present"]) == (count, vendor, count > 0)


def test_host_gpu_control_a_pool_pod_cannot_use_is_said() -> None:
    problem = "a pool pod controls nodes remotely"
    gpu = nodehardware_status({}, {}, {"nvidia.com/gpu": "2"}, None,
                              gpus=GpuAccess("host", problem=problem))["gpu"]
    assert gpu["controlAvailable"] is False
    assert gpu["warnings"] == [f"GPU caps cannot be set here: {problem}"]


def test_raw_names_without_a_catalog_are_heuristic() -> None:
    status = nodehardware_status({**LABELS, **H100}, CAPACITY, {"nvidia.com/gpu": "8"}, None)
    assert "model" not in status["cpu"]
    assert "model" not in status["gpu"]
    assert status["quality"]["overall"] == "heuristic"
    assert status["inventoryResolution"]["exactness"] == {"cpu": "proxy", "gpu": "proxy"}
    unresolved = "model not resolved: no hardware catalog (HARDWARE_CATALOG_PATH unset or unusable)"
    assert status["cpu"]["warnings"] == [f"cpu {unresolved}"]
    assert status["quality"]["warnings"][:2] == [f"cpu {unresolved}", f"gpu {unresolved}"]
    # With a catalog that does not know them: Joulie's own words.
    other = nodehardware_status({NFD + "cpu-model.name": "Z80"}, {}, {}, None, catalog=CATALOG)
    assert other["cpu"]["warnings"] == ["cpu model not recognized"]


def test_nothing_known_is_unavailable() -> None:
    status = nodehardware_status({}, {}, {}, None)
    assert status["quality"]["overall"] == "unavailable"
    assert status["inventoryResolution"] == {
        "hardwareCatalogKey": {}, "exactness": {"cpu": "generic", "gpu": "generic"}}


def test_quantities() -> None:
    assert parse_quantity("64") == 64
    assert parse_quantity("263855804Ki") == 263855804 * 1024
    assert parse_quantity("2G") == 2_000_000_000
    assert parse_quantity("500m") is None
    assert parse_quantity("lots") is None
    assert parse_quantity(None) is None
