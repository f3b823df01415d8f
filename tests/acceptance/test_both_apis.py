"""The real agent, with the chart's defaults, on a cluster where both Joulie APIs are served.

The emulator serves the chart's four CRDs (as ``helm install`` does) and the
agent runs with ``JOULIE_API`` unset (``auto``): some nodes have
NodePowerProfiles, some NodeTwins, one both, one neither; a node then moves
from its profile to a twin and back with its cap in force at every tick and
its worker kept; caps removed while nodes stay managed are released; CRDs
installed and removed while the agent runs are picked up without a restart.
The power simulator's request log is the oracle for what was in force.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.cluster import SimCluster
from agentpool.sim.objects import MANAGED, node_twin
from agentpool.sim.polling import wait_until
from agentpool.sim.power.model import RAPL_ACTION
from agentpool.sim.sysfs.trees import read_int
from tests.support.agents import (
    MOVED,
    all_read,
    host_cluster,
    live_worker_pid,
    live_worker_pids,
    node_apis,
    pl1_files,
    restarts,
    tp_status,
    twin_status,
    worker_pids,
)

INTERVAL_S = 1.0
"""RECONCILE_INTERVAL of the agents here (SimCluster's)."""


def add_bare_node(cluster: SimCluster, name: str) -> None:
    """A managed node with no Joulie object at all (routing then comes from TELEMETRY_*)."""
    cluster.api.create("nodes", {"metadata": {"name": name, "labels": {MANAGED: "true"}}})


def restored(files: list[Path], originals: dict[Path, int]) -> bool:
    """Every file holds its original; one caught between truncate and write does not yet."""
    try:
        return all(read_int(f) == originals[f] for f in files)
    except ValueError:
        return False


def caps_posted(cluster: SimCluster, node: str, since: float) -> list[tuple[float, Any]]:
    """(arrival, capWatts of a RAPL request, or the action of any other) per control request."""
    out = []
    for r in cluster.power.requests(node=node, kind="control"):
        if r.monotonic >= since:
            body = r.body or {}
            out.append((r.monotonic, body.get("capWatts")
                        if body.get("action") == RAPL_ACTION else body.get("action")))
    return out


def wait_cap(cluster: SimCluster, node: str, cap: float, timeout: float = 30) -> None:
    wait_until(lambda: cluster.power.state(node).cap_watts == cap, timeout)


def test_mixed_cluster_then_a_migration_to_the_twin_and_back_without_a_gap() -> None:
    with SimCluster() as cluster:
        cluster.add_node("p-0", cap=120)  # NodePowerProfile + TelemetryProfile (HTTP)
        cluster.add_node("p-1", cap=110)
        for name, cap in (("t-0", 140.0), ("t-1", 150.0)):
            add_bare_node(cluster, name)  # routed by the agent's TELEMETRY_* variables
            cluster.api.create("nodetwins", node_twin(name, cap=cap))
        cluster.add_node("b-0", cap=130)  # both: the twin wins
        cluster.api.create("nodetwins", node_twin("b-0", cap=145))
        cluster.add_node("x-0", profile="")  # a TelemetryProfile and nothing else
        agent = cluster.start_agent(cluster.routing_env())
        agent.wait_ready()
        for name, cap in (("p-0", 120), ("p-1", 110), ("t-0", 140), ("t-1", 150), ("b-0", 145)):
            wait_cap(cluster, name, cap)
        wait_until(lambda: tp_status(cluster, "p-0").get("result") == "applied", 20)
        wait_until(lambda: twin_status(cluster, "t-0").get("result") == "applied", 20)
        wait_until(lambda: twin_status(cluster, "b-0").get("result") == "applied", 20)
        assert tp_status(cluster, "b-0") == {}  # never followed its profile: nothing there
        wait_until(lambda: tp_status(cluster, "x-0").get("result") == "none", 20)
        assert tp_status(cluster, "x-0")["message"] == (
            "nothing to enforce: no NodeTwin or NodePowerProfile targets this node"
        )
        wait_until(lambda: len(node_apis(agent)) == 6, 10)
        assert node_apis(agent) == {
            "p-0": "profiles", "p-1": "profiles", "t-0": "nodetwin", "t-1": "nodetwin",
            "b-0": "nodetwin", "x-0": "none",
        }
        pid = live_worker_pid(agent, "p-0")

        # p-0 moves to a NodeTwin: both exist for a while, then the profile goes.
        started = time.monotonic()
        cluster.api.create("nodetwins", node_twin("p-0", cap=125))
        wait_cap(cluster, "p-0", 125)
        wait_until(lambda: "125 W" in twin_status(cluster, "p-0").get("message", ""), 20)
        wait_until(lambda: tp_status(cluster, "p-0").get("result") == "none", 20)
        moved = f"{MOVED} NodeTwin 'p-0' (status.controlStatus)"
        assert tp_status(cluster, "p-0")["message"] == moved
        cluster.api.delete("nodepowerprofiles", "p-0")
        time.sleep(3 * INTERVAL_S)  # three ticks with the profile gone: observing nothing changes
        assert node_apis(agent)["p-0"] == "nodetwin"
        # ... and back: a new profile, then the twin goes.
        cluster.api.create("nodepowerprofiles", {
            "metadata": {"name": "p-0"}, "spec": {"nodeName": "p-0", "profile": "eco",
                                                  "cpu": {"packagePowerCapWatts": 115}}})
        cluster.api.delete("nodetwins", "p-0")
        wait_cap(cluster, "p-0", 115)
        wait_until(lambda: "115 W" in tp_status(cluster, "p-0").get("message", ""), 20)
        time.sleep(2 * INTERVAL_S)  # two more ticks on the profile, for the log below
        every = caps_posted(cluster, "p-0", 0.0)
        # From the last request before the move on.
        posted = every[max(i for i, (at, _) in enumerate(every) if at < started):]

        # The cap was in force at every tick: every request set one of the three, none
        # released it, and no tick was missed (a request per tick, 5x headroom on 1 s).
        assert {cap for _, cap in posted} == {120.0, 125.0, 115.0}, posted
        gaps = [b - a for (a, _), (b, _) in itertools.pairwise(posted)]
        assert len(posted) >= 6, posted
        assert max(gaps) < 5 * INTERVAL_S, gaps
        assert [cap for _, cap in posted] == sorted(
            (cap for _, cap in posted), key=[120.0, 125.0, 115.0].index
        )  # in the order the operator moved it
        assert worker_pids(agent)["p-0"] == pid
        assert restarts(agent, "p-0") == 0
        assert tp_status(cluster, "p-0")["result"] == "applied"
        logs = agent.logs()
        twin_line = "node p-0 follows the NodeTwin API (NodeTwin 'p-0'; JOULIE_API=auto)"
        assert logs.count(twin_line) == 1
        assert logs.count("node p-0 follows the profile API (NodePowerProfile 'p-0'") == 2
        assert "released" not in tp_status(cluster, "p-0")["message"]
        assert agent.terminate() == 0


def test_removed_caps_are_released_and_the_status_says_so() -> None:
    with SimCluster() as cluster:
        template, trees = host_cluster(cluster, ["h-0"], cap=50)  # host RAPL, sysfs tree
        files = pl1_files(trees)
        originals = {f: read_int(f) for f in files}
        cluster.add_node("d-0", cap=120)  # HTTP control, RAPL at the simulator
        add_bare_node(cluster, "t-0")
        cluster.api.create("nodetwins", node_twin("t-0", cap=140))
        agent = cluster.start_agent({**cluster.routing_env(), "SYSFS_ROOT": template})
        agent.wait_ready()
        wait_until(lambda: all_read(files, 50_000_000), 20)
        wait_cap(cluster, "d-0", 120)
        wait_cap(cluster, "t-0", 140)
        pids = live_worker_pids(agent, ("h-0", "d-0", "t-0"))

        cluster.api.delete("nodepowerprofiles", "h-0")  # the TelemetryProfile stays
        cluster.api.delete("nodepowerprofiles", "d-0")
        cluster.api.patch("nodetwins", "t-0", {"spec": {"cpu": {"packagePowerCapWatts": None}}})
        wait_until(lambda: restored(files, originals), 20)
        # Over HTTP the cap goes up to the maximum the telemetry reports (250 W).
        wait_cap(cluster, "d-0", 250)
        wait_cap(cluster, "t-0", 250)
        released = "cap released: "
        wait_until(lambda: released in tp_status(cluster, "h-0").get("message", ""), 20)
        assert tp_status(cluster, "h-0") | {"updatedAt": "", "observed": {}} == {
            "backend": "none", "result": "none", "updatedAt": "", "observed": {},
            "message": "nothing to enforce: no NodeTwin or NodePowerProfile targets this node; "
                       "cap released: host limits restored",
        }
        wait_until(lambda: released in tp_status(cluster, "d-0").get("message", ""), 20)
        assert tp_status(cluster, "d-0")["message"].endswith(
            "cap released: RAPL cap over HTTP raised to the maximum 250 W "
            "(telemetry cpu.packagePowerMaxWatts)"
        )
        wait_until(lambda: released in twin_status(cluster, "t-0").get("message", ""), 20)
        assert twin_status(cluster, "t-0")["message"].startswith(
            "nothing to enforce: NodeTwin 't-0' sets neither"
        )
        assert "node h-0: no NodeTwin or NodePowerProfile targets this node; cap released" in (
            agent.logs()
        )
        assert worker_pids(agent) == pids  # the nodes stay managed: same workers
        assert agent.terminate() == 0
        assert restored(files, originals)


def readyz(agent: AgentProcess) -> tuple[int, str]:
    try:
        return agent.get("/readyz", timeout=2.0)
    except OSError:
        return 0, ""


def test_crds_installed_after_start_and_removed_while_running() -> None:
    with SimCluster(crds="profiles") as cluster:  # an operator of the profile API only
        cluster.add_node("a", cap=130)
        cluster.add_node("b", cap=120)
        agent = cluster.start_agent(cluster.routing_env())
        agent.wait_ready()
        wait_cap(cluster, "a", 130)
        wait_cap(cluster, "b", 120)
        pids = live_worker_pids(agent, ("a", "b"))
        started = time.monotonic()

        # The current operator's CRDs are installed, and it writes a twin for node a.
        cluster.emulator.install("all")
        cluster.api.create("nodetwins", node_twin("a", cap=140))
        wait_cap(cluster, "a", 140, timeout=40)  # the next discovery, at most 10 s away
        wait_until(lambda: twin_status(cluster, "a").get("result") == "applied", 20)
        wait_until(lambda: tp_status(cluster, "a").get("result") == "none", 20)
        assert readyz(agent)[0] == 200
        # The metrics are published a loop period after the change, not with the status.
        wait_until(lambda: node_apis(agent) == {"a": "nodetwin", "b": "profiles"}, 20)

        # Its CRD is removed again: node a falls back to its profile, b is untouched.
        cluster.emulator.install("profiles")
        wait_cap(cluster, "a", 130, timeout=40)
        wait_until(lambda: tp_status(cluster, "a").get("result") == "applied", 20)
        assert readyz(agent)[0] == 200
        assert "nodetwins.joulie.io is no longer served: stopped watching it" in agent.logs()
        assert {cap for _, cap in caps_posted(cluster, "a", started)} == {130.0, 140.0}
        assert {cap for _, cap in caps_posted(cluster, "b", started)} == {120.0}
        assert worker_pids(agent) == pids

        # Every Joulie CRD goes: not ready, naming what is missing; the caps are released.
        cluster.emulator.install("none")
        wait_until(lambda: readyz(agent)[0] == 503, 40)
        assert "missing: nodepowerprofiles.joulie.io, telemetryprofiles.joulie.io, " \
               "nodetwins.joulie.io, nodehardwares.joulie.io" in readyz(agent)[1]
        wait_cap(cluster, "a", 250, timeout=20)
        wait_cap(cluster, "b", 250, timeout=20)
        assert agent.process.poll() is None
        assert agent.terminate() == 0
