"""A cap removed while the node stays managed is released at the second tick
(docs/resources.md, "Removing a cap releases it"): host files back to what they were, an HTTP
throttle released, an HTTP RAPL cap raised to the node's maximum; and never released while the
node moves between the APIs.

Real sysfs-shaped trees and the PowerSim HTTP server; the clock is the simulated one of
:mod:`tests.controller.test_node`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from agentpool.resources.nodeinputs import NodeApi
from agentpool.results import Backend, Result
from agentpool.sim.power.model import DVFS_ACTION, RAPL_ACTION, RequestKind
from agentpool.sim.power.server import PowerSim
from agentpool.sim.sysfs.dynamics import LiveModel, LiveSysfs
from agentpool.sim.sysfs.trees import intel_2socket, read_only_rapl
from tests.controller.harness import NODE, SMAX, Harness, npp, tp, twin
from tests.support.sysfs import settings_of, snapshot

HELD = "the last cap is released at the next tick unless a new desired state arrives"
NO_PROFILE = "nothing to enforce: no NodePowerProfile targets this node"


def control_bodies(sim: PowerSim) -> list[tuple[str, float, int]]:
    return [
        (r.body["action"], r.body["capWatts"], r.body["throttlePct"])
        for r in sim.requests(NODE, RequestKind.CONTROL)
    ]


def test_a_deleted_host_rapl_cap_is_restored_at_the_second_tick(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root) as tree:
        before = snapshot(tree.root)
        h.set(power_profile=npp(120))
        assert h.tick().result is Result.APPLIED
        assert snapshot(tree.root) != before
        h.set()  # the NodePowerProfile is deleted; the node stays managed
        first = h.tick()
        assert (first.backend, first.result, first.message) == (
            Backend.NONE, Result.NONE, f"{NO_PROFILE}; {HELD}"
        )
        assert snapshot(tree.root) != before  # still capped: the node may be moving
        second = h.tick(20)
        assert (second.backend, second.result) == (Backend.NONE, Result.NONE)
        assert second.message == f"{NO_PROFILE}; cap released: host limits restored"
        assert snapshot(tree.root) == before
        # The status keeps saying so (one status write, not one per tick), nothing is written.
        assert h.tick(20).message == second.message
        assert snapshot(tree.root) == before
        tombstone = h.metric("joulie_policy_cap_watts", policy="worker-0-eco")
        assert math.isnan(tombstone or 0.0)
        assert h.backend_mode() == {"none": 1.0, "rapl": 0.0, "dvfs": 0.0}
        # A new cap is enforced, and the note goes away with it.
        h.set(power_profile=npp(100))
        assert h.tick(20).result is Result.APPLIED
        h.set()
        assert h.tick(20).message == f"{NO_PROFILE}; {HELD}"


def test_a_cap_field_dropped_releases_a_host_dvfs_throttle(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with read_only_rapl(h.root) as tree:
        live = LiveSysfs(tree, LiveModel(demand_watts=120.0, idle_watts=25.0))
        before = settings_of(tree.root)
        h.set(power_profile=npp(75))  # 240 W drawn, 150 W for both packages: DVFS throttles
        for i in range(4):
            h.tick(10 if i else 0, live)
        assert (tree.root / SMAX.format(i=0)).read_text() == "1500000\n"
        h.set(power_profile=npp(None))  # the profile stays, its cap goes
        assert HELD in h.tick(0, live).message
        assert settings_of(tree.root) != before
        second = h.tick(10, live)
        assert second.message == (
            "nothing to enforce: NodePowerProfile 'worker-0-eco' sets no "
            "cpu.packagePowerCapWatts; cap released: host limits restored"
        )
        assert settings_of(tree.root) == before
        assert h.metric("joulie_dvfs_throttle_pct") == 0.0


def test_a_deleted_http_rapl_cap_is_raised_to_the_maximum(tmp_path: Path, sim: PowerSim) -> None:
    h = Harness(tmp_path)
    routing = tp(control=sim.control_endpoint, telemetry=sim.telemetry_endpoint)
    h.set(power_profile=npp(120), telemetry_profile=routing)
    assert h.tick().result is Result.APPLIED
    h.set(telemetry_profile=routing)
    assert HELD in h.tick(20).message
    assert control_bodies(sim) == [(RAPL_ACTION, 120.0, -1)]  # nothing posted yet
    second = h.tick(20)
    # The simulator's telemetry says the node's maximum is 260 W.
    assert second.message == (
        f"{NO_PROFILE}; cap released: RAPL cap over HTTP raised to the maximum 260 W "
        "(telemetry cpu.packagePowerMaxWatts)"
    )
    assert control_bodies(sim) == [(RAPL_ACTION, 120.0, -1), (RAPL_ACTION, 260.0, -1)]
    assert sim.state(NODE).cap_watts == 260.0
    h.tick(20)
    assert len(control_bodies(sim)) == 2  # released once


def test_a_deleted_http_throttle_is_released(tmp_path: Path, sim: PowerSim) -> None:
    h = Harness(tmp_path)
    routing = tp(control=sim.control_endpoint, mode="dvfs", telemetry=sim.telemetry_endpoint)
    h.set(power_profile=npp(120), telemetry_profile=routing)
    for i in range(4):
        h.tick(20 if i else 0)
    assert sim.state(NODE).throttle_pct == 20.0
    h.set(telemetry_profile=routing)
    h.tick(20)
    assert sim.state(NODE).throttle_pct == 20.0
    second = h.tick(20)
    assert second.message == f"{NO_PROFILE}; cap released: HTTP throttle released"
    assert control_bodies(sim)[-1] == (DVFS_ACTION, 0, 0)
    assert sim.state(NODE).throttle_pct == 0.0


def test_without_a_known_maximum_the_status_says_the_endpoint_keeps_its_cap(
    tmp_path: Path, sim: PowerSim
) -> None:
    h = Harness(tmp_path)
    routing = tp(control=sim.control_endpoint)  # host telemetry: no maximum from HTTP
    h.set(power_profile=npp(120), telemetry_profile=routing)
    h.tick()
    h.set(telemetry_profile=routing)
    h.tick(20)
    message = h.tick(20).message
    assert message == (
        f"{NO_PROFILE}; cap released: the HTTP control endpoint keeps the RAPL cap of 120 W "
        "(the protocol cannot remove a cap, and neither NodeHardware nor telemetry reports a "
        "CPU maximum)"
    )
    assert control_bodies(sim) == [(RAPL_ACTION, 120.0, -1)]


def test_moving_from_the_profile_to_the_twin_and_back_releases_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with intel_2socket(h.root) as tree:
        pl1 = tree.root / "devices/virtual/powercap/intel-rapl/intel-rapl:0"
        limit = pl1 / "constraint_0_power_limit_uw"
        h.set(power_profile=npp(60), api=NodeApi.PROFILES)
        h.tick()
        assert limit.read_text() == "60000000\n"
        # The NodeTwin's ADDED and the NodePowerProfile's DELETED in either order: one tick
        # may see neither object, and must not release.
        h.set(api=NodeApi.NONE)
        assert h.tick(20).message == (
            f"nothing to enforce: no NodeTwin or NodePowerProfile targets this node; {HELD}"
        )
        assert limit.read_text() == "60000000\n"
        h.set(node_twin=twin(cap=65), api=NodeApi.NODETWIN)
        result = h.tick(0)
        assert (result.result, result.message.split(" per package")[0]) == (
            Result.APPLIED, "RAPL PL1 65 W"
        )
        assert limit.read_text() == "65000000\n"
        # Back: the twin goes, the profile is there already; and one more tick in between.
        h.set(power_profile=npp(55), api=NodeApi.PROFILES)
        assert h.tick(20).result is Result.APPLIED
        h.set(api=NodeApi.NONE)
        h.tick(20)
        h.set(power_profile=npp(55), api=NodeApi.PROFILES)
        assert h.tick(20).result is Result.APPLIED
        assert limit.read_text() == "55000000\n"


def test_simulate_only_has_nothing_to_release(tmp_path: Path, sim: PowerSim) -> None:
    h = Harness(tmp_path, simulate_only=True)
    routing: dict[str, Any] = tp(control=sim.control_endpoint)
    h.set(power_profile=npp(120), telemetry_profile=routing)
    h.tick()
    h.set(telemetry_profile=routing)
    assert h.tick(20).message == NO_PROFILE
    assert h.tick(20).message == NO_PROFILE
    assert control_bodies(sim) == []
