"""Host GPU backends against any value a driver binding can report.

AMD SMI through a stand-in of the ``amdsmi`` module (tests/backends/gpu/
test_amdsmi.py says why), whose power-cap fields hold anything the real
binding returns (integers of any size, "N/A", missing keys) or worse. Each
device comes out applied within its own [min, max], or blocked/error with a
reason; the binding is never asked to set a cap outside that range, and no
exception escapes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.backends.gpu.amdsmi import AmdSmiGpus
from agentpool.backends.sysfs.files import Originals
from agentpool.spec.values import GpuCap, Result
from tests.backends.gpu.test_amdsmi import Device, binding
from tests.properties.budget import examples

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
