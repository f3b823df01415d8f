"""The agent under Kubernetes API faults: nothing lost, no spurious restarts.

Faults are injected at the API emulator (a stand-in for kube-apiserver) and
the real agent process talks to it over HTTP through the kubernetes client.
"""

from __future__ import annotations

from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from tests.support.agents import restarts, series, worker_pids


def start(cluster: SimCluster, names: list[str], **env: str) -> tuple[object, dict[str, int]]:
    for name in names:
        cluster.add_node(name)
    agent = cluster.start_agent(env)
    agent.wait_ready()
    pids = wait_until(lambda: p if len(p := worker_pids(agent)) == len(names) else None, 20)
    wait_until(lambda: all(cluster.status(n).get("result") == "applied" for n in names), 20)
    return agent, pids


def test_server_errors_then_recovery_lose_nothing_and_restart_nothing() -> None:
    with SimCluster() as cluster:
        agent, pids = start(cluster, ["a", "b"])
        # Every request fails from now on, and open watches are cut by a restart.
        cluster.emulator.inject(fault="500", times=None)
        cluster.emulator.stop()
        cluster.emulator.start()
        # Meanwhile a node's situation changes: RAPL becomes blocked, DVFS takes over.
        cluster.power.set_behaviour("a", result="blocked", action="rapl.set_power_cap_watts")
        wait_until(
            lambda: any(
                r.body and r.body.get("action") == "dvfs.set_throttle_pct"
                for r in cluster.power.requests(node="a", kind="control")
            ),
            10,
        )
        assert cluster.status("a")["backend"] == "rapl", "no write can land during the outage"
        cluster.emulator.clear_faults()
        wait_until(lambda: cluster.status("a").get("backend") == "dvfs", 30)
        assert worker_pids(agent) == pids
        assert restarts(agent, "a") == 0.0
        assert restarts(agent, "b") == 0.0
        assert agent.terminate() == 0


def test_retry_after_is_honoured() -> None:
    with SimCluster() as cluster:
        agent, _ = start(cluster, ["a"])
        cluster.emulator.inject(
            verb="patch",
            resource="telemetryprofiles",
            subresource="status",
            fault=429,
            retry_after=3,
            times=1,
        )
        cluster.set_cap("a", 90)
        wait_until(lambda: "retry in" in agent.logs(), 10)
        line = next(x for x in agent.logs().splitlines() if "HTTP 429" in x)
        assert float(line.rsplit("retry in ", 1)[1].rstrip("s")) >= 3.0
        wait_until(lambda: cluster.status("a").get("observed", {}).get("capWatts") == 90, 15)
        assert agent.terminate() == 0


def test_an_unreachable_api_turns_readyz_unready_not_healthz() -> None:
    with SimCluster() as cluster:
        agent, pids = start(cluster, ["a"])
        assert agent.get("/readyz")[0] == 200
        cluster.emulator.stop()  # connection refused from now on
        wait_until(lambda: agent.get("/readyz")[0] == 503, 20)
        assert agent.get("/healthz")[0] == 200
        # The node stays enforced from the cache while the API is away.
        before = len(cluster.power.requests(node="a", kind="control"))
        wait_until(lambda: len(cluster.power.requests(node="a", kind="control")) > before + 1, 10)
        cluster.emulator.start()
        wait_until(lambda: agent.get("/readyz")[0] == 200, 30)
        assert worker_pids(agent) == pids
        assert agent.terminate() == 0


def test_watch_gone_relists_without_duplicate_or_lost_workers() -> None:
    with SimCluster() as cluster:
        agent, pids = start(cluster, ["a", "b", "c"], WATCH_TIMEOUT="1s")
        cluster.emulator.inject(verb="watch", resource="nodes", fault="410", times=1)
        wait_until(
            lambda: series(agent.metrics()).get(
                ("agentpool_watch_restarts_total", (("reason", "gone"), ("resource", "nodes")))
            ),
            20,
        )
        cluster.add_node("d")
        wait_until(lambda: set(worker_pids(agent)) == {"a", "b", "c", "d"}, 20)
        after = worker_pids(agent)
        assert {n: after[n] for n in pids} == pids
        assert agent.terminate() == 0


def test_a_silent_watch_is_replaced_and_changes_still_arrive() -> None:
    with SimCluster() as cluster:
        agent, _ = start(cluster, ["a"], WATCH_TIMEOUT="1s")
        cluster.emulator.inject(verb="watch", resource="nodes", fault="hang", times=1)
        cluster.add_node("late")
        wait_until(lambda: "late" in worker_pids(agent), 20)
        assert agent.terminate() == 0
