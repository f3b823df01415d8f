"""Shutdown at scale: SIGTERM to an agent with N workers while every API request is slow.

Runs the simulation kit in this process and the real ``python -m agentpool``
as a subprocess (pool mode, one shard). Once every node's worker runs and its
cap was applied, the API emulator delays every request by ``--latency``
(20 ms: a busy API server), the agent gets SIGTERM, and the script reports:
the time from SIGTERM to the agent's exit, its exit status, how many nodes'
statuses say "agent stopped" at that moment (written before exit, not
eventually), whether any worker outlived the agent, and whether any worker
had to be SIGKILLed. Goal (issue 13): 1,000 workers, 20 ms, exit 0 in under
15 s with every status written.

    .venv/bin/python bench/shutdown.py                 # 1,000 nodes, 20 ms
    .venv/bin/python bench/shutdown.py --nodes 200 --latency 0.04
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import psutil

from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until

GOAL_S = 15.0


def _running_workers(agent_pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(agent_pid).children(recursive=True)]
    except psutil.Error:
        return []


def measure(nodes: int, latency_s: float, interval: str) -> dict[str, object]:
    with SimCluster() as cluster:
        names = [f"kwok-node-{i}" for i in range(nodes)]
        for name in names:
            cluster.add_node(name)
        agent = cluster.start_agent({"RECONCILE_INTERVAL": interval, "SHUTDOWN_TIMEOUT": "20s"})
        started = time.monotonic()
        agent.wait_ready(timeout=120)
        wait_until(lambda: len(set(cluster.controlled_nodes())) == nodes, 300)
        startup_s = time.monotonic() - started
        descendants = _running_workers(agent.pid)
        cluster.emulator.inject(fault="slow", delay=latency_s, times=None)
        sigterm = time.monotonic()
        code = agent.terminate(timeout=120)
        took = time.monotonic() - sigterm
        cluster.emulator.clear_faults()
        stopped = sum(
            1 for n in names if cluster.status(n).get("message", "").startswith("agent stopped")
        )
        survivors = [pid for pid in descendants if psutil.pid_exists(pid)]
        return {
            "nodes": nodes,
            "api_latency_ms": latency_s * 1000,
            "startup_s": round(startup_s, 2),
            "sigterm_to_exit_s": round(took, 2),
            "exit_code": code,
            "statuses_agent_stopped": stopped,
            "descendants_left": len(survivors),
            "workers_sigkilled": "did not stop in time" in agent.logs(),
            "goal_met": code == 0 and took < GOAL_S and stopped == nodes and not survivors,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.02, help="seconds added to requests")
    parser.add_argument("--interval", default="10s", help="RECONCILE_INTERVAL of the agent")
    opts = parser.parse_args()
    result = measure(opts.nodes, opts.latency, opts.interval)
    print(json.dumps(result, indent=2))
    return 0 if result["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
