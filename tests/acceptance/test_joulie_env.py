"""The agent started with values Joulie's agent runs with: it runs, enforces, and says once
what it read differently (docs/joulie-compatibility.md).

A real ``python -m agentpool`` against the API emulator and the power
simulator, with the values issue 41 found crash-looping it (exit 2): each
one now reads as Joulie's agent reads it, or as the compatibility page
says, and its note is logged once, at start.
"""

from __future__ import annotations

from agentpool.sim.agentproc import free_port
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until


def test_joulies_values_start_an_agent_that_enforces_and_says_each_once() -> None:
    with SimCluster(api="nodetwin") as cluster:
        cluster.add_node("j-0", cap=130)
        port = free_port()
        env = {
            **cluster.routing_env(),
            "METRICS_ADDR": str(port),  # no colon: the port
            "RECONCILE_INTERVAL": "0",
            "SIMULATE_ONLY": "",
            "TELEMETRY_CPU_SOURCE": "prometheus",
            "TELEMETRY_HTTP_TIMEOUT_SECONDS": "0",
            "SPEC_READ_TIMEOUT": "soon",
            "TELEMETRY_GPU_CONTROL_MODE": "rapl",
        }
        agent = cluster.start_agent(env)
        agent.port = port  # where the agent listens: METRICS_ADDR as given above
        agent.wait_ready(60)
        wait_until(lambda: cluster.status("j-0").get("result") == "applied", 30)
        assert cluster.power.state("j-0").cap_watts == 130
        logs = agent.logs()
        for note in (
            "configuration: METRICS_ADDR=",
            "configuration: RECONCILE_INTERVAL='0': ",
            "configuration: TELEMETRY_CPU_SOURCE='prometheus': ",
            "configuration: TELEMETRY_HTTP_TIMEOUT_SECONDS='0': ",
            "configuration: SPEC_READ_TIMEOUT='soon': ",
            "configuration: TELEMETRY_GPU_CONTROL_MODE is not read: ",
        ):
            assert logs.count(note) == 1, (note, logs)
        assert "SIMULATE_ONLY" not in logs  # blank is unset: nothing to say
        assert agent.terminate() == 0
