"""The real agent in pool mode against the emulated cluster: scope, sharding, changes."""

from __future__ import annotations

import json
import time
from collections import Counter

from agentpool.pool.assignment import shard_of
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from tests.support.agents import joulie_nodes, series, worker_pids


def test_three_shards_control_every_managed_node_exactly_once() -> None:
    managed = [f"kwok-node-{i}" for i in range(30)]
    unmanaged = [f"other-{i}" for i in range(5)]
    with SimCluster() as cluster:
        for name in managed:
            cluster.add_node(name)
        for name in unmanaged:
            cluster.add_node(name, managed=False)
        agents = [
            cluster.start_agent({"POOL_SHARDS": "3", "POOL_SHARD_ID": str(i)}) for i in range(3)
        ]
        for agent in agents:
            agent.wait_ready()

        def all_owned() -> list[dict[str, int]]:
            owned = [worker_pids(a) for a in agents]
            union = set().union(*owned)
            return owned if union == set(managed) else []

        owned = wait_until(all_owned, 30)
        for shard, workers in enumerate(owned):
            assert all(shard_of(n, 3) == shard for n in workers), "a node outside its shard"
        assert sum(len(w) for w in owned) == len(managed), "a node controlled twice"
        wait_until(lambda: set(cluster.controlled_nodes()) == set(managed), 20)
        wait_until(lambda: all(cluster.status(n).get("result") == "applied" for n in managed), 20)
        assert all(cluster.status(n) == {} for n in unmanaged)
        # Every node's joulie_* series exactly once, from the one pod that owns it.
        total: Counter[str] = Counter()
        for agent, workers in zip(agents, owned, strict=True):
            seen = joulie_nodes(agent.metrics())
            assert set(seen) == set(workers)
            total.update(seen)
        assert total == Counter(dict.fromkeys(managed, 1))
        for agent in agents:
            assert agent.terminate() == 0


def test_nodes_enter_and_leave_scope() -> None:
    with SimCluster() as cluster:
        for name in ("a", "b", "c"):
            cluster.add_node(name)
        cluster.add_node("outsider", managed=False)
        agent = cluster.start_agent()
        agent.wait_ready()
        wait_until(lambda: set(worker_pids(agent)) == {"a", "b", "c"}, 20)

        cluster.set_labels("a", {"joulie.io/managed": None})
        cluster.set_labels("outsider", {"joulie.io/managed": "true"})
        cluster.api.delete("nodes", "b")
        wait_until(lambda: set(worker_pids(agent)) == {"c", "outsider"}, 20)
        # Nodes that left leave no gauge behind.
        text = agent.metrics()
        gone = {
            dict(labels).get("node")
            for (name, labels) in series(text)
            if name.startswith("joulie_") and dict(labels).get("node") in ("a", "b")
        }
        assert gone == set()
        wait_until(lambda: cluster.status("outsider").get("result") == "applied", 10)
        # Nodes nobody controls any more say so instead of claiming a cap is applied. The
        # supervisor writes that once their workers have ended, through the same writer as
        # every status, in no set order with the outsider's first status: wait for it.
        left = "not controlled: node deleted or no longer selected; host limits restored"
        for name in ("a", "b"):
            wait_until(lambda n=name: cluster.status(n).get("message") == left, 20)
        assert cluster.status("a")["result"] == "none"
        log = agent.logs()
        assert "node a left this pod's scope" in log
        assert "node b left this pod's scope" in log
        assert agent.terminate() == 0


def test_a_profile_change_is_applied_within_two_seconds() -> None:
    with SimCluster() as cluster:
        cluster.add_node("a", cap=120)
        # A long interval: only the change itself can explain a prompt control request.
        agent = cluster.start_agent({"RECONCILE_INTERVAL": "30s"})
        agent.wait_ready()
        wait_until(lambda: cluster.status("a").get("result") == "applied", 20)
        changed_at = time.monotonic()
        cluster.set_cap("a", 95, profile="performance")

        def arrived() -> float | None:
            for r in cluster.power.requests(node="a", kind="control"):
                if r.monotonic >= changed_at and r.body and r.body.get("capWatts") == 95:
                    return r.monotonic - changed_at
            return None

        latency = wait_until(arrived, 5)
        print(f"\nprofile change to control request: {latency:.3f}s")
        # Measured 0.002-0.05 s (the change wakes the worker); the 2 s of the test's name
        # keeps 40x headroom, and the 30 s interval could not explain a pass.
        assert latency < 2.0
        wait_until(lambda: "95" in str(cluster.status("a").get("observed", {}).get("capWatts")), 5)
        text = agent.metrics()
        caps = {
            labels: v
            for (name, labels), v in series(text).items()
            if name == "joulie_policy_cap_watts"
        }
        assert caps == {(("node", "a"), ("policy", "a")): 95.0}  # the NodePowerProfile's name
        assert agent.terminate() == 0


def test_simulate_only_logs_every_owned_node_and_writes_nothing() -> None:
    with SimCluster() as cluster:
        for name in ("a", "b"):
            cluster.add_node(name)
        agent = cluster.start_agent(args=["--simulate-only"])
        agent.wait_ready()
        wait_until(
            lambda: all("simulate-only" in cluster.status(n).get("message", "") for n in "ab"),
            20,
        )
        assert cluster.power.requests(kind="control") == []
        log = agent.logs()
        for name in ("a", "b"):
            assert f"simulate-only: node {name} would cap CPU packages at 120 W" in log
            assert cluster.status(name)["result"] == "applied"
        assert agent.terminate() == 0


def test_json_logs_are_one_object_per_line_with_the_node() -> None:
    with SimCluster() as cluster:
        cluster.add_node("a")
        agent = cluster.start_agent(args=["--log-format", "json"])
        agent.wait_ready()
        wait_until(lambda: cluster.status("a").get("result") == "applied", 20)
        assert agent.terminate() == 0
        entries = [json.loads(line) for line in agent.logs().splitlines() if line.strip()]
        assert {e["level"] for e in entries} <= {"debug", "info", "warning", "error"}
        about_a = [e for e in entries if e.get("node") == "a"]
        messages = " | ".join(e["msg"] for e in about_a)
        assert "worker for node a running" in messages  # from the supervisor
        assert "hardware: cpu vendor" in messages  # from the worker process
        assert "node a: rapl applied" in messages
