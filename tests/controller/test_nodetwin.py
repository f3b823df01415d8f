"""NodeController on Joulie's current API: NodeTwin desired state and percent-of-max caps.

Operator-shaped NodeTwins (watts only, percent only, both, neither), percent
resolution on realistic sysfs trees (1 and 2 sockets, a floor from
``min_power_uw``, locked limits, no max file) and the fallback to throttling
over HTTP against the real PowerSim server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentpool.resources.nodeinputs import NodeApi
from agentpool.resources.routing import (
    ControlMode,
    ControlType,
    HttpEndpoint,
    NodeRouting,
    Routing,
    SourceType,
)
from agentpool.results import Backend, Result
from agentpool.sim.objects import twin_name
from agentpool.sim.power.model import DVFS_ACTION, RAPL_ACTION, RequestKind
from agentpool.sim.power.server import PowerSim
from agentpool.sim.sysfs.trees import intel_2socket, read_only_rapl
from tests.controller.harness import NODE, PL1, SMAX, Harness, twin
from tests.support.sysfs import changes, settings_of


def pl1_watts(root: Path, files: list[str]) -> list[float]:
    return [int((root / f).read_text()) / 1e6 for f in files]


@pytest.mark.parametrize(("packages", "tdp"), [(1, 205.0), (2, 165.0)])
@pytest.mark.parametrize("pct", [37.5, 60, 100])
def test_percent_on_host_is_within_a_watt_of_pct_times_max(
    tmp_path: Path, packages: int, tdp: float, pct: float
) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root, packages=packages, tdp_watts=tdp):
        h.set(node_twin=twin(pct=pct), api=NodeApi.NODETWIN)
        result = h.tick()
        assert (result.backend, result.result) == (Backend.RAPL, Result.APPLIED)
        # A percent of one package's maximum, written to every package (as Joulie's agent).
        expected = pct / 100 * tdp
        for watts in pl1_watts(h.root, PL1[:packages]):
            assert abs(watts - expected) <= 1.0, (watts, expected)
        assert f"{pct:g}% of max {tdp:g} W" in result.message
        assert h.metric("joulie_cpu_max_power_watts") == tdp
        assert h.metric("joulie_policy_cap_pct_of_max") == pct
        assert h.metric("joulie_policy_cap_watts", policy=twin_name(NODE)) == pytest.approx(
            expected, abs=0.01
        )


def test_watts_win_over_percent(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root):
        h.set(node_twin=twin(cap=75, pct=10), api=NodeApi.NODETWIN)
        result = h.tick()
        assert (result.backend, result.result) == (Backend.RAPL, Result.APPLIED)
        assert pl1_watts(h.root, PL1) == [75.0, 75.0]
        assert "% of max" not in result.message


def test_neither_watts_nor_percent_is_nothing_to_enforce(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root):
        before = settings_of(h.root)
        h.set(node_twin=twin(), api=NodeApi.NODETWIN)
        result = h.tick()
        assert (result.backend, result.result) == (Backend.NONE, Result.NONE)
        assert "NodeTwin 'worker-0' sets neither" in result.message
        h.set(api=NodeApi.NODETWIN)
        assert h.tick().message == "nothing to enforce: no NodeTwin targets this node"
        assert changes(before, settings_of(h.root)) == {}


@pytest.mark.parametrize(
    ("cpu", "field"),
    [
        ({"packagePowerCapPctOfMax": 0}, "spec.cpu.packagePowerCapPctOfMax"),
        ({"packagePowerCapPctOfMax": 140}, "spec.cpu.packagePowerCapPctOfMax"),
        ({"packagePowerCapPctOfMax": "60%"}, "spec.cpu.packagePowerCapPctOfMax"),
        ({"packagePowerCapWatts": 0}, "spec.cpu.packagePowerCapWatts"),
    ],
)
def test_malformed_twin_is_an_error_naming_the_field(
    tmp_path: Path, cpu: dict[str, Any], field: str
) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root):
        before = settings_of(h.root)
        bad = twin()
        bad["spec"]["cpu"] = cpu
        h.set(node_twin=bad, api=NodeApi.NODETWIN)
        result = h.tick()
        assert result.result is Result.ERROR
        assert result.message.startswith(f"NodeTwin 'worker-0': {field}:")
        assert changes(before, settings_of(h.root)) == {}


def test_percent_is_raised_to_the_zones_minimum(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root, tdp_watts=165.0, min_watts=60.0):
        h.set(node_twin=twin(pct=20), api=NodeApi.NODETWIN)  # 20% of 165 W = 33 W < 60 W
        result = h.tick()
        assert result.result is Result.APPLIED
        assert pl1_watts(h.root, PL1) == [60.0, 60.0]


def test_no_max_file_throttles_by_100_minus_pct_and_says_so(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root, max_files=False) as tree:
        before = settings_of(h.root)
        h.set(node_twin=twin(pct=70), api=NodeApi.NODETWIN)
        result = h.tick()
        assert (result.backend, result.result) == (Backend.DVFS, Result.APPLIED)
        assert "maximum unknown" in result.message
        assert "has no readable PL1 max_power_uw" in result.message
        assert "throttling CPUs by 30% instead" in result.message
        changed = changes(before, settings_of(h.root))
        # ceil(4 policies x 30%) = 2 policies throttled, RAPL untouched.
        assert set(changed) == {SMAX.format(i=0), SMAX.format(i=1)}
        assert h.metric("joulie_dvfs_throttle_pct") == 30
        # A watts cap afterwards: RAPL takes over and the throttle is released.
        h.set(node_twin=twin(cap=200), api=NodeApi.NODETWIN)
        assert h.tick().backend is Backend.RAPL
        assert changes(before, settings_of(h.root)).keys() == set(PL1)
        assert len(tree.policies) == 4


def test_locked_rapl_with_known_max_falls_back_to_dvfs_with_the_resolved_cap(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    with read_only_rapl(h.root):
        h.set(node_twin=twin(pct=50), api=NodeApi.NODETWIN)
        result = h.tick()
        assert result.backend is Backend.DVFS
        assert "50% of max 165 W" in result.message
        assert "DVFS throttle 0% for cap 165 W (82.5 W per package x 2)" in result.message


@pytest.fixture
def sim() -> Iterator[PowerSim]:
    with PowerSim(seed=3) as power:
        yield power


def http_routing(sim: PowerSim, telemetry: bool = True) -> NodeRouting:
    return NodeRouting(Routing(
        source_http=HttpEndpoint(sim.telemetry_endpoint, 5) if telemetry else None,
        source=SourceType.HTTP if telemetry else SourceType.NONE,
        control=ControlType.HTTP,
        control_http=HttpEndpoint(sim.control_endpoint, 5),
        mode=ControlMode.AUTO,
    ))


def test_http_percent_resolves_against_nodehardware(tmp_path: Path, sim: PowerSim) -> None:
    h = Harness(tmp_path, routing=http_routing(sim, telemetry=False))
    h.set(node_twin=twin(pct=40), api=NodeApi.NODETWIN, hardware_max_w=500.0)
    result = h.tick()
    assert (result.backend, result.result) == (Backend.RAPL, Result.APPLIED)
    assert sim.state(NODE).cap_watts == 200.0
    assert "40% of max 500 W (NodeHardware cpu.capRange)" in result.message


def test_http_percent_resolves_against_telemetry(tmp_path: Path, sim: PowerSim) -> None:
    sim.add_node(NODE, max_watts=300.0)
    h = Harness(tmp_path, routing=http_routing(sim))
    h.set(node_twin=twin(pct=50), api=NodeApi.NODETWIN)
    result = h.tick()
    assert result.result is Result.APPLIED
    assert sim.state(NODE).cap_watts == 150.0
    assert "telemetry cpu.packagePowerMaxWatts" in result.message


def test_http_percent_without_maximum_posts_a_throttle(tmp_path: Path, sim: PowerSim) -> None:
    h = Harness(tmp_path, routing=http_routing(sim, telemetry=False))
    h.set(node_twin=twin(pct=65), api=NodeApi.NODETWIN)
    result = h.tick()
    assert (result.backend, result.result) == (Backend.DVFS, Result.APPLIED)
    assert "neither NodeHardware nor telemetry reports a CPU maximum" in result.message
    assert "throttling CPUs by 35% instead" in result.message
    controls = sim.requests(kind=RequestKind.CONTROL)
    assert [(r.body["action"], r.body["throttlePct"]) for r in controls] == [(DVFS_ACTION, 35)]
    assert sim.state(NODE).throttle_pct == 35
    # A maximum becomes known (NodeHardware): RAPL applies and the throttle is released.
    h.set(node_twin=twin(pct=65), api=NodeApi.NODETWIN, hardware_max_w=400.0)
    assert h.tick().backend is Backend.RAPL
    actions = [
        (r.body["action"], r.body["throttlePct"]) for r in sim.requests(kind=RequestKind.CONTROL)
    ]
    assert actions[1:] == [(RAPL_ACTION, -1), (DVFS_ACTION, 0)]
    assert sim.state(NODE).cap_watts == 260.0
    assert sim.state(NODE).throttle_pct == 0


def test_stale_desired_state_relaxes_then_recovers(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root):
        before = settings_of(h.root)
        h.set(node_twin=twin(cap=60), api=NodeApi.NODETWIN)
        assert h.tick().result is Result.APPLIED
        assert pl1_watts(h.root, PL1) == [60.0, 60.0]
        h.set(node_twin=twin(cap=60), api=NodeApi.NODETWIN, spec_stale=True)
        result = h.tick()
        assert (result.backend, result.result) == (Backend.NONE, Result.NONE)
        assert result.message == (
            "desired state not confirmed from the API for 5m (watches failing); "
            "SPEC_STALE_ACTION=relax: host limits restored, throttle released"
        )
        assert changes(before, settings_of(h.root)) == {}
        h.set(node_twin=twin(cap=60), api=NodeApi.NODETWIN)
        result = h.tick()
        assert result.result is Result.APPLIED
        assert result.message.startswith("desired state confirmed again after a stale period: ")
        assert pl1_watts(h.root, PL1) == [60.0, 60.0]
        assert not h.tick().message.startswith("desired state confirmed again")


def test_stale_desired_state_kept_when_asked(tmp_path: Path) -> None:
    from agentpool.config.options import StaleAction

    h = Harness(tmp_path, spec_stale_action=StaleAction.KEEP)
    with intel_2socket(h.root):
        h.set(node_twin=twin(cap=50), api=NodeApi.NODETWIN, spec_stale=True)
        result = h.tick()
        assert result.result is Result.APPLIED
        assert "SPEC_STALE_ACTION=keep: RAPL PL1 50 W" in result.message
        assert pl1_watts(h.root, PL1) == [50.0, 50.0]


@pytest.mark.parametrize("pct", [3.5e-320, 5e-324, 1e-300])
def test_an_absurdly_small_percent_resolves_to_1_w_not_0_w(tmp_path: Path, pct: float) -> None:
    # Legal (0 < pct <= 100) but absurd: its watts rounded to 0.0, a 0 W cap written to PL1.
    h = Harness(tmp_path)
    with intel_2socket(h.root):
        h.set(node_twin=twin(pct=pct), api=NodeApi.NODETWIN)
        result = h.tick()
        assert result.result is Result.APPLIED
        assert result.observed["capWatts"] == 1.0
        assert result.observed["raplLimitsUw"] == {
            "intel-rapl:0": 1_000_000, "intel-rapl:1": 1_000_000
        }
