"""SIGTERM with 200 workers: every one stops and restores, inside the grace period."""

from __future__ import annotations

import time

from supervisor.agents import alive, worker_pids

from agentpool.sim.cluster import SimCluster, wait_until

NODES = 200


def test_sigterm_with_200_workers_stops_all_within_the_grace_period() -> None:
    with SimCluster() as cluster:
        names = [f"kwok-node-{i}" for i in range(NODES)]
        for name in names:
            cluster.add_node(name)
        agent = cluster.start_agent({"RECONCILE_INTERVAL": "5s", "SHUTDOWN_TIMEOUT": "20s"})
        agent.wait_ready(timeout=60)
        pids = wait_until(lambda: p if len(p := worker_pids(agent)) == NODES else None, 90)
        wait_until(lambda: len(set(cluster.controlled_nodes())) == NODES, 60)
        started = time.monotonic()
        code = agent.terminate(timeout=30)
        took = time.monotonic() - started
        assert code == 0
        assert took < 20.0, f"shutdown took {took:.1f}s"
        assert not [pid for pid in pids.values() if alive(pid)]
        wait_until(
            lambda: all(
                cluster.status(n).get("message") == "agent stopped; host limits restored"
                for n in names
            ),
            10,
        )
        assert "did not stop in time" not in agent.logs()
        print(f"\n200 workers: SIGTERM to exit {took:.2f}s")
