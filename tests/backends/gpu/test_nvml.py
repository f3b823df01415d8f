"""The NVML backend against a fake libnvidia-ml.so.1, through NVIDIA's own binding.

The fake (tests/backends/fake_nvml/fake_nvml.c, built here with the system C
compiler) stands in for NVIDIA's driver library, which cannot exist on a
machine without an NVIDIA GPU. Everything above it is real: pynvml
(nvidia-ml-py) finds it with its own ``CDLL("libnvidia-ml.so.1")``, calls
it through ctypes and maps its return codes to its NVMLError classes.
Skipped where no C compiler exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentpool.backends.gpu.nvml import NvmlGpus
from agentpool.backends.sysfs.files import Originals
from agentpool.errors import GpuUnavailableError
from agentpool.resources.desired import GpuCap
from agentpool.results import Result
from tests.support.fake_nvml import FakeGpu, FakeNvml, build, preload

pytest.importorskip("pynvml", reason="nvidia-ml-py (agentpool[nvidia]) is not installed")

GPUS = [
    FakeGpu("GPU-aaaa", "Fake_A100", 100, 400, 400, power_w=380),
    FakeGpu("GPU-bbbb", "Fake_L4", 40, 72, 72, power_w=70),
    FakeGpu("GPU-cccc", "Fake_H100", 200, 700, 700, limit_w=650, power_w=600),
]


@pytest.fixture(scope="session")
def nvml_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    library = build(tmp_path_factory.mktemp("fake-nvml"))
    preload(library)
    return library


@pytest.fixture
def fake(nvml_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    nvml = FakeNvml(nvml_library, tmp_path / "nvml-state")
    nvml.write(GPUS)
    # The fake reads its state file from the environment on every call.
    monkeypatch.setenv("FAKE_NVML_STATE", str(nvml.state))
    return nvml


def test_watts_clamped_per_device_read_back_and_restored(fake: FakeNvml, tmp_path: Path) -> None:
    journal = tmp_path / "journal.json"
    gpus = NvmlGpus(Originals(journal))
    outcomes = gpus.apply(GpuCap(watts_per_gpu=150))
    assert [o.result for o in outcomes] == [Result.APPLIED] * 3
    assert [o.ident for o in outcomes] == ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]
    assert [o.name for o in outcomes] == ["Fake A100", "Fake L4", "Fake H100"]
    # 150 W fits the first, is clamped to the L4's 72 W max and to the H100's 200 W min.
    assert fake.limits() == [150, 72, 200]
    assert [o.applied_watts for o in outcomes] == [150, 72, 200]
    assert [o.target_watts for o in outcomes] == [150, 150, 150]
    assert outcomes[0].power_watts == 150  # the board draws at most its new limit
    # The originals are journaled (the L4 was already at 72 W: never written, not journaled).
    # Each entry: the key -> [its owner, the original milliwatts].
    originals = {
        "gpu/nvml/GPU-aaaa": ["gpu/nvml", 400000],
        "gpu/nvml/GPU-cccc": ["gpu/nvml", 650000],
    }
    assert json.loads(journal.read_text()) == originals
    assert gpus.restore() == []
    assert fake.limits() == [400, 72, 650]


def test_percent_of_each_devices_max(fake: FakeNvml) -> None:
    outcomes = NvmlGpus(Originals()).apply(GpuCap(pct_of_max=50))
    assert fake.limits() == [200, 40, 350]  # 50% of 400, of 72 (36 -> min 40), of 700
    assert [o.target_watts for o in outcomes] == [200, 36, 350]


@pytest.mark.parametrize(
    ("fail", "result", "reason"),
    [
        ("not_supported", Result.BLOCKED, "Not Supported"),
        ("no_permission", Result.BLOCKED, "Insufficient Permissions"),
        ("lost", Result.ERROR, "GPU is lost"),
        ("sticky", Result.ERROR, "reads back 400 W after setting 250 W"),
    ],
)
def test_a_refusing_device_leaves_the_others_capped(
    fake: FakeNvml, fail: str, result: Result, reason: str
) -> None:
    fake.set_fail(0, fail)
    gpus = NvmlGpus(Originals())
    outcomes = gpus.apply(GpuCap(watts_per_gpu=250))
    assert outcomes[0].result is result
    assert reason in outcomes[0].reason
    assert [o.result for o in outcomes[1:]] == [Result.APPLIED, Result.APPLIED]
    assert fake.limits()[1:] == [72, 250]
    assert fake.limits()[0] == 400  # never written, or written without effect
    # A refused write leaves no journal entry claiming a change: restore has nothing to fail on.
    if fail in ("not_supported", "no_permission"):
        assert all(not str(p).endswith("GPU-aaaa") for p, _ in gpus._originals.items())
        assert gpus.restore() == []


def test_driver_not_loaded_is_unavailable(fake: FakeNvml) -> None:
    fake.set_driver(False)
    with pytest.raises(GpuUnavailableError, match="Driver Not Loaded"):
        NvmlGpus(Originals()).apply(GpuCap(watts_per_gpu=250))
    assert fake.limits() == [400, 72, 650]


def test_restart_after_a_crash_restores_the_true_original(fake: FakeNvml, tmp_path: Path) -> None:
    journal = tmp_path / "journal.json"
    NvmlGpus(Originals(journal)).apply(GpuCap(watts_per_gpu=300))  # then "crashes"
    second = NvmlGpus(Originals(journal))  # a restarted worker reads the journal
    second.apply(GpuCap(watts_per_gpu=250))
    assert fake.limits() == [250, 72, 250]
    assert second.restore() == []
    assert fake.limits() == [400, 72, 650]


def test_binding_lookup_through_ld_library_path(fake: FakeNvml, tmp_path: Path) -> None:
    # A fresh interpreter: pynvml's own CDLL("libnvidia-ml.so.1") finds the fake through
    # LD_LIBRARY_PATH, as the agent's worker processes do.
    script = (
        "from agentpool.backends.gpu.nvml import NvmlGpus\n"
        "from agentpool.backends.sysfs.files import Originals\n"
        "from agentpool.resources.desired import GpuCap\n"
        "gpus = NvmlGpus(Originals())\n"
        "print(gpus.models(), [o.result.value for o in gpus.apply(GpuCap(pct_of_max=25))])\n"
    )
    env = dict(os.environ, **fake.env())
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['Fake A100', 'Fake L4', 'Fake H100'] ['applied', 'applied', 'applied']"
    assert fake.limits() == [100, 40, 200]  # 25%: 100, 18 -> 40, 175 -> 200


def test_without_the_library_it_is_unavailable(tmp_path: Path) -> None:
    script = (
        "from agentpool.backends.gpu.nvml import NvmlGpus\n"
        "from agentpool.backends.sysfs.files import Originals\n"
        "from agentpool.errors import GpuUnavailableError\n"
        "try:\n"
        "    NvmlGpus(Originals()).count()\n"
        "except GpuUnavailableError as exc:\n"
        "    print(exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "NVML unavailable" in out
    assert "Shared Library Not Found" in out
