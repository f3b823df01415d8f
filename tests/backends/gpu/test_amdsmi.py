"""The AMD SMI backend, tested at the binding's boundary.

AMD's binding (``amdsmi``) resolves hundreds of symbols of ``libamd_smi.so``
when it is imported, so a small fake library (as for NVML) cannot stand in
for it. These tests hand the backend a stand-in of the binding module
instead, with the binding's function names, dictionaries, units
(microwatts) and exception shape (``AmdSmiLibraryException.err_code``), and
check the real binding's own failure when the library is missing.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentpool.backends.gpu.amdsmi import AmdSmiGpus
from agentpool.backends.sysfs.files import Originals
from agentpool.errors import GpuUnavailableError
from agentpool.resources.desired import GpuCap
from agentpool.results import Result
from tests.support.amdsmi import (
    NO_PERM,
    NOT_SUPPORTED,
    AmdSmiLibraryException,
    Device,
    binding,
)


def test_caps_clamped_journaled_and_restored(tmp_path: Path) -> None:
    devices = [Device("amd-0", 300, 750, 750), Device("amd-1", 300, 600, 550)]
    gpus = AmdSmiGpus(Originals(tmp_path / "j.json"), binding(devices))
    outcomes = gpus.apply(GpuCap(pct_of_max=40))  # 300 W and 240 -> 300 W
    assert [o.result for o in outcomes] == [Result.APPLIED, Result.APPLIED]
    assert [o.applied_watts for o in outcomes] == [300, 300]
    assert [o.target_watts for o in outcomes] == [300, 240]
    assert outcomes[0].power_watts == 321  # "N/A" current power is not 0 W: the average is used
    assert gpus.restore() == []
    assert [d.info["power_cap"] for d in devices] == [750_000_000, 550_000_000]


@pytest.mark.parametrize(
    ("code", "result"),
    [(NO_PERM, Result.BLOCKED), (NOT_SUPPORTED, Result.BLOCKED), (5, Result.ERROR)],
)
def test_refusing_device_leaves_the_other_capped(code: int, result: Result) -> None:
    devices = [Device("amd-0", 300, 750, 750, fail=code), Device("amd-1", 300, 600, 600)]
    gpus = AmdSmiGpus(Originals(), binding(devices))
    outcomes = gpus.apply(GpuCap(watts_per_gpu=400))
    assert outcomes[0].result is result
    assert outcomes[0].reason.startswith("AMD SMI: Error code:")
    assert outcomes[1].result is Result.APPLIED
    assert devices[1].info["power_cap"] == 400_000_000
    assert gpus.restore() == []  # the refused device left no journal entry behind


def test_cap_that_reads_back_different_is_an_error() -> None:
    device = Device("amd-0", 300, 750, 750)
    smi = binding([device])
    smi.amdsmi_set_power_cap = lambda h, s, c: None  # accepted, changes nothing
    outcome = AmdSmiGpus(Originals(), smi).apply(GpuCap(watts_per_gpu=400))[0]
    assert outcome.result is Result.ERROR
    assert outcome.reason == "cap reads back 750 W after setting 400 W"


def test_real_binding_without_its_library_is_blocked_saying_so() -> None:
    # Not imported here: without its library the binding fails at import (KeyError).
    if importlib.util.find_spec("amdsmi") is None:
        pytest.skip("amdsmi (agentpool[amd]) is not installed")
    # A fresh interpreter: the real binding looks for libamd_smi.so, which is not here.
    script = (
        "from agentpool.backends.gpu.amdsmi import AmdSmiGpus\n"
        "from agentpool.backends.sysfs.files import Originals\n"
        "from agentpool.errors import GpuUnavailableError\n"
        "from agentpool.resources.desired import GpuCap\n"
        "try:\n"
        "    AmdSmiGpus(Originals()).apply(GpuCap(watts_per_gpu=300))\n"
        "except GpuUnavailableError as exc:\n"
        "    print('unavailable:', exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("ROCM_PATH", "ROCM_HOME")}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("unavailable: AMD SMI library missing:"), out
    assert "libamd_smi.so" in out
    assert out.count("\n") == 1  # the binding's own print to stdout was swallowed


def test_no_device_and_driver_not_loaded(tmp_path: Path) -> None:
    gpus = AmdSmiGpus(Originals(), binding([]))
    assert gpus.apply(GpuCap(watts_per_gpu=300)) == []  # no device: the controller says blocked
    smi = binding([])

    def refuse() -> None:
        raise AmdSmiLibraryException(34)  # AMDSMI_STATUS_DRIVER_NOT_LOADED

    smi.amdsmi_init = refuse
    with pytest.raises(GpuUnavailableError, match="AMD SMI unavailable"):
        AmdSmiGpus(Originals(), smi).apply(GpuCap(watts_per_gpu=300))


@pytest.mark.parametrize(
    "info",
    [
        # Shrunk from tests/properties/test_gpu_host.py: a minimum above the maximum had
        # 0 uW set (clamped to the max, below the min); "N/A" raised TypeError.
        {"power_cap": 1, "max_power_cap": 0, "min_power_cap": 1, "default_power_cap": 0},
        {"power_cap": "N/A", "max_power_cap": 400_000_000, "min_power_cap": 100_000_000},
        {"power_cap": 300_000_000, "max_power_cap": "N/A", "min_power_cap": 100_000_000},
        {"power_cap": 300_000_000},
    ],
)
def test_a_device_without_a_usable_cap_range_is_blocked_and_never_written(
    info: dict[str, Any],
) -> None:
    device = Device("amd-0", 300, 750, 750)
    device.info = dict(info)
    smi = binding([device])
    outcome = AmdSmiGpus(Originals(), smi).apply(GpuCap(watts_per_gpu=400))[0]
    assert outcome.result is Result.BLOCKED
    assert "AMD SMI" in outcome.reason
    assert not [c for c in smi.calls if c.startswith("set ")]
