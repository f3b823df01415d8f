"""KUBE_CLIENT_QPS and KUBE_CLIENT_BURST hold, counted by the API server that received them.

A real kube-apiserver with an audit log (one event per request, stamped when
it arrived) and the agent as the chart's ServiceAccount, on Joulie's current
API with HTTP controls: at start-up it lists and watches, writes a NodeTwin
status, a NodeHardware and an Event per node, and on SIGTERM the final
statuses. A token bucket of ``qps`` and ``burst`` lets through at most
``burst + qps * t`` requests in any span of ``t`` seconds; the same agent
without the variables is run first on the same work, to show the work
outruns that bound (else the check below it could not fail).
"""

from __future__ import annotations

import time
from datetime import datetime

from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from tests.envtest.accounts import chart_account

QPS, BURST = 3.0, 5
NODES = 12
JITTER = 1
"""Requests released by the limiter in order may arrive a little out of step: one more in a
span is the network's, not the limiter's."""


def received(server: EnvtestServer, user: str, since: float, until: float) -> list[float]:
    """When the server received each request of ``user`` in [since, until] (epoch seconds);
    a watch is logged when it starts and when it ends, one request all the same."""
    times = {
        event["auditID"]: datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()
        for event in server.audit(user)
    }
    return sorted(at for at in times.values() if since <= at <= until)


def excess(times: list[float], qps: float, burst: int) -> float:
    """The most requests any span held beyond what the bucket allows (<= 0: none)."""
    worst = float("-inf")
    for i, first in enumerate(times):
        for j in range(i, len(times)):
            worst = max(worst, (j - i + 1) - (burst + qps * (times[j] - first)))
    return worst


def agent_requests(
    server: EnvtestServer, account: tuple[str, str], prefix: str, env: dict[str, str]
) -> list[float]:
    """Start the agent on NODES fresh nodes, wait for every cap applied, stop it: the
    times of every request it made, as the server received them."""
    user = f"system:serviceaccount:{account[0]}:{account[1]}"
    with SimCluster(server=server, service_account=account, api="nodetwin") as cluster:
        nodes = [f"{prefix}-{i}" for i in range(NODES)]
        for name in nodes:
            cluster.add_node(name)
        started = time.time()
        agent = cluster.start_agent({**cluster.routing_env(), **env})
        wait_until(
            lambda: all(cluster.status(n).get("result") == "applied" for n in nodes), 120
        )
        assert agent.terminate(timeout=60) == 0
        ended = time.time()
        assert "configuration:" not in agent.logs()  # both values taken as given
    return received(server, user, started, ended)


def test_the_agents_requests_keep_to_kube_client_qps_and_burst(audited: EnvtestServer) -> None:
    with chart_account(audited, "pool") as account:
        free = agent_requests(audited, account, "free", {})
        limited = agent_requests(
            audited, account, "limited",
            {"KUBE_CLIENT_QPS": f"{QPS:g}", "KUBE_CLIENT_BURST": str(BURST)},
        )
    # Unlimited, the same work goes out faster than the bucket would let it.
    assert excess(free, QPS, BURST) > 2 * JITTER, free
    assert len(limited) >= 3 * NODES  # a status, a NodeHardware and an Event per node at least
    assert excess(limited, QPS, BURST) <= JITTER, limited
