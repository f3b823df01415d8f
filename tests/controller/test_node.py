"""NodeController end to end (docs/modes.md): raw CR JSON in, TickResult and host files out.

Real sysfs-shaped trees (agentpool.sim.sysfs.trees), energy counters moved by
LiveSysfs, and the PowerSim HTTP server on 127.0.0.1. The only stand-in is the
clock: the controller takes ``clock=`` so simulated seconds pass between ticks
without sleeping.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from agentpool import __version__
from agentpool.config.settings import DvfsSettings
from agentpool.controller.node import NO_BACKEND
from agentpool.resources.nodeinputs import NodeApi
from agentpool.results import Backend, Result, TickResult
from agentpool.sim.power.model import DVFS_ACTION, RAPL_ACTION, FaultKind, RequestKind
from agentpool.sim.power.server import PowerSim
from agentpool.sim.sysfs.dynamics import LiveModel, LiveSysfs
from agentpool.sim.sysfs.trees import (
    intel_2socket,
    no_rapl,
    read_only_rapl,
)
from tests.controller.harness import JOULIE, NODE, PL1, SMAX, VENDOR, Harness, npp, tp
from tests.support.sysfs import changes, settings_of, snapshot

# -- host RAPL ----------------------------------------------------------------------------------


def test_host_rapl_on_intel_then_restore(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root) as tree:
        before = snapshot(tree.root)
        h.set(power_profile=npp(120))
        result = h.tick()
        # The cap is each package's limit (Joulie's agent writes it to every package zone).
        assert result == TickResult(
            Backend.RAPL,
            Result.APPLIED,
            "RAPL PL1 120 W per package on 2 package zone(s) (intel-rapl:0, intel-rapl:1)",
            {
                "capWatts": 120.0,
                "profile": "eco",
                "raplLimitsUw": {"intel-rapl:0": 120_000_000, "intel-rapl:1": 120_000_000},
            },
        )
        assert changes(before, snapshot(tree.root)) == {
            PL1[0]: "120000000\n", PL1[1]: "120000000\n"
        }
        assert h.backend_mode() == {"none": 0.0, "rapl": 1.0, "dvfs": 0.0}
        assert h.metric("joulie_policy_cap_watts", policy="worker-0-eco") == 120.0

        # A new cap (float in the JSON) on each again; restore puts back the originals.
        h.set(power_profile=npp(125.25))
        assert h.tick(20).result is Result.APPLIED
        assert changes(before, snapshot(tree.root)) == {
            PL1[0]: "125250000\n",
            PL1[1]: "125250000\n",
        }
        assert h.controller.restore() == []
        assert snapshot(tree.root) == before


def test_the_cap_series_is_named_after_the_object_and_a_profile_switch_changes_its_value(
    tmp_path: Path,
) -> None:
    # Joulie's agent labels the cap with the policy object's name, so that its "Policy
    # Reassignment Events" panel, changes(joulie_policy_cap_watts[5m]), counts a switch.
    h = Harness(tmp_path)
    with intel_2socket(h.root):
        eco, performance = npp(120), npp(200, profile="performance")
        performance["metadata"]["name"] = eco["metadata"]["name"] = "operator-chose-this"
        h.set(power_profile=eco)
        h.tick()
        h.set(power_profile=performance)
        h.tick(20)
        caps = {
            s.labels["policy"]: s.value
            for family in h.registry.collect() if family.name == "joulie_policy_cap_watts"
            for s in family.samples
        }
        assert caps == {"operator-chose-this": 200.0}


def test_no_power_profile_means_nothing_to_enforce(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root) as tree:
        before = snapshot(tree.root)
        h.set()
        assert h.tick() == TickResult(
            Backend.NONE, Result.NONE, "nothing to enforce: no NodePowerProfile targets this node"
        )
        h.set(power_profile=npp(None, "performance"))
        result = h.tick()
        assert (result.backend, result.result) == (Backend.NONE, Result.NONE)
        assert result.message == (
            "nothing to enforce: NodePowerProfile 'worker-0-performance' sets no "
            "cpu.packagePowerCapWatts"
        )
        assert snapshot(tree.root) == before
        assert h.backend_mode() == {"none": 1.0, "rapl": 0.0, "dvfs": 0.0}


def test_read_only_rapl_falls_back_to_dvfs_without_writing_rapl(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with read_only_rapl(h.root) as tree:
        before = snapshot(tree.root)
        h.set(power_profile=npp(120))
        result = h.tick()
        assert (result.backend, result.result) == (Backend.DVFS, Result.APPLIED)
        # DVFS holds the sum of the packages' power under the cap times the packages.
        assert result.message.startswith(
            "DVFS throttle 0% for cap 240 W (120 W per package x 2); RAPL unavailable: "
        )
        assert "constraint_0_power_limit_uw" in result.message
        # First tick: the energy meter only primes, DVFS holds at 0, nothing is written.
        assert result.observed["throttlePct"] == 0
        assert result.observed["observedPowerWatts"] is None
        assert snapshot(tree.root) == before
        assert h.backend_mode() == {"none": 0.0, "rapl": 0.0, "dvfs": 1.0}


def test_node_known_to_have_no_rapl_skips_it(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root) as tree:
        before = snapshot(tree.root)
        h.set(labels={VENDOR: "ARM"}, power_profile=npp(120))
        result = h.tick()
        assert result.backend is Backend.DVFS
        assert result.message == (
            "DVFS throttle 0% for cap 240 W (120 W per package x 2); CPU vendor ARM has no RAPL"
        )
        assert snapshot(tree.root) == before  # the writable RAPL files were not touched


def test_no_rapl_and_no_cpufreq_is_blocked(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with no_rapl(h.root, cpufreq=None) as tree:
        before = snapshot(tree.root)
        h.set(power_profile=npp(120))
        result = h.tick()
        assert result == TickResult(
            Backend.NONE, Result.BLOCKED, NO_BACKEND, {"capWatts": 120.0, "profile": "eco"}
        )
        assert result.message == (
            "RAPL unavailable, no cpufreq host control, and no HTTP control backend"
        )
        assert snapshot(tree.root) == before


@pytest.mark.parametrize(
    ("profile", "field"),
    [
        (npp(0), "spec.cpu.packagePowerCapWatts"),
        (npp(-5), "spec.cpu.packagePowerCapWatts"),
        (npp("120W"), "spec.cpu.packagePowerCapWatts"),
        (npp(120, profile="turbo"), "spec.profile"),
    ],
)
def test_malformed_power_profile_is_an_error_naming_the_field(
    tmp_path: Path, profile: dict[str, Any], field: str
) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root) as tree:
        before = snapshot(tree.root)
        h.set(power_profile=profile)
        result = h.tick()
        assert (result.backend, result.result) == (Backend.NONE, Result.ERROR)
        assert f": {field}: " in result.message
        assert result.message.startswith("NodePowerProfile ")
        assert snapshot(tree.root) == before
        assert h.metric("joulie_reconcile_errors_total") == 1.0
        h.tick(20)
        assert h.metric("joulie_reconcile_errors_total") == 2.0


def test_malformed_power_profile_after_a_good_one_writes_nothing_more(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root) as tree:
        h.set(power_profile=npp(120))
        h.tick()
        applied = snapshot(tree.root)
        h.set(power_profile=npp(0))
        assert h.tick(20).result is Result.ERROR
        assert snapshot(tree.root) == applied
        # The cap series is tombstoned: no cap is being enforced by this profile any more.
        value = h.metric("joulie_policy_cap_watts", policy="worker-0-eco")
        assert value is not None
        assert value != value  # NaN


def test_malformed_telemetry_profile_is_an_error_naming_the_field(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root) as tree:
        before = snapshot(tree.root)
        bad = tp(control="http://127.0.0.1:9/c", mode="turbo")
        h.set(power_profile=npp(120), telemetry_profile=bad)
        result = h.tick()
        assert (result.backend, result.result) == (Backend.NONE, Result.ERROR)
        assert "spec.controls.cpu.http.mode" in result.message
        assert snapshot(tree.root) == before


def test_simulate_only_writes_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path, simulate_only=True)
    with intel_2socket(h.root) as tree:
        before = snapshot(tree.root)
        h.set(power_profile=npp(120))
        result = h.tick()
        assert (result.backend, result.result) == (Backend.NONE, Result.APPLIED)
        assert result.message == (
            "simulate-only: would cap CPU packages at 120 W via RAPL PL1 on intel-rapl:0, "
            "intel-rapl:1; nothing written"
        )
        assert snapshot(tree.root) == before
        assert h.controller.restore() == []
        assert snapshot(tree.root) == before


def test_simulate_only_sends_no_control_request(tmp_path: Path, sim: PowerSim) -> None:
    h = Harness(tmp_path, simulate_only=True)
    h.set(power_profile=npp(120), telemetry_profile=tp(control=sim.control_endpoint))
    result = h.tick()
    assert result.result is Result.APPLIED
    assert result.message.startswith("simulate-only: ")
    assert f"HTTP control {sim.url}/control/{NODE} (mode auto)" in result.message
    assert sim.requests(kind=RequestKind.CONTROL) == []


def test_simulate_only_plans_dvfs_where_rapl_is_locked(tmp_path: Path) -> None:
    h = Harness(tmp_path, simulate_only=True)
    with no_rapl(h.root) as tree:
        before = snapshot(tree.root)
        h.set(power_profile=npp(120))
        assert "via DVFS on 4 cpufreq policies" in h.tick().message
        assert snapshot(tree.root) == before


def test_controls_type_none_is_blocked(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root) as tree:
        before = snapshot(tree.root)
        profile = tp()
        profile["spec"]["controls"] = {"cpu": {"type": "none"}}
        h.set(power_profile=npp(120), telemetry_profile=profile)
        result = h.tick()
        assert (result.backend, result.result) == (Backend.NONE, Result.BLOCKED)
        assert snapshot(tree.root) == before


# -- HTTP control -------------------------------------------------------------------------------


def control_bodies(sim: PowerSim) -> list[tuple[str, float, int]]:
    return [
        (r.body["action"], r.body["capWatts"], r.body["throttlePct"])
        for r in sim.requests(NODE, RequestKind.CONTROL)
    ]


def test_http_control_auto_applies_rapl(tmp_path: Path, sim: PowerSim) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root) as tree:
        before = snapshot(tree.root)
        h.set(
            power_profile=npp(120),
            telemetry_profile=tp(control=sim.control_endpoint, telemetry=sim.telemetry_endpoint),
        )
        result = h.tick()
        assert (result.backend, result.result) == (Backend.RAPL, Result.APPLIED)
        assert result.message == "RAPL cap 120 W over HTTP: RAPL cap set to 120 W"
        assert result.observed["capWatts"] == 120.0
        assert control_bodies(sim) == [(RAPL_ACTION, 120.0, -1)]
        assert sim.state(NODE).cap_watts == 120.0
        assert snapshot(tree.root) == before  # HTTP control touches no host file
        assert h.backend_mode() == {"none": 0.0, "rapl": 1.0, "dvfs": 0.0}


def test_http_control_mode_dvfs(tmp_path: Path, sim: PowerSim) -> None:
    h = Harness(tmp_path)
    h.set(
        power_profile=npp(120),
        telemetry_profile=tp(
            control=sim.control_endpoint, mode="dvfs", telemetry=sim.telemetry_endpoint
        ),
    )
    results = [h.tick(20 if i else 0) for i in range(4)]
    # 260 W vs 130 W upper: above at once; trip 2 -> 10 %, cooldown, then the EMA
    # (alpha 0.3) of 246 W, still above: 20 %.
    assert [r.observed["throttlePct"] for r in results] == [0, 10, 10, 20]
    assert control_bodies(sim) == [(DVFS_ACTION, 120.0, p) for p in (0, 10, 10, 20)]
    assert all(r.backend is Backend.DVFS and r.result is Result.APPLIED for r in results)
    reason = "HTTP control mode is dvfs"
    # Above the band: the status says so (Joulie's first reading only counts, then steps).
    assert results[0].message == f"throttling: 260 W > cap 120 W, holding 0%; {reason}"
    assert results[1].message == f"throttling: 260 W > cap 120 W, 0% -> 10%; {reason}"
    assert results[2].observed["observedPowerWatts"] == 246.0
    assert results[2].observed["emaPowerWatts"] == pytest.approx(0.3 * 246 + 0.7 * 260, abs=1e-3)
    assert sim.state(NODE).throttle_pct == 20.0
    assert h.metric("joulie_dvfs_actions_total", action="throttle_up") == 2.0
    assert h.metric("joulie_dvfs_throttle_pct") == 20.0


@pytest.mark.parametrize("restore_on_exit", [True, False])
def test_a_graceful_stop_releases_the_http_throttle(
    tmp_path: Path, sim: PowerSim, restore_on_exit: bool
) -> None:
    # Nobody else would: a pool pod deleted with its nodes throttled left them so.
    h = Harness(tmp_path, restore_on_exit=restore_on_exit)
    h.set(
        power_profile=npp(120),
        telemetry_profile=tp(
            control=sim.control_endpoint, mode="dvfs", telemetry=sim.telemetry_endpoint
        ),
    )
    for i in range(3):
        h.tick(20 if i else 0)
    assert sim.state(NODE).throttle_pct == 10.0
    sim.clear_requests()
    assert h.controller.restore() == []
    if restore_on_exit:
        assert control_bodies(sim) == [(DVFS_ACTION, 0.0, 0)]
        assert sim.state(NODE).throttle_pct == 0.0
        assert h.controller.restore() == []  # released once
        assert len(control_bodies(sim)) == 1
    else:
        assert control_bodies(sim) == []
        assert sim.state(NODE).throttle_pct == 10.0


def test_a_throttle_release_that_fails_is_reported(tmp_path: Path, sim: PowerSim) -> None:
    h = Harness(tmp_path)
    h.set(
        power_profile=npp(120),
        telemetry_profile=tp(
            control=sim.control_endpoint, mode="dvfs", telemetry=sim.telemetry_endpoint
        ),
    )
    for i in range(3):
        h.tick(20 if i else 0)
    sim.set_fault(NODE, FaultKind.SERVER_ERROR, status=503)
    (problem,) = h.controller.restore()
    assert problem.startswith("releasing the HTTP throttle: ")
    assert "503" in problem


def test_adaptive_dvfs_settles_and_its_status_says_when_the_cap_is_not_held(
    tmp_path: Path, sim: PowerSim
) -> None:
    h = Harness(tmp_path, dvfs=DvfsSettings())  # the default controller: adaptive
    h.set(
        power_profile=npp(150),
        telemetry_profile=tp(
            control=sim.control_endpoint, mode="dvfs", telemetry=sim.telemetry_endpoint
        ),
    )
    results = [h.tick(20 if i else 0) for i in range(5)]
    # 260 W: the prior wants 89 %, clamped to 50 % -> 190 W, still above: wait a tick;
    # the secant (k 0.00523) puts 144 W at 84 % -> 142.4 W, inside 0.90..1.03 x cap: held.
    assert [r.observed["throttlePct"] for r in results] == [50, 50, 84, 84, 84]
    assert control_bodies(sim) == [(DVFS_ACTION, 150.0, p) for p in (50, 50, 84, 84, 84)]
    assert all(r.result is Result.APPLIED for r in results)
    reason = "HTTP control mode is dvfs"
    assert [r.message for r in results] == [
        f"throttling: 260 W > cap 150 W, 0% -> 50%; {reason}",
        f"throttling: 190 W > cap 150 W, holding 50%; {reason}",
        f"throttling: 190 W > cap 150 W, 50% -> 84%; {reason}",
        # Held: the message no longer moves with the power, so the status is not rewritten.
        f"DVFS throttle 84% for cap 150 W; {reason}",
        f"DVFS throttle 84% for cap 150 W; {reason}",
    ]
    assert sim.state(NODE).expected_power_watts == pytest.approx(142.4)
    assert h.metric("joulie_dvfs_cap_error_watts") == pytest.approx(142.4 - 150.0)
    assert h.metric("joulie_dvfs_actions_total", action="throttle_up") == 2.0


def test_a_node_pinned_over_its_cap_keeps_one_status_message(
    tmp_path: Path, sim: PowerSim
) -> None:
    h = Harness(tmp_path, dvfs=DvfsSettings(max_step_pct=100))
    h.set(
        power_profile=npp(100),  # under what full throttle reaches: 60 + 200 x 0.3 = 120 W
        telemetry_profile=tp(
            control=sim.control_endpoint, mode="dvfs", telemetry=sim.telemetry_endpoint
        ),
    )
    messages = []
    for i, load in enumerate((1.0, 1.0, 0.99, 0.98, 1.0)):
        sim.set_load(NODE, load)  # the load wanders, so the power read does too
        messages.append(h.tick(20 if i else 0).message)
    reason = "HTTP control mode is dvfs"
    assert messages == [
        f"throttling: 260 W > cap 100 W, 0% -> 100%; {reason}",
        # Pinned at 100 % and over the cap: said once, with the watts of the first tick,
        # so the coalescing status writer does not rewrite the status every tick.
        *[f"throttling: 120 W > cap 100 W, holding 100%; {reason}"] * 4,
    ]
    # The error is live: the mean of the readings since the wait (119.4, 118.8, 120 W) - cap.
    assert h.metric("joulie_dvfs_cap_error_watts") == pytest.approx(19.4)
    # Nor does anything else of its status move but the readings.
    results = [h.tick(20) for _ in range(2)]
    sim.set_load(NODE, 0.97)
    results.append(h.tick(20))
    readings = {r.observed["observedPowerWatts"] for r in results}
    assert len(readings) > 1
    assert {repr(r.status_key()) for r in results} == {repr(results[0].status_key())}


def test_every_http_request_of_a_node_names_the_pod_and_shard(
    tmp_path: Path, sim: PowerSim
) -> None:
    h = Harness(tmp_path, pod_name="joulie-agent-pool-2", pool_shard_id=2)
    h.set(
        power_profile=npp(120),
        telemetry_profile=tp(
            control=sim.control_endpoint, mode="dvfs", telemetry=sim.telemetry_endpoint
        ),
    )
    h.tick()
    h.tick(20)
    agents = {(r.kind, r.user_agent) for r in sim.requests(NODE)}
    expected = f"agentpool/{__version__} (joulie-agent-pool-2, shard 2)"
    assert agents == {(RequestKind.TELEMETRY, expected), (RequestKind.CONTROL, expected)}


@pytest.mark.parametrize("mode", ["auto", "rapl"])
def test_blocked_rapl_answer_falls_back_to_dvfs_and_recovery_releases_it(
    tmp_path: Path, sim: PowerSim, mode: str
) -> None:
    # Mode rapl too, as Joulie's agent (it reads only mode dvfs): its experiments set rapl
    # where they mean "cap with RAPL", and a refusal is then backed up by the throttle.
    sim.set_behaviour(NODE, "blocked", "RAPL locked by BIOS", action=RAPL_ACTION)
    h = Harness(tmp_path)
    h.set(
        power_profile=npp(120),
        telemetry_profile=tp(
            control=sim.control_endpoint, mode=mode, telemetry=sim.telemetry_endpoint
        ),
    )
    first, second = h.tick(), h.tick(20)
    assert (first.backend, first.result) == (Backend.DVFS, Result.APPLIED)
    assert first.message == (
        "throttling: 260 W > cap 120 W, holding 0%; RAPL blocked: RAPL locked by BIOS"
    )
    assert second.observed["throttlePct"] == 10
    assert control_bodies(sim) == [
        (RAPL_ACTION, 120.0, -1),
        (DVFS_ACTION, 120.0, 0),
        (RAPL_ACTION, 120.0, -1),
        (DVFS_ACTION, 120.0, 10),
    ]
    assert h.backend_mode() == {"none": 0.0, "rapl": 0.0, "dvfs": 1.0}
    # The endpoint takes RAPL again: the throttle DVFS had set is given back.
    sim.set_behaviour(NODE, "applied")
    sim.clear_requests()
    third = h.tick(20)
    assert (third.backend, third.result) == (Backend.RAPL, Result.APPLIED)
    assert control_bodies(sim) == [(RAPL_ACTION, 120.0, -1), (DVFS_ACTION, 120.0, 0)]
    assert sim.state(NODE).throttle_pct == 0.0
    assert h.backend_mode() == {"none": 0.0, "rapl": 1.0, "dvfs": 0.0}
    error = h.metric("joulie_dvfs_cap_error_watts")  # no stale DVFS error once RAPL holds
    assert error is not None
    assert math.isnan(error)


def test_http_control_failure_is_a_tick_error(tmp_path: Path, sim: PowerSim) -> None:
    sim.set_fault(NODE, "5xx", endpoint="control", status=503)
    h = Harness(tmp_path)
    h.set(power_profile=npp(120), telemetry_profile=tp(control=sim.control_endpoint))
    result = h.tick()
    assert result.result is Result.ERROR
    assert "HTTP 503" in result.message
    assert h.metric("joulie_reconcile_errors_total") == 1.0


def test_http_telemetry_failure_in_dvfs_is_a_tick_error(tmp_path: Path, sim: PowerSim) -> None:
    sim.set_fault(NODE, "garbage", endpoint="telemetry")
    h = Harness(tmp_path)
    h.set(
        power_profile=npp(120),
        telemetry_profile=tp(
            control=sim.control_endpoint, mode="dvfs", telemetry=sim.telemetry_endpoint
        ),
    )
    result = h.tick()
    assert (result.backend, result.result) == (Backend.DVFS, Result.ERROR)
    assert result.message.startswith("telemetry: ")
    assert sim.requests(NODE, RequestKind.CONTROL) == []  # no reading, no action posted


def test_http_control_with_host_telemetry_sees_host_power(tmp_path: Path, sim: PowerSim) -> None:
    # Regression: the host energy sample of the tick must reach the DVFS controller;
    # sampling the meter twice at one instant gave "no reading" forever.
    h = Harness(tmp_path)
    with intel_2socket(h.root) as tree:
        live = LiveSysfs(tree, LiveModel(demand_watts=120.0))
        h.set(
            power_profile=npp(150), telemetry_profile=tp(control=sim.control_endpoint, mode="dvfs")
        )
        first = h.tick()
        assert first.observed["observedPowerWatts"] is None  # priming sample
        second = h.tick(10, live)
        assert second.observed["observedPowerWatts"] == pytest.approx(240.0)
        third = h.tick(10, live)
        assert third.observed["throttlePct"] == 10  # 240 W > 160 W twice
        assert control_bodies(sim)[-1] == (DVFS_ACTION, 150.0, 10)


# -- host DVFS end to end -----------------------------------------------------------------------


def test_host_dvfs_end_to_end_then_rapl_comes_back(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with read_only_rapl(h.root) as tree:
        live = LiveSysfs(tree, LiveModel(demand_watts=120.0, idle_watts=25.0))
        before = settings_of(tree.root)
        # 240 W drawn vs 75 W per package, 150 W for both: upper 160, lower 135.
        h.set(power_profile=npp(75))
        trajectory = []
        for i in range(9):
            result = h.tick(10 if i else 0, live)
            assert (result.backend, result.result) == (Backend.DVFS, Result.APPLIED)
            throttled = [
                (tree.root / SMAX.format(i=p)).read_text() == "1500000\n" for p in range(4)
            ]
            trajectory.append((result.observed["throttlePct"], sum(throttled)))
        # Trip 2 at 10 s ticks with a 20 s cooldown: a 10 % step every third tick; 10 %
        # and 20 % of four policies both throttle one (ceil), 30 % throttles two.
        assert trajectory == [
            (0, 0),
            (0, 0),
            (10, 1),
            (10, 1),
            (10, 1),
            (20, 1),
            (20, 1),
            (20, 1),
            (30, 2),
        ]
        assert changes(before, settings_of(tree.root)).keys() >= {
            SMAX.format(i=0),
            SMAX.format(i=1),
        }
        for p in (0, 1):
            assert (tree.root / SMAX.format(i=p)).read_text() == "1500000\n"
        for p in (2, 3):
            assert (tree.root / SMAX.format(i=p)).read_text() == "3500000\n"
        assert h.metric("joulie_dvfs_throttle_pct") == 30.0
        assert h.metric("joulie_dvfs_actions_total", action="throttle_up") == 3.0
        assert h.metric("joulie_dvfs_cpu_max_freq_khz", cpu="0") == 1_500_000
        assert h.metric("joulie_dvfs_cpu_max_freq_khz", cpu="6") == 3_500_000
        # Measured over the last 10 s, when 20 % (one policy of four) was in force:
        # 2 x (25 + 95 x (3 + 1.5/3.5)/4) W.
        assert h.metric("joulie_rapl_package_total_power_watts") == pytest.approx(212.857, abs=1e-3)

        # The BIOS lock goes away (say, after a firmware update): the limit files take writes.
        for path, value in tree.locked.items():
            path.unlink()  # the symlink to the sealed file
            path.write_text(f"{value}\n")
        result = h.tick(10, live)
        assert (result.backend, result.result) == (Backend.RAPL, Result.APPLIED)
        # RAPL enforces now, so the CPUs get their original scaling_max_freq back.
        assert changes(before, settings_of(tree.root)) == {
            PL1[0]: "75000000\n",
            PL1[1]: "75000000\n",
        }
        assert h.backend_mode() == {"none": 0.0, "rapl": 1.0, "dvfs": 0.0}
        assert h.controller.restore() == []
        assert settings_of(tree.root) == before


def host_dvfs_trajectory(tmp_path: Path, cap: float, ticks: int) -> list[tuple[int, float]]:
    """Adaptive DVFS on a 4-policy host of two packages (RAPL locked), ``cap`` the node's
    budget (twice the per-package cap): (throttle, watts measured) per tick."""
    h = Harness(tmp_path, dvfs=DvfsSettings())  # the default controller: adaptive
    out = []
    with read_only_rapl(h.root) as tree:
        # 2 x (25 + 95 x ratio) W, ratio the mean of scaling_max / max over 4 policies:
        # 240, 212.9, 185.7, 158.6 or 131.4 W with 0..4 policies at 1.5 of 3.5 GHz.
        live = LiveSysfs(tree, LiveModel(demand_watts=120.0, idle_watts=25.0))
        h.set(power_profile=npp(cap / 2))
        for i in range(ticks):
            result = h.tick(10 if i else 0, live)
            assert (result.backend, result.result) == (Backend.DVFS, Result.APPLIED)
            throttled = sum(
                (tree.root / SMAX.format(i=p)).read_text() == "1500000\n" for p in range(4)
            )
            # Host writes as ever: ceil(4 x pct / 100) policies, in index order.
            assert throttled == math.ceil(4 * result.observed["throttlePct"] / 100)
            power = result.observed["observedPowerWatts"]
            out.append((result.observed["throttlePct"], round(power or 0.0, 1)))
    return out


def test_adaptive_host_dvfs_moves_in_whole_policies_and_settles(tmp_path: Path) -> None:
    # Cap 165: the hold band 152.6..164.2 W contains the 3-policy level (158.6 W).
    got = host_dvfs_trajectory(tmp_path, 165, 8)
    # Priming; 240 W -> 50 % (prior, clamped; two policies); 185.7 W still above: wait;
    # the secant gives 73.8 %, which takes a third policy: 75 %; then it holds.
    assert got == [(0, 0.0), (50, 240.0), (50, 185.7), (75, 185.7)] + [(75, 158.6)] * 4


def test_adaptive_host_dvfs_does_not_hunt_between_levels_that_straddle_the_band(
    tmp_path: Path,
) -> None:
    # Cap 150: hold band 138.75..149.25 W lies between the 3-policy (158.6 W, over the
    # cap) and the 4-policy level (131.4 W). It settles on the one that holds the cap,
    # and the release the model asks for (to 89 %) would be the same four policies.
    got = host_dvfs_trajectory(tmp_path, 150, 14)
    assert got[:4] == [(0, 0.0), (50, 240.0), (50, 185.7), (100, 185.7)]
    assert got[4:] == [(100, 131.4)] * 10


def test_restore_puts_back_every_changed_file(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with read_only_rapl(h.root) as tree:
        live = LiveSysfs(tree, LiveModel(demand_watts=200.0))
        before = settings_of(tree.root)
        h.set(power_profile=npp(100))
        for i in range(6):
            h.tick(10 if i else 0, live)
        assert changes(before, settings_of(tree.root))  # something was throttled
        assert h.controller.restore() == []
        assert settings_of(tree.root) == before


def test_restore_on_exit_false_leaves_the_host_as_it_is(tmp_path: Path) -> None:
    h = Harness(tmp_path, restore_on_exit=False)
    with intel_2socket(h.root) as tree:
        h.set(power_profile=npp(100))
        h.tick()
        applied = snapshot(tree.root)
        assert h.controller.restore() == []
        assert snapshot(tree.root) == applied


def test_no_host_power_reading_holds(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with no_rapl(h.root) as tree:
        before = settings_of(tree.root)
        live = LiveSysfs(tree)  # no powercap: the host reports no package power at all
        h.set(power_profile=npp(100))
        for i in range(5):
            result = h.tick(10 if i else 0, live)
            assert result.backend is Backend.DVFS
            assert result.observed["observedPowerWatts"] is None
            assert result.observed["throttlePct"] == 0
        assert settings_of(tree.root) == before


def test_dvfs_tunables_come_from_settings(tmp_path: Path) -> None:
    dvfs = DvfsSettings(
        trip_count=1,
        cooldown_s=0,
        step_pct=50,
        min_freq_khz=2_000_000,
        controller=JOULIE.controller,
    )
    h = Harness(tmp_path, dvfs=dvfs)
    with intel_2socket(h.root) as tree:
        live = LiveSysfs(tree, LiveModel(demand_watts=120.0))
        h.set(labels={VENDOR: "ARM"}, power_profile=npp(100))  # known non-RAPL: DVFS only
        h.tick()
        result = h.tick(10, live)
        assert result.observed["throttlePct"] == 50  # one trip, a 50 % step
        assert [(tree.root / SMAX.format(i=p)).read_text() for p in range(4)] == [
            "2000000\n",
            "2000000\n",
            "3500000\n",
            "3500000\n",
        ]


def test_sysfs_root_template_gives_each_node_its_own_tree(tmp_path: Path) -> None:
    with (
        intel_2socket(tmp_path / "worker-0") as mine,
        intel_2socket(tmp_path / "worker-1") as other,
    ):
        untouched = snapshot(other.root)
        h = Harness(tmp_path)
        h.set(power_profile=npp(50))
        assert h.tick().backend is Backend.RAPL
        assert (mine.root / PL1[0]).read_text() == "50000000\n"
        assert snapshot(other.root) == untouched


def test_packages_of_different_ranges_each_take_what_they_can(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root) as tree:
        (tree.packages[1].path / "constraint_0_max_power_uw").write_text("150000000\n")
        h.set(power_profile=npp(160))
        result = h.tick()
        assert result.message == (
            "RAPL PL1 160 W per package on 2 package zone(s) (intel-rapl:0, intel-rapl:1), "
            "clamped by the zones' PL1 range: intel-rapl:1 150 W"
        )
        assert result.observed["raplLimitsUw"] == {
            "intel-rapl:0": 160_000_000, "intel-rapl:1": 150_000_000
        }


# -- absurd but legal caps (docs/resources.md): clamped to the hardware, the same way
# on both APIs; the known crash of issue 28 and its shrunk examples from tests/properties ----


@pytest.mark.parametrize("api", ["profiles", "nodetwin"])
def test_a_cap_of_1e308_w_is_clamped_to_the_zones_and_said_so(tmp_path: Path, api: str) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root):
        if api == "nodetwin":
            twin = {**npp(1e308), "kind": "NodeTwin"}
            h.set(node_twin=twin, api=NodeApi.NODETWIN)
        else:
            h.set(power_profile=npp(1e308))
        result = h.tick()  # raised OverflowError in RaplHost.apply, killing the worker
        assert result.backend is Backend.RAPL
        assert result.result is Result.APPLIED
        assert result.message == (
            "RAPL PL1 1e+308 W per package on 2 package zone(s) (intel-rapl:0, intel-rapl:1), "
            "clamped to 165 W by the zones' PL1 range"
        )
        assert result.observed["raplLimitsUw"] == {
            "intel-rapl:0": 165_000_000, "intel-rapl:1": 165_000_000
        }
