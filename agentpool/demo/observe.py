"""What the demo sees: one row per node, gathered only from the outside.

Everything here is read the way an operator would read it: desired state and
status from the (emulated) API, worker pids and restarts from each shard's
merged ``/metrics``, power from the power simulator. Nothing is asked of the
agent that a real cluster would not expose.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.cluster import SimCluster
from agentpool.sim.objects import MANAGED, twin_name

SCRAPE_TIMEOUT_S = 2.0


@dataclass
class ShardMetrics:
    """The per-node series of one shard's ``/metrics`` the demo displays."""

    up: bool = False
    """The last scrape answered."""
    pids: dict[str, int] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    caps: dict[str, tuple[str, float]] = field(default_factory=dict)
    """node -> (policy, watts) from ``joulie_policy_cap_watts``: what the worker enforces."""
    apis: dict[str, str] = field(default_factory=dict)
    """node -> the Joulie API it follows, from ``agentpool_node_api``."""


def parse_metrics(text: str) -> ShardMetrics:
    metrics = ShardMetrics(up=True)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            node = sample.labels.get("node")
            if node is None:
                continue
            if sample.name == "agentpool_worker_pid":
                metrics.pids[node] = int(sample.value)
            elif sample.name == "agentpool_worker_restarts_total":
                metrics.restarts[node] = int(sample.value)
            elif sample.name == "joulie_policy_cap_watts" and sample.value > 0:
                metrics.caps[node] = (sample.labels.get("policy", ""), float(sample.value))
            elif sample.name == "agentpool_node_api" and sample.value > 0:
                metrics.apis[node] = sample.labels.get("api", "")
    return metrics


def scrape(agent: AgentProcess) -> ShardMetrics:
    """One shard's metrics; a shard that does not answer reads as down, not as an error."""
    try:
        with urllib.request.urlopen(agent.metrics_url, timeout=SCRAPE_TIMEOUT_S) as response:
            return parse_metrics(response.read().decode())
    except (OSError, urllib.error.URLError, ValueError):
        return ShardMetrics()


@dataclass(frozen=True)
class NodeRow:
    """One line of the table."""

    node: str
    managed: bool
    """The node carries ``joulie.io/managed=true`` right now."""
    profile: str | None
    cap: float | None
    """Desired cap in watts (NodePowerProfile; NodeTwin: its percent of the maximum)."""
    shard: int | None
    """The shard whose supervisor runs this node's worker; None without a worker."""
    pid: int | None
    restarts: int | None
    enforced: tuple[str, float] | None
    """(policy object's name, watts) the worker reports enforcing."""
    backend: str
    result: str
    message: str
    sim_cap: float | None
    """The RAPL cap the power simulator last accepted for this node."""
    throttle_pct: float
    power_w: float
    """What the node draws now, from the power simulator."""
    gpu: str = ""
    """GPU column: count x cap the simulator applied, and the GPU result unless applied;
    empty for CPU-only nodes."""
    api: str = ""
    """The Joulie API the node's worker follows (``agentpool_node_api``); empty without one."""


@dataclass(frozen=True)
class Snapshot:
    at: float
    """Seconds since the demo started."""
    rows: list[NodeRow]
    shards: list[ShardMetrics]

    def row(self, node: str) -> NodeRow:
        for row in self.rows:
            if row.node == node:
                return row
        raise KeyError(node)


def _gpu_cell(count: int, cap: float | None, status: dict[str, Any]) -> str:
    if count == 0:
        return ""
    text = f"{count}x{cap:g} W" if cap is not None else f"{count}x-"
    result = status.get("result") or "pending"
    return text if result == "applied" else f"{text} {result}"


def _gpu_status(cluster: SimCluster, node: str) -> dict[str, Any]:
    if cluster.nodetwin:
        obj = cluster.api.get("nodetwins", twin_name(node))
        control = (obj.get("status") or {}).get("controlStatus") or {}
    else:
        obj = cluster.api.get("telemetryprofiles", node)
        control = (obj.get("status") or {}).get("control") or {}
    gpu: dict[str, Any] = control.get("gpu") or {}
    return gpu


def _desired(cluster: SimCluster, node: str, max_watts: float) -> tuple[dict[str, Any], Any]:
    """The desired-state spec and its cap in watts (a percent resolved against the maximum)."""
    if cluster.nodetwin:
        spec = cluster.api.get("nodetwins", twin_name(node)).get("spec") or {}
        cpu = spec.get("cpu") or {}
        cap = cpu.get("packagePowerCapWatts")
        pct = cpu.get("packagePowerCapPctOfMax")
        if cap is None and pct is not None:
            cap = round(pct / 100 * max_watts, 3)
        return spec, cap
    spec = cluster.api.get("nodepowerprofiles", node).get("spec") or {}
    return spec, (spec.get("cpu") or {}).get("packagePowerCapWatts")


def observe(
    cluster: SimCluster, agents: list[AgentProcess], nodes: list[str], at: float
) -> Snapshot:
    shards = [scrape(agent) for agent in agents]
    rows = []
    for node in nodes:
        labels = cluster.api.get("nodes", node).get("metadata", {}).get("labels") or {}
        power = cluster.power.state(node)
        spec, cap = _desired(cluster, node, power.config.max_watts)
        status = cluster.status(node)
        gpu_status = _gpu_status(cluster, node)
        shard = next((i for i, m in enumerate(shards) if node in m.pids), None)
        restarts = next((m.restarts[node] for m in shards if node in m.restarts), None)
        enforced = next((m.caps[node] for m in shards if node in m.caps), None)
        api = next((m.apis[node] for m in shards if node in m.apis), "")
        rows.append(
            NodeRow(
                node=node,
                managed=labels.get(MANAGED) == "true",
                profile=spec.get("profile"),
                cap=float(cap) if cap is not None else None,
                shard=shard,
                pid=shards[shard].pids[node] if shard is not None else None,
                restarts=restarts,
                enforced=enforced,
                backend=str(status.get("backend", "")),
                result=str(status.get("result", "")),
                message=str(status.get("message", "")),
                sim_cap=power.cap_watts,
                throttle_pct=power.throttle_pct,
                # What it draws under the throttle and cap in force now; the last
                # telemetry reading predates the throttle the agent set after it.
                power_w=power.expected_power_watts,
                gpu=_gpu_cell(power.config.gpu.count, power.gpu_cap_watts, gpu_status),
                api=api,
            )
        )
    return Snapshot(at, rows, shards)


def cap_applied(row: NodeRow) -> bool:
    """The worker enforces the desired cap and the status says it worked."""
    return (
        row.cap is not None
        and row.pid is not None
        and row.result == "applied"
        and row.enforced is not None
        and row.enforced[1] == row.cap
    )
