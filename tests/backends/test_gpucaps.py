"""A GPU cap resolved against each device's own limits: percent of its maximum, then clamped."""

from __future__ import annotations

import pytest

from agentpool.backends.gpucaps import DeviceLimits, limits_problem, resolve_cap
from agentpool.resources.desired import GpuCap


@pytest.mark.parametrize(
    ("cap", "limits", "target", "clamped"),
    [
        (GpuCap(watts_per_gpu=250), DeviceLimits(100, 400), 250, 250),
        (GpuCap(watts_per_gpu=50), DeviceLimits(100, 400), 50, 100),
        (GpuCap(watts_per_gpu=500), DeviceLimits(100, 400), 500, 400),
        (GpuCap(pct_of_max=50), DeviceLimits(100, 400), 200, 200),
        (GpuCap(pct_of_max=50), DeviceLimits(150, 250), 125, 150),
        (GpuCap(pct_of_max=100), DeviceLimits(150, 250), 250, 250),
    ],
)
def test_resolve_against_each_device(
    cap: GpuCap, limits: DeviceLimits, target: float, clamped: float
) -> None:
    assert resolve_cap(cap, limits) == (target, clamped)


@pytest.mark.parametrize(
    ("limits", "usable"),
    [
        (DeviceLimits(100, 400), True),
        (DeviceLimits(0, 400), True),
        (DeviceLimits(400, 400), True),
        (DeviceLimits(0, 0), False),
        (DeviceLimits(500, 400), False),
        (DeviceLimits(-1, 400), False),
        (DeviceLimits(100, float("nan")), False),
        (DeviceLimits(100, float("inf")), False),
    ],
)
def test_a_range_no_cap_fits_is_a_problem_naming_it(limits: DeviceLimits, usable: bool) -> None:
    problem = limits_problem(limits)
    assert (problem is None) is usable
    if problem is not None:
        assert f"max {limits.max_watts:g} W" in problem
