"""The demo's cluster: which nodes exist, what they want, how they draw power.

This module owns the seeding of a :class:`~agentpool.sim.cluster.SimCluster`
(KWOK-style nodes, NodePowerProfiles, TelemetryProfiles pointing at the power
simulator; or, on the NodeTwin API, NodeTwins with percent caps and routing
by environment) and the environment the shard agents get. It configures the agent
only through its documented variables, exactly as a StatefulSet would; the
agent must never learn that it runs in a demo.
"""

from __future__ import annotations

import dataclasses
import enum
import random
from dataclasses import dataclass

from agentpool.durations import format_duration
from agentpool.sim.cluster import SimCluster
from agentpool.sim.objects import twin_name
from agentpool.sim.power.gpu import GpuConfig
from agentpool.sim.power.model import RAPL_ACTION

MANAGED_PREFIX = "kwok-node-"
UNMANAGED_PREFIX = "kwok-spare-"
UNMANAGED_COUNT = 2
RAPL_LOCKED_MESSAGE = "RAPL locked by firmware (simulated)"
NOISE_WATTS = 1.5
"""Telemetry noise, so the DVFS nodes' readings move like real ones."""
LOAD_RANGE = (0.35, 0.95)
LOAD_STEP = 0.08
"""Largest change of a node's load per workload drift step."""


class Profile(enum.StrEnum):
    ECO = "eco"
    """Low cap: the operator wants energy saved."""
    PERFORMANCE = "performance"
    """High cap: the operator wants speed."""

    @property
    def cap_watts(self) -> float:
        return CAPS[self]

    @property
    def pct(self) -> float:
        """The same cap as a percent of the simulated nodes' maximum (NodeTwin API)."""
        return PCTS[self]


CAPS: dict[Profile, float] = {Profile.ECO: 120.0, Profile.PERFORMANCE: 200.0}
GPU_CAPS: dict[Profile, float] = {Profile.ECO: 250.0, Profile.PERFORMANCE: 350.0}
"""``spec.gpu.powerCap.capWattsPerGpu`` of the GPU nodes, by profile."""
DEMO_GPUS = GpuConfig(count=4, min_watts=100, max_watts=400, default_watts=400, load=0.8)
SIM_MAX_WATTS = 250.0
"""The power simulator's default node maximum; its telemetry reports it, so the agent
resolves percent caps against it."""
PCTS: dict[Profile, float] = {p: CAPS[p] / SIM_MAX_WATTS * 100 for p in CAPS}


@dataclass(frozen=True)
class NodePlan:
    """One simulated node as the demo seeds it."""

    name: str
    managed: bool
    """Carries ``joulie.io/managed=true`` at start."""
    profile: Profile
    load: float
    """Initial utilisation in the power simulator."""
    rapl_locked: bool
    """The simulator refuses RAPL for this node, so the agent falls back to DVFS."""
    vendor: str
    """NFD CPU vendor label, as Node Feature Discovery would set it."""
    gpus: int = 0
    """GPUs in the power simulator (capped per GPU by profile), 0 for CPU-only nodes."""

    @property
    def cap(self) -> float:
        return self.profile.cap_watts


def plan_nodes(count: int, seed: int) -> list[NodePlan]:
    """``count`` managed nodes and a couple of unmanaged ones, reproducible from ``seed``.

    Odd nodes run ``performance``, even ones ``eco``; every fourth node (2, 6,
    10...) has RAPL locked, so the table shows the DVFS fallback throttling an
    eco node whose load is above its cap.
    """
    rng = random.Random(seed)
    plans = [
        NodePlan(
            name=f"{MANAGED_PREFIX}{i}",
            managed=True,
            profile=Profile.PERFORMANCE if i % 2 else Profile.ECO,
            load=round(rng.uniform(0.5, 0.9), 2),
            rapl_locked=i % 4 == 2,
            vendor="GenuineIntel" if i % 3 else "AuthenticAMD",
            gpus=DEMO_GPUS.count if i % 5 == 3 else 0,
        )
        for i in range(count)
    ]
    plans += [
        NodePlan(
            name=f"{UNMANAGED_PREFIX}{i}",
            managed=False,
            profile=Profile.ECO,
            load=round(rng.uniform(0.5, 0.9), 2),
            rapl_locked=False,
            vendor="GenuineIntel",
        )
        for i in range(UNMANAGED_COUNT)
    ]
    return plans


def seed_cluster(cluster: SimCluster, plans: list[NodePlan]) -> None:
    """Create every node in the power simulator and the API emulator."""
    for plan in plans:
        gpus = dataclasses.replace(DEMO_GPUS, count=plan.gpus)
        cluster.power.add_node(plan.name, load=plan.load, noise_watts=NOISE_WATTS, gpu=gpus)
        if plan.rapl_locked:
            cluster.power.set_behaviour(
                plan.name, "blocked", RAPL_LOCKED_MESSAGE, action=RAPL_ACTION
            )
        # The NodeTwin API gets what Joulie's current operator writes by default: percent.
        cluster.add_node(
            plan.name,
            managed=plan.managed,
            cap=None if cluster.nodetwin else plan.cap,
            pct=plan.profile.pct if cluster.nodetwin else None,
            profile=plan.profile.value,
            gpus=plan.gpus,
            labels={
                "type": "kwok",
                "kubernetes.io/hostname": plan.name,
                "feature.node.kubernetes.io/cpu-vendor": plan.vendor,
            },
        )
        if plan.gpus:
            gpu_cap = {"capWattsPerGpu": GPU_CAPS[plan.profile]}
            desired = ("nodetwins", twin_name(plan.name)) if cluster.nodetwin else (
                "nodepowerprofiles", plan.name
            )
            cluster.api.patch(*desired, {"spec": {"gpu": {"powerCap": gpu_cap}}})


def agent_env(
    shard: int, shards: int, interval_s: float, routing: dict[str, str] | None = None
) -> dict[str, str]:
    """What the StatefulSet would pass to replica ``shard`` (plus the demo's tempo).

    The DVFS cooldown defaults to 20 s, tuned for a 20 s reconcile interval;
    the demo reconciles faster, so it scales the cooldown with the interval
    (for ``DVFS_CONTROLLER=joulie``). The adaptive controller's settings count
    ticks and need no scaling; its step limit is lifted because the simulator
    answers a throttle at once (no sensor lag to overshoot on), so the eco
    DVFS nodes, which need 75-95 % throttle, hold their cap after one tick
    instead of two or three, before the timeline's first step.
    ``routing``: the ``TELEMETRY_*`` variables (NodeTwin API, which has no
    TelemetryProfile).
    """
    return {
        **(routing or {}),
        "AGENT_MODE": "pool",
        "POOL_SHARDS": str(shards),
        "POOL_SHARD_ID": str(shard),
        "POD_NAME": f"joulie-agent-pool-{shard}",
        "RECONCILE_INTERVAL": format_duration(interval_s),
        "DVFS_COOLDOWN": format_duration(2 * interval_s),
        "DVFS_MAX_STEP_PCT": "100",
        "SHUTDOWN_TIMEOUT": "10s",
    }


class Workload:
    """Drifts node loads a little at a time, so power and throttle keep moving."""

    def __init__(self, cluster: SimCluster, plans: list[NodePlan], seed: int) -> None:
        self._cluster = cluster
        self._loads = {plan.name: plan.load for plan in plans}
        # A separate stream from the plan's, so drift does not change the layout.
        self._rng = random.Random(seed + 1)

    def step(self) -> None:
        low, high = LOAD_RANGE
        for node, load in self._loads.items():
            load = min(high, max(low, load + self._rng.uniform(-LOAD_STEP, LOAD_STEP)))
            self._loads[node] = round(load, 2)
            self._cluster.power.set_load(node, self._loads[node])
