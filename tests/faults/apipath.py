"""The agent's path to kube-apiserver through the fault proxy, and what each side saw of it.

A scene is a :class:`~agentpool.sim.cluster.SimCluster` on the real server,
nodes whose controls go to the power simulator over HTTP, and one agent in
pool mode whose kubeconfig names the :class:`~tests.faults.proxy.FaultProxy`
instead of the server. Each side is read with its own eyes: the power
simulator is the hosts' truth (which cap each node was told, and when), the
server's audit log is the API's (which requests the agent made, and when),
and the agent's ``/readyz``, ``/healthz`` and log are what an operator sees.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from tests.faults.proxy import FaultProxy
from tests.support.agents import live_worker_pids

AGENT_USER = "agentpool"
"""The agents' user here: the audit log tells their requests apart by it."""
CAP_W = 100.0
"""Every node's cap as seeded."""
RAPL = "rapl.set_power_cap_watts"
COMPLAINT = re.compile(r"(?:WARNING|ERROR) +\S+ (agentpool\.\S+):")


@dataclass(frozen=True)
class Probe:
    """What a kubelet's probes saw, ``at`` seconds into a fault."""

    at: float
    healthz: int
    readyz: int
    why: str
    """``/readyz``'s body."""


def complaints(lines: list[str]) -> list[str]:
    """The logger of each warning or error among the agent's log ``lines``."""
    return [m.group(1) for line in lines if (m := COMPLAINT.search(line))]


def assert_probes(probes: list[Probe], noticed_s: float) -> None:
    """Liveness held throughout; readiness said the API is unreachable from ``noticed_s``."""
    assert all(p.healthz == 200 for p in probes), probes
    late = [p for p in probes if p.at >= noticed_s]
    assert late
    assert all(p.readyz == 503 and "unreachable" in p.why for p in late), late


def _received(event: dict[str, Any]) -> float:
    """When the server received an audited request (``time.time()``)."""
    return datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()


@dataclass
class Scene:
    server: EnvtestServer
    cluster: SimCluster
    proxy: FaultProxy
    agent: AgentProcess
    nodes: list[str]

    def caps_sent(
        self, since: float, until: float = math.inf, node: str | None = None
    ) -> dict[str, set[float]]:
        """Node -> every cap the agent sent it (RAPL requests) between two ``monotonic``
        times."""
        sent: dict[str, set[float]] = {}
        for request in self.cluster.power.requests(node=node, kind="control"):
            body = request.body or {}
            if since <= request.monotonic < until and body.get("action") == RAPL:
                sent.setdefault(str(request.node), set()).add(float(body["capWatts"]))
        return sent

    def first_sent(
        self, node: str, since: float, cap: float | None = None, above: float | None = None
    ) -> float | None:
        """When (``monotonic``) the agent first told ``node``, after ``since``, to cap at
        ``cap``, or above ``above`` (a release: the node's maximum)."""
        for request in self.cluster.power.requests(node=node, kind="control"):
            body = request.body or {}
            if request.monotonic < since or body.get("action") != RAPL:
                continue
            watts = float(body["capWatts"])
            if watts == cap or (above is not None and watts > above):
                return request.monotonic
        return None

    def ticking(self, since: float, until: float = math.inf) -> set[str]:
        """The nodes whose worker sent a control request between two ``monotonic`` times."""
        return {str(r.node) for r in self.cluster.power.requests(kind="control")
                if since <= r.monotonic < until}

    def requests(self, since: float, until: float = math.inf) -> Counter[tuple[str, str]]:
        """(verb, resource) -> how many requests of the agent's the server received
        between two ``time.time()`` instants, from its audit log."""
        seen: dict[str, tuple[str, str]] = {}
        for event in self.server.audit(AGENT_USER):
            if since <= _received(event) < until:
                ref = event.get("objectRef") or {}
                what = ref.get("resource", "discovery")
                if ref.get("subresource"):
                    what += "/" + ref["subresource"]
                seen[event["auditID"]] = (event["verb"], what)
        return Counter(seen.values())

    def status_writes(self, node: str, since: float, until: float = math.inf) -> int:
        """How many status writes of ``node``'s TelemetryProfile the server received
        between two ``time.time()`` instants."""
        return len({
            event["auditID"] for event in self.server.audit(AGENT_USER)
            if (event.get("objectRef") or {}).get("name") == node
            and (event.get("objectRef") or {}).get("subresource") == "status"
            and since <= _received(event) < until
        })

    def log_lines(self) -> list[str]:
        return self.agent.logs().splitlines()

    def probe(self, every_s: float, since: float, until: float, into: list[Probe]) -> None:
        """Probe ``/healthz`` and ``/readyz`` every ``every_s`` until ``until`` (``monotonic``),
        as a kubelet would, into ``into``."""

        def once() -> None:
            ready, why = self.agent.get("/readyz", timeout=5)
            healthz = self.agent.get("/healthz", timeout=5)[0]
            into.append(Probe(time.monotonic() - since, healthz, ready, why))

        poll(every_s, until, once)


@contextlib.contextmanager
def scene(
    server: EnvtestServer, nodes: int, env: Mapping[str, str]
) -> Iterator[Scene]:
    """``nodes`` nodes capped at :data:`CAP_W` and one agent through a proxy, every status
    ``applied``; everything stopped and wiped after."""
    with FaultProxy(server.port) as proxy, SimCluster(server=server, user=AGENT_USER) as cluster:
        config = json.loads(cluster.kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = proxy.url
        cluster.kubeconfig.write_text(json.dumps(config))
        names = [f"fault-{i}" for i in range(nodes)]
        for name in names:
            cluster.add_node(name, cap=CAP_W)
        agent = cluster.start_agent(dict(env))
        agent.wait_ready(120)
        wait_until(lambda: all(cluster.status(n).get("result") == "applied" for n in names), 60)
        live_worker_pids(agent, names)  # published a loop period after the statuses
        yield Scene(server, cluster, proxy, agent, names)
        assert agent.terminate() == 0, agent.logs()[-3000:]


def poll(every_s: float, until: float, probe: Callable[[], object]) -> None:
    """Call ``probe()`` every ``every_s`` until ``time.monotonic()`` reaches ``until``."""
    while (left := until - time.monotonic()) > 0:
        probe()
        time.sleep(min(every_s, left))
