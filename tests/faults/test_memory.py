"""Fault 5 of issue 43: the pod's memory limit.

The real agent runs in a memory cgroup of its own with a limit, as a container with
``resources.limits.memory`` does (:mod:`agentpool.sim.cgroups`; cgroup v1 on this
machine, v2 where the unified hierarchy holds the memory controller), and the
kernel's own OOM killer does the killing. What users expect: a worker that outgrows
the limit is the one killed, not the supervisor; it is restarted with backoff, and
its node's status, its Event and the metrics say OOMKilled; and a pod whose limit
cannot hold a worker for every node it owns starts as many as it holds and says
which figure stops it, rather than starting them all and being OOM-killed over and
over.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from agentpool.sim import workerfaults
from agentpool.sim.cgroups import MemoryCgroup, available
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from agentpool.supervisor.memlimit import FIXED_BYTES, MIB, PER_WORKER_BYTES
from tests.support.agents import (
    alive,
    live_worker_pid,
    live_worker_pids,
    restarts,
    series,
    worker_pids,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not available(), reason="needs root and a writable memory cgroup"),
]

LEAKY = ("leaky-0", "leaky-1", "leaky-2")
LEAK_ROOM = 32 * MIB
"""What the leaking workers (8 MiB a tick each) may add before the limit: when it is
reached each is still smaller than the supervisor (57 MiB resident, workers 25 MiB,
measured here), which the OOM killer would take if the workers did not ask to go first."""


def node_events(cluster: SimCluster, node: str) -> list[dict[str, Any]]:
    items = cluster.api.list("events", namespace="kube-system")
    return [e for e in items if e["regarding"]["name"] == node]


def test_a_worker_over_the_memory_limit_is_oom_killed_and_restarted_alone() -> None:
    with SimCluster() as cluster, MemoryCgroup("agentpool-oom") as cgroup:
        cluster.add_node("fine")
        faults = ",".join(f"leak-in-tick:{node}" for node in LEAKY)
        agent = cluster.start_agent(workerfaults.env(faults), wrap=cgroup.wrap())
        agent.wait_ready()
        wait_until(lambda: cluster.status("fine").get("result") == "applied", 20)
        fine_pid = live_worker_pid(agent, "fine")
        cgroup.set_limit(cgroup.usage_bytes() + LEAK_ROOM)
        for node in LEAKY:
            cluster.add_node(node)

        def oom_killed() -> str | None:
            assert agent.process.poll() is None, f"the supervisor died:\n{agent.logs()[-2000:]}"
            return next((n for n in LEAKY if "OOMKilled" in cluster.status(n).get("message", "")),
                        None)

        leaky = wait_until(oom_killed, 60)
        message = cluster.status(leaky)["message"]
        assert message.startswith("controller restarting: worker died (OOMKilled: killed by "
                                  "SIGKILL by the kernel's OOM killer, the pod's memory limit "
                                  "of "), message
        assert cgroup.oom_kills() >= 1
        assert alive(agent.pid), agent.logs()
        wait_until(lambda: restarts(agent, leaky) >= 1, 20)

        def told() -> bool:  # the Event goes out from the recorder's thread, in its time
            return any("OOMKilled" in e["note"] for e in node_events(cluster, leaky)
                       if e["reason"] == "ControllerRestarting")

        def failing() -> bool:
            # Exported only while a leaky node waits out its backoff (each leaks again
            # after its restart): not necessarily the moment its restart is counted.
            return any(dict(labels)["reason"].startswith("died (OOMKilled")
                       for (name, labels), value in series(agent.metrics()).items()
                       if name == "agentpool_worker_last_failure_info" and value == 1.0)

        wait_until(told, 20)
        wait_until(failing, 30)
        # Its neighbour and the supervisor did not notice.
        assert worker_pids(agent)["fine"] == fine_pid
        assert restarts(agent, "fine") == 0.0
        assert cluster.status("fine")["result"] == "applied"
        assert agent.get("/healthz")[0] == 200
        assert agent.terminate() == 0


def test_a_pod_starts_the_workers_its_memory_limit_holds_and_names_the_figure() -> None:
    holds = 2
    limit = FIXED_BYTES + holds * PER_WORKER_BYTES + PER_WORKER_BYTES // 2  # 103.5 MiB
    with SimCluster() as cluster, MemoryCgroup("agentpool-limit", limit) as cgroup:
        for node in ("n-a", "n-b", "n-c"):
            cluster.add_node(node)
        agent = cluster.start_agent(wrap=cgroup.wrap())
        agent.wait_ready()
        for node in ("n-a", "n-b"):
            wait_until(lambda n=node: cluster.status(n).get("result") == "applied", 20)
        wait_until(lambda: cluster.status("n-c").get("result") == "error", 20)
        figure = f"the memory limit of {limit / MIB:g} MiB holds {holds} workers"
        assert figure in cluster.status("n-c")["message"]
        assert "raise resources.limits.memory or add pool shards" in (
            cluster.status("n-c")["message"])
        assert figure in agent.logs()
        live_worker_pids(agent, ("n-a", "n-b"))
        read = series(agent.metrics())
        assert read[("agentpool_memory_limit_bytes", ())] == limit
        assert read[("agentpool_memory_limit_workers", ())] == holds
        assert read[("agentpool_nodes_refused", ())] == 1
        assert sorted(worker_pids(agent)) == ["n-a", "n-b"]
        # Room made (a node leaves): the refused node starts, without a restart of the pod.
        cluster.api.delete("nodes", "n-a")
        wait_until(lambda: cluster.status("n-c").get("result") == "applied", 20)
        wait_until(lambda: series(agent.metrics())[("agentpool_nodes_refused", ())] == 0, 10)
        assert sorted(worker_pids(agent)) == ["n-b", "n-c"]
        assert cgroup.oom_kills() == 0
        assert agent.terminate() == 0
        assert os.path.isdir(cgroup.path)
