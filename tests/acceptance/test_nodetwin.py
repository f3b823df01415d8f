"""The real agent on Joulie's current API (NodeTwin + NodeHardware) and API selection.

Acceptance of the NodeTwin API: on a cluster that serves only NodeTwin and
NodeHardware, with the operator's status fields present, three pool shards
enforce every managed node, write ``controlStatus.cpu``, leave every other
status field unchanged after ten status writes per node, and publish one
NodeHardware per node.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from agentpool.kube.nodehardware import node_object_name
from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.cluster import SimCluster
from agentpool.sim.objects import node_twin
from agentpool.sim.polling import wait_until
from tests.support.agents import (
    host_cluster,
    node_apis,
    pl1_files,
    published_hardware,
    worker_pids,
)
from tests.support.tls import https_gateway, make_pki


def readyz(agent: AgentProcess) -> tuple[int, str]:
    """``/readyz`` of an agent that may not listen yet (0: no answer)."""
    try:
        return agent.get("/readyz", timeout=2.0)
    except OSError:
        return 0, ""


def operator_fields(cluster: SimCluster, node: str) -> str:
    """Everything in a NodeTwin's status but the agent's ``controlStatus.cpu``, as bytes."""
    status: dict[str, Any] = dict(cluster.api.get("nodetwins", node_object_name(node))["status"])
    control = dict(status.pop("controlStatus"))
    control.pop("cpu", None)
    return json.dumps({**status, "controlStatus": control}, sort_keys=True)


def test_three_shards_enforce_nodetwins_and_publish_nodehardware() -> None:
    managed = [f"kwok-node-{i}" for i in range(9)] + ["gpu-node.0.example"]
    with SimCluster(api="nodetwin") as cluster:
        for i, name in enumerate(managed):
            # Watts for some nodes, percent of max (the operator's default) for the others.
            cluster.add_node(name, cap=120.0 if i % 2 else None, pct=None if i % 2 else 60.0)
        cluster.add_node("unmanaged", managed=False)
        before = {n: operator_fields(cluster, n) for n in managed}
        agents = [
            cluster.start_agent(
                {**cluster.routing_env(), "POOL_SHARDS": "3", "POOL_SHARD_ID": str(i)}
            )
            for i in range(3)
        ]
        for agent in agents:
            agent.wait_ready()
        wait_until(lambda: set().union(*(worker_pids(a) for a in agents)) == set(managed), 30)
        wait_until(lambda: all(cluster.status(n).get("result") == "applied" for n in managed), 30)
        # Percent caps resolve against the telemetry's maximum (250 W): 60% -> 150 W.
        assert cluster.power.state("kwok-node-0").cap_watts == 150.0
        assert cluster.power.state("kwok-node-1").cap_watts == 120.0
        assert "60% of max 250 W" in cluster.status("kwok-node-0")["message"]
        # Ten status writes per node: each new cap changes the message, which is written.
        for step in range(10):
            cap = 100.0 + step
            for name in managed:
                cluster.set_cap(name, cap)
            wait_until(
                lambda cap=cap: all(
                    f"{cap:g} W" in cluster.status(n).get("message", "") for n in managed
                ),
                20,
            )
            for name in managed:
                assert operator_fields(cluster, name) == before[name], name
        for name in managed:
            assert set(cluster.status(name)) == {"backend", "result", "message", "updatedAt"}
            assert cluster.power.state(name).cap_watts == 109.0
        assert cluster.status("unmanaged") == {}
        # Published after each node's first tick: long done, but said by an event, not a time.
        wait_until(lambda: len(published_hardware(cluster)) == len(managed), 20)
        hardware = published_hardware(cluster)
        assert sorted(hardware) == sorted(managed)
        assert hardware["gpu-node.0.example"]["metadata"]["name"] == "gpu-node-0-example"
        assert hardware["kwok-node-3"]["status"]["cpu"]["totalCores"] == 64
        assert hardware["kwok-node-3"]["status"]["cpu"]["controlAvailable"] is True
        # Steady state: no NodeHardware write at all, and no NodeTwin write per tick.
        cluster.emulator.reset_counters()
        time.sleep(3.0)  # three reconcile intervals of 1 s: observing that nothing happens
        counts = cluster.emulator.request_counts()
        assert counts.get(("patch", "nodehardwares/status"), 0) == 0
        assert counts.get(("create", "nodehardwares"), 0) == 0
        assert counts.get(("patch", "nodetwins/status"), 0) <= len(managed)  # heartbeats only
        for agent in agents:
            assert agent.terminate() == 0
        for name in managed:
            assert cluster.status(name)["message"].startswith("agent stopped")


@pytest.mark.parametrize(
    ("crds", "setting", "chosen", "kinds"),
    [
        ("all", "auto", "nodetwin", "nodepowerprofiles, telemetryprofiles, nodetwins, "
         "nodehardwares"),
        ("all", "profiles", "profiles", "nodepowerprofiles, telemetryprofiles"),
        ("all", "nodetwin", "nodetwin", "telemetryprofiles, nodetwins, nodehardwares"),
        ("profiles", "auto", "profiles", "nodepowerprofiles, telemetryprofiles"),
        ("nodetwin", "auto", "nodetwin", "nodetwins, nodehardwares"),
    ],
)
def test_what_each_setting_watches_and_follows_in_each_cluster_shape(
    crds: str, setting: str, chosen: str, kinds: str
) -> None:
    with SimCluster(crds="all") as cluster:
        # Seeded while every kind is served: a NodePowerProfile + TelemetryProfile (HTTP) at
        # 130 W and a NodeTwin at 140 W; then only the cluster shape's kinds stay served.
        cluster.add_node("a", cap=130)
        cluster.api.create("nodetwins", node_twin("a", cap=140))
        cluster.emulator.install(crds)
        env = {"JOULIE_API": setting, **cluster.routing_env()}
        agent = cluster.start_agent(env)
        agent.wait_ready()
        expected = 140.0 if chosen == "nodetwin" else 130.0
        wait_until(lambda: cluster.power.state("a").cap_watts == expected, 20)
        logs = agent.logs()
        assert f"Joulie kinds watched (JOULIE_API={setting}): {kinds}\n" in logs
        api = "NodeTwin" if chosen == "nodetwin" else "profile"
        assert f"node a follows the {api} API" in logs
        # The metrics snapshot follows a start within a loop period; the cap may come first.
        wait_until(lambda: node_apis(agent) == {"a": chosen}, 5)
        assert agent.terminate() == 0


def test_neither_api_served_is_not_ready_then_recovers_when_crds_arrive() -> None:
    with SimCluster(api="nodetwin") as cluster:
        cluster.emulator.install("none")
        cluster.api.create(
            "nodes", {"metadata": {"name": "a", "labels": {"joulie.io/managed": "true"}}}
        )
        agent = cluster.start_agent(cluster.routing_env())

        def not_ready_with_reason() -> bool:
            code, body = readyz(agent)
            return code == 503 and "neither nodetwins.joulie.io nor nodepowerprofiles" in body

        wait_until(not_ready_with_reason, 20)
        time.sleep(2.5)  # two retries: observing that the agent neither exits nor spams
        assert agent.process.poll() is None
        assert agent.logs().count("not ready: neither nodetwins.joulie.io") == 1
        cluster.emulator.install("nodetwin")
        cluster.api.create("nodetwins", node_twin("a", cap=111))
        agent.wait_ready(30)
        wait_until(lambda: cluster.power.state("a").cap_watts == 111.0, 20)
        assert agent.terminate() == 0


def test_named_api_not_served_is_not_ready() -> None:
    with SimCluster(api="nodetwin", crds="nodetwin") as cluster:
        agent = cluster.start_agent({"JOULIE_API": "profiles"})
        wait_until(
            lambda: "JOULIE_API=profiles but nodepowerprofiles" in readyz(agent)[1], 20
        )
        assert agent.terminate() == 0


def test_stale_desired_state_is_relaxed_while_the_api_is_away_then_enforced_again() -> None:
    with SimCluster(api="nodetwin") as cluster:
        template, trees = host_cluster(cluster, ["a", "b"], cap=50)
        files = pl1_files(trees)
        originals = {f: f.read_text() for f in files}
        env = {"SYSFS_ROOT": template, "SPEC_READ_TIMEOUT": "3s", "WATCH_TIMEOUT": "1s"}
        agent = cluster.start_agent(env)
        agent.wait_ready()
        wait_until(lambda: all(f.read_text().strip() == "50000000" for f in files), 20)
        # Every NodeTwin request fails from now on: the watch ends (1 s) and cannot resume.
        cluster.emulator.inject(resource="nodetwins", fault="500", times=None)
        wait_until(lambda: all(f.read_text() == originals[f] for f in files), 30)
        assert "desired state not confirmed from the API" in agent.logs()
        cluster.emulator.clear_faults()
        wait_until(lambda: all(f.read_text().strip() == "50000000" for f in files), 30)
        wait_until(lambda: "desired state confirmed again: enforcing it" in agent.logs(), 10)
        wait_until(lambda: cluster.status("a").get("result") == "applied", 20)
        assert agent.terminate() == 0


def test_agent_against_an_authenticating_https_gateway(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    token = "tok-7f3a9c-never-logged"
    (tmp_path / "token").write_text(token)
    with SimCluster(api="nodetwin") as cluster, https_gateway(pki, token) as gw:
        cluster.add_node("a", cap=150)
        env = {
            "TELEMETRY_CPU_SOURCE": "http",
            "TELEMETRY_CPU_HTTP_ENDPOINT": gw.telemetry,
            "TELEMETRY_CPU_CONTROL": "http",
            "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT": gw.control,
            "HTTP_CA_BUNDLE": str(pki.ca),
            "HTTP_TOKEN_FILE": str(tmp_path / "token"),
        }
        agent = cluster.start_agent(env)
        agent.wait_ready()
        wait_until(lambda: cluster.status("a").get("result") == "applied", 20)
        assert cluster.status("a")["message"] == "RAPL cap 150 W over HTTP: gateway applied the cap"
        gw.token = "the-gateway-now-wants-another"  # our token is refused from now on
        wait_until(lambda: cluster.status("a").get("result") == "error", 20)
        message = cluster.status("a")["message"]
        assert message.startswith(f"{gw.url}/control/a: HTTP 403 ")
        assert "refused the agent's credentials" in message
        everything = agent.logs() + agent.metrics() + json.dumps(cluster.api.list("nodetwins"))
        assert token not in everything
        assert agent.terminate() == 0


def test_an_unusable_hardware_catalog_is_said_once_and_the_agent_runs_without_it(
    tmp_path: Path,
) -> None:
    # Joulie's agent runs on without a catalog it cannot load: so does this one.
    catalog = tmp_path / "hardware.yaml"
    catalog.write_text("cpuModels: {}\n")  # no catalogVersion: Joulie refuses it too
    with SimCluster(api="nodetwin") as cluster:
        cluster.add_node("n-0", cap=120.0, labels={
            "feature.node.kubernetes.io/cpu-model.name": "Xeon-Platinum-8480-Plus"})
        agent = cluster.start_agent(
            {**cluster.routing_env(), "HARDWARE_CATALOG_PATH": str(catalog)})
        agent.wait_ready()
        wait_until(lambda: cluster.status("n-0").get("result") == "applied", 30)
        [published] = wait_until(lambda: list(published_hardware(cluster).values()), 10)
        assert published["status"]["cpu"]["rawModel"] == "Xeon-Platinum-8480-Plus"
        assert "model" not in published["status"]["cpu"]
        assert published["status"]["quality"]["overall"] == "heuristic"
        logs = agent.logs()
        assert logs.count("not a usable hardware catalog: catalogVersion is required") == 1
        assert f"HARDWARE_CATALOG_PATH='{catalog}' is invalid" in logs
        assert agent.terminate() == 0
