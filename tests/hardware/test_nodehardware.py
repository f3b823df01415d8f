"""NodeHardware content per hardware tree: what is measured, what is inferred, and quality."""

from __future__ import annotations

from pathlib import Path

from agentpool.hardware.host import discover_host
from agentpool.hardware.labels import parse_quantity
from agentpool.hardware.nodehardware import nodehardware_status
from agentpool.sim.sysfs.trees import amd_no_writable_limits, intel_2socket, no_rapl, read_only_rapl

NFD = "feature.node.kubernetes.io/"
LABELS = {
    NFD + "cpu-model.name": "Intel(R) Xeon(R) Platinum 8480+",
    NFD + "cpu-vendor": "Intel",
    NFD + "cpu-sockets": "2",
}
CAPACITY = {"cpu": "112", "memory": "527935556Ki"}


def test_intel_two_sockets_is_fully_measured(tmp_path: Path) -> None:
    with intel_2socket(tmp_path, tdp_watts=350.0, min_watts=150.0):
        host = discover_host(tmp_path)
        status = nodehardware_status(LABELS, CAPACITY, {}, host)
    assert status["cpu"] == {
        "vendor": "GenuineIntel",
        "rawModel": "Intel(R) Xeon(R) Platinum 8480+",
        "model": "Intel(R) Xeon(R) Platinum 8480+",
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
    assert status["quality"] == {"overall": "full", "warnings": []}
    assert status["gpu"] == {
        "present": False,
        "count": 0,
        "controlAvailable": False,
        "telemetryAvailable": False,
    }


def test_one_socket_counted_from_the_zones_when_labels_say_nothing(tmp_path: Path) -> None:
    with intel_2socket(tmp_path, packages=1, tdp_watts=205.0):
        status = nodehardware_status({}, {"cpu": "32"}, {}, discover_host(tmp_path))
    assert status["cpu"]["sockets"] == 1
    assert status["cpu"]["coresPerSocket"] == 32
    assert status["cpu"]["capRange"] == {"type": "package", "maxWattsPerSocket": 205.0}
    assert status["quality"]["overall"] == "full"


def test_amd_without_writable_limits_is_partial_and_says_why(tmp_path: Path) -> None:
    with amd_no_writable_limits(tmp_path):
        status = nodehardware_status({NFD + "cpu-vendor": "AMD"}, {}, {}, discover_host(tmp_path))
    cpu = status["cpu"]
    assert cpu["vendor"] == "AuthenticAMD"
    assert "capRange" not in cpu
    assert cpu["controlAvailable"] is True  # cpufreq still works
    assert "RAPL package limits are not writable" in cpu["warnings"]
    assert status["quality"]["overall"] == "partial"


def test_no_rapl_and_locked_rapl(tmp_path: Path) -> None:
    with no_rapl(tmp_path / "a"):
        cpu = nodehardware_status({}, {}, {}, discover_host(tmp_path / "a"))["cpu"]
    assert cpu["warnings"] == ["no RAPL package zone under powercap"]
    assert cpu["telemetryAvailable"] is False
    with read_only_rapl(tmp_path / "b"):
        host = discover_host(tmp_path / "b")
    # A BIOS lock shows only when writing: the maximum is still measured.
    assert [z.max_w for z in host.zones] == [165.0, 165.0]


def test_http_node_is_inferred_from_labels_and_capacity() -> None:
    labels = {
        **LABELS,
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        NFD + "pci-10de.present": "true",
    }
    status = nodehardware_status(
        labels, CAPACITY, {"nvidia.com/gpu": "8"}, None, http_control=True, http_telemetry=True
    )
    assert status["cpu"]["sockets"] == 2
    assert status["cpu"]["controlAvailable"] is True
    assert status["gpu"]["count"] == 8
    assert status["gpu"]["vendor"] == "NVIDIA"
    assert status["gpu"]["model"] == "NVIDIA-H100-80GB-HBM3"
    assert status["quality"]["overall"] == "partial"
    assert "cpu sockets from node labels" in status["quality"]["warnings"]


def test_nothing_known_is_unknown() -> None:
    status = nodehardware_status({}, {}, {}, None)
    assert status["quality"]["overall"] == "unknown"


def test_quantities() -> None:
    assert parse_quantity("64") == 64
    assert parse_quantity("263855804Ki") == 263855804 * 1024
    assert parse_quantity("2G") == 2_000_000_000
    assert parse_quantity("500m") is None
    assert parse_quantity("lots") is None
    assert parse_quantity(None) is None
