"""Helpers for tests that run the real ``agentpool`` process against a SimCluster."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.parser import text_string_to_metric_families

from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from agentpool.sim.sysfs.trees import SysfsTree, build_nodes, intel_2socket, read_int

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def series(text: str) -> Series:
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def worker_pids(agent: AgentProcess) -> dict[str, int]:
    """node -> pid of its live worker, from ``agentpool_worker_pid``."""
    return agent.worker_pids()


def live_worker_pid(agent: AgentProcess, node: str, timeout: float = 15) -> int:
    """The pid of ``node``'s worker once the supervisor has published it.

    The supervisor publishes its workers at most once a loop period, so a node's
    status can say ``applied`` (written by the worker) before its pid is on /metrics.
    """
    return wait_until(lambda: worker_pids(agent).get(node, 0), timeout)


def live_worker_pids(
    agent: AgentProcess, nodes: Iterable[str], timeout: float = 15
) -> dict[str, int]:
    """node -> pid once the published live workers are exactly ``nodes`` (see
    :func:`live_worker_pid` for why a test waits for them)."""
    wanted = set(nodes)
    return wait_until(lambda: p if set(p := worker_pids(agent)) == wanted else {}, timeout)


def restarts(agent: AgentProcess, node: str) -> float:
    key = ("agentpool_worker_restarts_total", (("node", node),))
    return series(agent.metrics()).get(key, 0.0)


def joulie_nodes(text: str) -> Counter[str]:
    """How many times each node's active ``joulie_backend_mode`` series appears."""
    counts: Counter[str] = Counter()
    for (name, labels), value in series(text).items():
        if name == "joulie_backend_mode" and value == 1.0:
            counts[dict(labels)["node"]] += 1
    return counts


def node_apis(agent: AgentProcess) -> dict[str, str]:
    """node -> the Joulie API it follows, from ``agentpool_node_api``."""
    return {
        dict(labels)["node"]: dict(labels)["api"]
        for (name, labels), value in series(agent.metrics()).items()
        if name == "agentpool_node_api" and value == 1.0
    }


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def host_cluster(
    cluster: SimCluster,
    nodes: list[str],
    builder: Callable[..., SysfsTree] = intel_2socket,
    cap: float = 50,
) -> tuple[str, dict[str, SysfsTree]]:
    """Nodes with host controls over their own sysfs tree; returns (SYSFS_ROOT, trees).

    Keep the trees referenced while the agent runs: locked (read-only) limit
    files live only as long as their tree is open.
    """
    template = str(cluster.workdir / "sys" / "{node}")
    trees = build_nodes(template, nodes, builder)
    for name in nodes:
        cluster.add_node(name, cap=cap, http=False)
    return template, trees


def all_read(paths: Iterable[Path], value: int) -> bool:
    """Every file holds ``value``; one caught between truncate and write does not yet.

    The agent writes a limit file with open-truncate-write: on a real sysfs
    attribute that is one store, but on the test's plain files a reader can
    see it empty for an instant.
    """
    try:
        return all(read_int(p) == value for p in paths)
    except ValueError:
        return False


def pl1_files(trees: dict[str, SysfsTree]) -> list[Path]:
    return [z.pl1.limit_file for t in trees.values() for z in t.packages if z.pl1 is not None]


# What a TelemetryProfile's status says once its node follows a NodeTwin.
MOVED = "not written here any more: the node follows the NodeTwin API now; its status is in"


def tp_status(cluster: SimCluster, name: str) -> dict[str, Any]:
    obj = cluster.api.get("telemetryprofiles", name)
    return dict(((obj.get("status") or {}).get("control") or {}).get("cpu") or {})


def twin_status(cluster: SimCluster, name: str) -> dict[str, Any]:
    obj = cluster.api.get("nodetwins", name)
    return dict(((obj.get("status") or {}).get("controlStatus") or {}).get("cpu") or {})


def published_hardware(cluster: SimCluster) -> dict[str, dict[str, Any]]:
    """Each node's NodeHardware, keyed by node, once its status is written.

    A NodeHardware is created with its spec and then given its status (the status
    subresource is a second write), so a reader between the two sees no status.
    """
    return {
        obj["spec"]["nodeName"]: obj
        for obj in cluster.api.list("nodehardwares")
        if obj.get("status")
    }
