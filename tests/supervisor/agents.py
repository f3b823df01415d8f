"""Helpers for tests that run the real ``agentpool`` process against a SimCluster."""

from __future__ import annotations

from collections import Counter

import psutil
from prometheus_client.parser import text_string_to_metric_families

from agentpool.sim.cluster import AgentProcess

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def series(text: str) -> Series:
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def worker_pids(agent: AgentProcess) -> dict[str, int]:
    """node -> pid of its live worker, from ``agentpool_worker_pid``."""
    return {
        dict(labels)["node"]: int(value)
        for (name, labels), value in series(agent.metrics()).items()
        if name == "agentpool_worker_pid"
    }


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


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
