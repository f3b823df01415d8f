"""Node events from the real agent on the emulator: what is recorded, and how often.

The agent (``python -m agentpool``, pool mode) runs against the API emulator
and the power simulator; these tests read the ``events.k8s.io/v1`` Events
back through the emulator's direct API. The same on a real kube-apiserver,
as the chart's ServiceAccount: ``tests/envtest/test_events.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from tests.support.agents import series

NAMESPACE = "kube-system"


def node_events(cluster: SimCluster, node: str | None = None) -> list[dict[str, Any]]:
    kind = "events" if cluster.server is None else "event.events.k8s.io/v1"
    items = cluster.api.list(kind, namespace=NAMESPACE)
    return [e for e in items if node is None or e["regarding"]["name"] == node]


def reasons(cluster: SimCluster, node: str) -> list[str]:
    return sorted(e["reason"] for e in node_events(cluster, node))


def event_writes(cluster: SimCluster) -> int:
    counts = cluster.emulator.request_counts()
    return counts.get(("create", "events"), 0) + counts.get(("patch", "events"), 0)


def controls(cluster: SimCluster, node: str) -> int:
    return len(cluster.power.requests(node=node, kind="control"))


def test_what_an_operator_sees_and_nothing_in_a_steady_state() -> None:
    with SimCluster() as cluster:
        cluster.add_node("ev-a")
        cluster.add_node("ev-b", http=False)  # host control on a host with no RAPL: blocked
        cluster.add_node("ev-c")
        agent = cluster.start_agent({"POD_NAME": "pool-0"})
        agent.wait_ready(30)
        wait_until(lambda: reasons(cluster, "ev-a") == ["PowerCapApplied"]
                   and reasons(cluster, "ev-b") == ["PowerCapBlocked"]
                   and reasons(cluster, "ev-c") == ["PowerCapApplied"], 30)
        (applied,) = node_events(cluster, "ev-a")
        assert applied["note"].startswith("CPU power cap 120 W via rapl applied")
        assert applied["type"] == "Normal"
        assert applied["action"] == "SetPowerCap"
        assert applied["reportingController"] == "agentpool"
        assert applied["reportingInstance"] == "pool-0"
        assert applied["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "ev-a",
                                        "uid": "ev-a"}
        assert applied["eventTime"].endswith("Z")
        (blocked,) = node_events(cluster, "ev-b")
        assert blocked["type"] == "Warning"
        assert "RAPL unavailable" in blocked["note"]

        # Steady state: ticks go on (control requests reach the simulator), events do not.
        before, ticks = event_writes(cluster), controls(cluster, "ev-a")
        wait_until(lambda: controls(cluster, "ev-a") >= ticks + 5, 30)
        assert event_writes(cluster) == before

        cluster.set_cap("ev-a", 200)
        cluster.api.patch("nodepowerprofiles", "ev-c",
                          {"spec": {"cpu": {"packagePowerCapWatts": -5}}})
        wait_until(lambda: "PowerCapChanged" in reasons(cluster, "ev-a")
                   and "PowerCapError" in reasons(cluster, "ev-c"), 30)
        changed = next(e for e in node_events(cluster, "ev-a") if e["reason"] == "PowerCapChanged")
        assert "200 W" in changed["note"]
        assert "was CPU power cap 120 W via rapl" in changed["note"]
        error = next(e for e in node_events(cluster, "ev-c") if e["reason"] == "PowerCapError")
        assert "spec.cpu.packagePowerCapWatts" in error["note"]

        assert agent.terminate() == 0
        # The host of ev-a had a cap and was put back; ev-b (blocked) and ev-c (error) had none.
        restored = [e for e in node_events(cluster) if e["reason"] == "HostRestored"]
        assert [e["regarding"]["name"] for e in restored] == ["ev-a"]
        assert restored[0]["note"] == (
            "agent stopped: host limits restored (was CPU power cap 200 W via rapl)")


def test_events_false_records_none() -> None:
    with SimCluster() as cluster:
        cluster.add_node("quiet-a")
        agent = cluster.start_agent({"EVENTS": "false"})
        agent.wait_ready(30)
        wait_until(lambda: cluster.status("quiet-a").get("result") == "applied", 30)
        cluster.set_cap("quiet-a", 150)
        wait_until(lambda: cluster.power.state("quiet-a").cap_watts == 150, 30)
        assert not [name for name, _ in series(agent.metrics()) if "events" in name]
        assert agent.terminate() == 0
        assert event_writes(cluster) == 0


@pytest.fixture(params=["emulator", "envtest"])
def server(request: pytest.FixtureRequest) -> EnvtestServer | None:
    return request.getfixturevalue("envtest_server") if request.param == "envtest" else None


def test_a_flapping_node_is_counted_on_few_events_within_its_budget(
    server: EnvtestServer | None,
) -> None:
    with SimCluster(server=server) as cluster:
        if server is not None:
            wipe_events(cluster, "flap-")
        cluster.add_node("flap-0")
        agent = cluster.start_agent()
        agent.wait_ready(30)
        wait_until(lambda: reasons(cluster, "flap-0") == ["PowerCapApplied"], 30)
        flips = 0

        def flip() -> None:
            nonlocal flips
            cap = 200 if flips % 2 == 0 else 120
            cluster.set_cap("flap-0", cap)
            wait_until(lambda: cluster.power.state("flap-0").cap_watts == cap, 30)
            flips += 1

        # client-go's spam filter: 25 writes per node at once, then one per 5 minutes.
        # Occurrences may fold into fewer writes while a write is in flight: flip until the
        # budget is spent, then some more, which must not be written.
        while attempts(agent) < 25:
            assert flips < 300, f"{attempts(agent)} writes after {flips} flips"
            flip()
        for _ in range(10):
            flip()
        metrics = series(agent.metrics())
        assert attempts(agent) == 25  # a failed write (retried later) spends its token too
        if server is None:  # the emulator counts what it served
            assert event_writes(cluster) == 25
        # The occurrences are 3 Events (applied, changed to 200, changed to 120) whose
        # counts grow with each repeat; what the budget holds back is still counted, pending.
        events = node_events(cluster, "flap-0")
        assert sorted(e["reason"] for e in events) == [
            "PowerCapApplied", "PowerCapChanged", "PowerCapChanged"]
        counts = sorted((e.get("series") or {}).get("count", 1) for e in events)
        assert counts[0] == 1
        assert sum(counts) <= flips + 1
        assert counts[-1] >= 10
        assert metrics[("agentpool_events_pending", ())] >= 1
        assert agent.terminate() == 0
        if server is not None:
            wipe_events(cluster, "flap-")


def attempts(agent: AgentProcess) -> float:
    """Event writes the agent made, as its metrics count them: succeeded or failed."""
    return sum(v for (name, _), v in series(agent.metrics()).items()
               if name in ("agentpool_events_written_total", "agentpool_events_failed_total"))


def wipe_events(cluster: SimCluster, prefix: str) -> None:
    """A shared real server keeps Events between scenarios: remove this one's."""
    for event in node_events(cluster):
        if event["regarding"]["name"].startswith(prefix):
            cluster.api.delete("event.events.k8s.io/v1", event["metadata"]["name"], NAMESPACE)
