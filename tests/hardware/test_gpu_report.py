"""``agentpool inspect`` shows GPUs: the real command, NVIDIA's binding, the fake NVML library.

The fake ``libnvidia-ml.so.1`` (tests/backends/fake_nvml) stands in for the
driver, which cannot exist here; the command runs as a subprocess that finds
it through ``LD_LIBRARY_PATH``, as it would find the real one. Every plan is
chosen so that any write would change the fake's state file: it must not.
AMD SMI is checked with the stand-in binding of ``tests/backends/gpu``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentpool.backends.gpu.amdsmi import AmdSmiGpus
from agentpool.backends.sysfs.files import Originals
from agentpool.hardware.gpu_report import gpu_lines
from agentpool.resources.desired import GpuCap
from agentpool.sim.sysfs.trees import intel_2socket
from tests.support.amdsmi import NOT_SUPPORTED, Device, binding
from tests.support.fake_nvml import FakeGpu, FakeNvml, build

pytest.importorskip("pynvml", reason="nvidia-ml-py (agentpool[nvidia]) is not installed")

GPUS = [
    FakeGpu("GPU-aaaa", "Fake_A100", 100, 400, 400, power_w=380),
    FakeGpu("GPU-bbbb", "Fake_L4", 40, 72, 72, power_w=70),
    FakeGpu("GPU-cccc", "Fake_H100", 200, 700, 700, limit_w=650, power_w=600, fail="not_supported"),
]


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture
def fake(library: Path, tmp_path: Path) -> FakeNvml:
    nvml = FakeNvml(library, tmp_path / "nvml-state")
    nvml.write(GPUS)
    return nvml


def inspect(fake: FakeNvml, root: Path, *args: str) -> str:
    before = fake.state.read_bytes(), fake.state.stat().st_mtime_ns
    done = subprocess.run(
        [sys.executable, "-m", "agentpool", "inspect", "--sysfs-root", str(root), *args],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, **fake.env()},
    )
    assert done.returncode == 0, done.stderr
    assert (fake.state.read_bytes(), fake.state.stat().st_mtime_ns) == before, "it wrote"
    return done.stdout


def test_each_gpu_with_its_limits_and_what_a_cap_would_set(fake: FakeNvml, tmp_path: Path) -> None:
    with intel_2socket(tmp_path / "sys"):
        out = inspect(fake, tmp_path / "sys", "--gpu-cap", "150")
    assert "GPUs through NVML (host-nvidia): 3" in out
    assert ("  GPU 0 Fake A100 (GPU-aaaa): limit 400 W (min 100 W, max 400 W, default 400 W) "
            "drawing 380 W") in out
    assert ("  GPU 1 Fake L4 (GPU-bbbb): limit 72 W (min 40 W, max 72 W, default 72 W) "
            "drawing 70 W") in out
    assert "  GPU 2 Fake H100 (GPU-cccc): limit 650 W; NVML: Not Supported" in out
    assert "GPU cap 150 W per GPU: the agent would set" in out
    assert "  GPU 0: 150 W (read back to check)" in out
    assert "  GPU 1: 72 W, lowered to its maximum from 150 W (read back to check)" in out
    assert "  GPU 2: nothing (its limits are unknown: NVML: Not Supported)" in out
    assert "GPUs through AMD SMI: unavailable (AMD SMI binding not installed" in out
    assert out.endswith("(inspect only reads; nothing was written)\n")


def test_a_percent_of_each_gpus_maximum(fake: FakeNvml, tmp_path: Path) -> None:
    fake.write(GPUS[:2])
    out = inspect(fake, tmp_path, "--gpu-pct", "30")
    assert "GPU cap 30% of each GPU's maximum: the agent would set" in out
    assert "  GPU 0: 120 W (30% of 400 W) (read back to check)" in out
    assert "  GPU 1: 40 W (30% of 72 W), raised to its minimum from 21.6 W" in out


def test_no_driver_is_said_and_nothing_planned(fake: FakeNvml, tmp_path: Path) -> None:
    fake.set_driver(False)
    out = inspect(fake, tmp_path, "--gpu-cap", "200")
    assert "GPUs through NVML: unavailable (NVML unavailable: " in out
    assert "GPU cap 200 W per GPU: blocked, no GPU found to cap" in out


def test_amd_smi_devices_through_the_binding() -> None:
    # A device that would refuse the write (NOT_SUPPORTED on set) shows only when writing,
    # which inspect never does: its plan is what the agent would try.
    smi = binding([Device("amd-0", 50, 300, 250), Device("amd-1", 50, 250, 200,
                                                           fail=NOT_SUPPORTED)])
    lines = gpu_lines(GpuCap(watts_per_gpu=280), [("AMD SMI", AmdSmiGpus(Originals(), smi))])
    assert lines[0] == "GPUs through AMD SMI (host-amd): 2"
    assert lines[1] == ("  GPU 0 Fake MI300X (amd-0): limit 250 W (min 50 W, max 300 W, "
                        "default 250 W) drawing 321 W")
    assert "  GPU 0: 280 W (read back to check)" in lines
    assert "  GPU 1: 250 W, lowered to its maximum from 280 W (read back to check)" in lines
    assert smi.calls == ["init"]  # type: ignore[attr-defined]  # no set_power_cap
