"""The joulie_gpu_* metrics: per node and device, one-hot backend, no series left behind."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from agentpool.controller.gpu_metrics import GpuMetrics
from agentpool.results import GpuBackend
from agentpool.supervisor.collector import FastMultiProcessCollector


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"node": "n", **labels})


@pytest.mark.parametrize("active", list(GpuBackend))
def test_backend_is_one_hot(active: GpuBackend) -> None:
    registry = CollectorRegistry()
    m = GpuMetrics("n", registry)
    m.set_backend(GpuBackend.HTTP)
    m.set_backend(active)
    got = {b.value: value(registry, "joulie_gpu_backend_mode", backend=b.value) for b in GpuBackend}
    assert got == {b.value: 1.0 if b is active else 0.0 for b in GpuBackend}


def test_a_device_that_leaves_is_tombstoned_and_none_clears_the_backend() -> None:
    registry = CollectorRegistry()
    m = GpuMetrics("n", registry)
    m.set_backend(GpuBackend.HOST_NVIDIA)
    m.set_devices({"0": (250.0, 240.5), "1": (72.0, None)})
    assert value(registry, "joulie_gpu_power_cap_watts", device="0") == 250
    assert value(registry, "joulie_gpu_power_watts", device="0") == 240.5
    power_1 = value(registry, "joulie_gpu_power_watts", device="1")
    assert power_1 is not None
    assert math.isnan(power_1)
    m.set_devices({"0": (250.0, 241.0)})
    cap_1 = value(registry, "joulie_gpu_power_cap_watts", device="1")
    assert cap_1 is not None
    assert math.isnan(cap_1)
    m.set_backend(None)
    mode = value(registry, "joulie_gpu_backend_mode", backend="host-nvidia")
    assert mode is not None
    assert math.isnan(mode)


WRITER = textwrap.dedent(
    """
    import sys
    from prometheus_client import values
    values.ValueClass = values.MultiProcessValue(process_identifier=lambda: "n-gpu")
    from agentpool.controller.gpu_metrics import GpuMetrics
    from agentpool.results import GpuBackend
    m = GpuMetrics("gpu-0")
    m.set_backend(GpuBackend.HOST_NVIDIA)
    m.set_devices({"0": (250.0, 240.0), "1": (72.0, 70.0), "2": (200.0, 190.0)})
    if sys.argv[1] == "lost":
        m.set_devices({"0": (250.0, 240.0), "1": (72.0, 70.0)})
    """
)


def scrape(directory: Path, mode: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    env = {"PROMETHEUS_MULTIPROC_DIR": str(directory), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", WRITER, mode], env=env, check=True)
    # What /metrics serves: the collector's render() (its only merge path).
    text = FastMultiProcessCollector(str(directory)).render().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_a_lost_device_leaves_no_series_in_the_merged_metrics(tmp_path: Path) -> None:
    (tmp_path / "all").mkdir()
    (tmp_path / "lost").mkdir()
    full = scrape(tmp_path / "all", "all")
    lost = scrape(tmp_path / "lost", "lost")
    key = ("joulie_gpu_power_cap_watts", (("device", "2"), ("node", "gpu-0")))
    assert full[key] == 200
    assert key not in lost
    assert lost[("joulie_gpu_power_cap_watts", (("device", "1"), ("node", "gpu-0")))] == 72
    backend = ("joulie_gpu_backend_mode", (("backend", "host-nvidia"), ("node", "gpu-0")))
    assert lost[backend] == 1


def test_gauges_vanish_with_their_worker() -> None:
    m = GpuMetrics("n", CollectorRegistry())
    gauges = [g for g in vars(m).values() if type(g).__name__ == "Gauge"]
    assert len(gauges) == 3
    assert {g._multiprocess_mode for g in gauges} == {"livesum"}
