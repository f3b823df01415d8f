"""Host GPU backends against any value a driver binding can report.

AMD SMI through a stand-in of the ``amdsmi`` module (tests/backends/gpu/
test_amdsmi.py says why), whose power-cap fields hold anything the real
binding returns (integers of any size, "N/A", missing keys) or worse. Each
device comes out applied within its own [min, max], or blocked/error with a
reason; the binding is never asked to set a cap outside that range, and no
exception escapes. NVML the same, through the fake libnvidia-ml.so.1 and
NVIDIA's real binding: any unsigned milliwatt values and failure modes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.backends.gpu.amdsmi import AmdSmiGpus
from agentpool.backends.sysfs.files import Originals
from agentpool.resources.desired import GpuCap
from agentpool.results import Result
from tests.support.amdsmi import Device, binding
from tests.support.budget import examples

field_values = st.one_of(
    st.integers(-(10**12), 10**12), st.integers(0, 2**64), st.just("N/A"), st.none(),
    st.floats(allow_nan=True), st.booleans(), st.just(0),
)
caps = st.one_of(
    st.builds(GpuCap, watts_per_gpu=st.one_of(st.floats(5e-324, 1e308), st.sampled_from(
        [5e-324, 1e308, 300.0]))),
    st.builds(GpuCap, pct_of_max=st.one_of(st.floats(1e-300, 100), st.just(3.5e-320))),
)


@settings(max_examples=examples(150))
@given(
    infos=st.lists(
        st.dictionaries(
            st.sampled_from(["power_cap", "default_power_cap", "min_power_cap",
                             "max_power_cap", "dpm_cap"]),
            field_values,
        ),
        min_size=1, max_size=3,
    ),
    cap=caps,
)
def test_any_amd_smi_values_give_capped_blocked_or_error_devices(
    infos: list[dict[str, Any]], cap: GpuCap
) -> None:
    devices = []
    for i, info in enumerate(infos):
        device = Device(f"amd-{i}", 100, 400, 300)
        device.info = dict(info)
        devices.append(device)
    smi = binding(devices)
    outcomes = AmdSmiGpus(Originals(), smi).apply(cap)
    assert len(outcomes) == len(devices)
    for outcome in outcomes:
        assert outcome.result in (Result.APPLIED, Result.BLOCKED, Result.ERROR)
        if outcome.result is not Result.APPLIED:
            assert outcome.reason
    for call in smi.calls:
        if call.startswith("set "):
            _, uuid, microwatts = call.split()
            info = infos[int(uuid.split("-")[1])]
            low, high = info["min_power_cap"], info["max_power_cap"]
            assert isinstance(low, int)
            assert isinstance(high, int)
            assert low <= int(microwatts) <= high, (call, info)


# -- NVML: the fake libnvidia-ml.so.1 (tests/support/fake_nvml.py) through NVIDIA's own binding, its
# -- devices holding any unsigned milliwatt values NVML's API can return (min above max,
# -- zeros, limits outside their range) and any failure mode the fake knows.

u32 = st.one_of(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 999, 1000, 2**31, 2**32 - 1]))
fake_gpus = st.lists(
    st.tuples(u32, u32, u32, u32, u32,
              st.sampled_from(["none", "none", "not_supported", "no_permission", "lost",
                               "sticky"])),
    min_size=1, max_size=3,
)


@settings(max_examples=examples(100))
@given(rows=fake_gpus, cap=caps)
def test_any_nvml_values_give_capped_blocked_or_error_devices(
    fake_nvml_state: Any, rows: list[tuple[int, int, int, int, int, str]], cap: GpuCap
) -> None:
    from agentpool.backends.gpu.nvml import NvmlGpus
    from tests.support.fake_nvml import FakeGpu

    gpus = [
        FakeGpu(f"GPU-{i}", "Fake", lo / 1000, hi / 1000, d / 1000, lim / 1000, p / 1000, fail)
        for i, (lo, hi, d, lim, p, fail) in enumerate(rows)
    ]
    fake_nvml_state.write(gpus)
    outcomes = NvmlGpus(Originals()).apply(cap)
    assert len(outcomes) == len(gpus)
    for outcome in outcomes:
        assert outcome.result in (Result.APPLIED, Result.BLOCKED, Result.ERROR)
        if outcome.result is not Result.APPLIED:
            assert outcome.reason
    _, after = fake_nvml_state.read()
    for before, now in zip(gpus, after, strict=True):
        if now.limit_w != before.limit_w:  # written: only ever within the device's range
            assert before.min_w <= now.limit_w <= before.max_w, (before, now)
