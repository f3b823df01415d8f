"""Percent-of-max caps: the maximum from PL1 constraints, NodeHardware or telemetry, or unknown."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentpool.backends.sysfs.rapl import discover_package_zones
from agentpool.controller import percent
from agentpool.resources.routing import HttpEndpoint
from agentpool.sim.sysfs.trees import intel_2socket, no_rapl, read_int


def test_host_maximum_is_one_packages_pl1_maximum(tmp_path: Path) -> None:
    # The cap is each package's limit, so a percent means a percent of one package's
    # maximum (Joulie's agent: the smallest constraint_0_max_power_uw), not of their sum.
    with intel_2socket(tmp_path) as tree:
        zones = discover_package_zones(tree.root)
        maximum = percent.host_maximum(zones)
        maxima = [read_int(z.max_file) for z in zones if z.max_file is not None]
        assert maxima == [165_000_000, 165_000_000]
        assert maximum.watts == 165.0
        assert maximum.source == "per-package PL1 max of intel-rapl:0, intel-rapl:1"
        assert maximum.resolve(100) == 165.0
        assert maximum.resolve(50) == 82.5  # no min_power_uw here: no floor


def test_packages_of_different_maxima_resolve_against_the_smallest(tmp_path: Path) -> None:
    with intel_2socket(tmp_path, min_watts=30.0) as tree:
        zones = discover_package_zones(tree.root)
        (zones[1].path / "constraint_0_max_power_uw").write_text("150000000\n")
        (zones[1].path / "constraint_0_min_power_uw").write_text("40000000\n")
        maximum = percent.host_maximum(zones)
        assert (maximum.watts, maximum.floor_watts) == (150.0, 40.0)
        assert maximum.resolve(60) == 90.0
        assert maximum.resolve(10) == 40.0  # every package takes it: the largest minimum


def test_no_writable_zone_means_no_maximum(tmp_path: Path) -> None:
    with no_rapl(tmp_path) as tree:
        maximum = percent.host_maximum(discover_package_zones(tree.root))
    assert maximum.watts is None
    assert maximum.resolve(50) is None
    assert percent.describe(50, maximum) == (
        None, "maximum unknown (no RAPL package zone with a PL1 limit)"
    )


def test_http_maximum_prefers_the_nodehardware_then_telemetry() -> None:
    assert percent.http_maximum(400.0, 300.0).watts == 400.0
    assert percent.http_maximum(None, 300.0).source == "telemetry cpu.packagePowerMaxWatts"
    assert percent.http_maximum(0.0, -1.0).watts is None


@pytest.mark.parametrize(("pct", "throttle"), [(60, 40), (100, 0), (0.4, 100), (37.5, 62)])
def test_an_unknown_maximum_throttles_by_100_minus_pct(pct: float, throttle: int) -> None:
    assert percent.throttle_for(pct) == throttle


def test_describe_says_how_the_cap_resolved() -> None:
    cap, note = percent.describe(60, percent.Maximum(400.0, "NodeHardware cpu.capRange"))
    assert cap == 240.0
    assert note == "60% of max 400 W (NodeHardware cpu.capRange) = 240.0 W"


def test_the_telemetry_maximum_is_asked_until_known(tmp_path: Path) -> None:
    from agentpool.sim.power.server import PowerSim

    with PowerSim(seed=1) as sim:
        maxima = percent.TelemetryMaximum("n")
        endpoint = HttpEndpoint(sim.telemetry_endpoint, 5)
        assert maxima.from_telemetry(None) is None
        first = maxima.from_telemetry(endpoint)
        assert first is not None
        assert first > 0
        asked = len(sim.requests("n"))
        assert maxima.from_telemetry(endpoint) == first
        assert len(sim.requests("n")) == asked  # known: not asked again
