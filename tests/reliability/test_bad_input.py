"""Bad custom resources and odd node names: a clear status, and nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.sim.cluster import SimCluster
from agentpool.sim.objects import power_profile, telemetry_profile
from agentpool.sim.polling import wait_until
from tests.support.agents import live_worker_pid


def http_control(timeout: float) -> dict[str, Any]:
    http = {"endpoint": "http://x/", "timeoutSeconds": timeout}
    return {"controls": {"cpu": {"type": "http", "http": http}}}


def replace_spec(cluster: SimCluster, resource: str, obj: dict[str, Any]) -> None:
    name = obj["metadata"]["name"]
    current = cluster.api.get(resource, name)
    cluster.api.replace(resource, {**obj, "metadata": current["metadata"]})


NPP_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("cap-zero", {"cpu": {"packagePowerCapWatts": 0}}, "spec.cpu.packagePowerCapWatts: 0 must"),
    ("cap-negative", {"cpu": {"packagePowerCapWatts": -5}}, "spec.cpu.packagePowerCapWatts: -5"),
    ("cap-string", {"cpu": {"packagePowerCapWatts": "120W"}}, "'120W' is not a number"),
    ("bad-profile", {"profile": "turbo"}, "spec.profile: 'turbo' is not performance or eco"),
]

TP_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("tp-type", {"sources": {"cpu": {"type": "snmp"}}}, "spec.sources.cpu.type: 'snmp'"),
    (
        "tp-scheme",
        {"controls": {"cpu": {"type": "http", "http": {"endpoint": "sim:18080/control"}}}},
        "spec.controls.cpu.http.endpoint: 'sim:18080/control' is not an http",
    ),
    (
        "tp-timeout-0",
        {
            "controls": {
                "cpu": {"type": "http", "http": {"endpoint": "http://x/", "timeoutSeconds": 0}}
            }
        },
        "spec.controls.cpu.http.timeoutSeconds: 0 must be",
    ),
    (
        "tp-timeout-1000",
        http_control(1000),
        "spec.controls.cpu.http.timeoutSeconds: 1000 must be",
    ),
]


@pytest.fixture(scope="module")
def cluster() -> Any:
    with SimCluster() as c:
        for name, spec, _ in NPP_CASES:
            c.add_node(name, cap=None)
            profile = power_profile(name, 120)
            profile["spec"].update(spec)
            c.api.replace(
                "nodepowerprofiles",
                {**profile, "metadata": c.api.get("nodepowerprofiles", name)["metadata"]},
            )
        for name, spec, _ in TP_CASES:
            c.add_node(name)
            tp = telemetry_profile(name, c.power)
            tp["spec"].update(spec)
            replace_spec(c, "telemetryprofiles", tp)
        c.add_node("no-profile", cap=None, profile="")
        c.add_node("twice")
        c.api.create(
            "nodepowerprofiles", {**power_profile("twice", 80), "metadata": {"name": "twice-b"}}
        )
        for name in ("a" * 63 + "." + "b" * 63 + ".example.com", "nöde-ü", "dotted.node.name"):
            c.add_node(name)
        agent = c.start_agent()
        agent.wait_ready()
        c.agent = agent  # type: ignore[attr-defined]
        yield c


@pytest.mark.parametrize(("name", "spec", "expected"), NPP_CASES + TP_CASES)
def test_malformed_resources_become_status_errors_naming_the_field(
    cluster: SimCluster, name: str, spec: dict[str, Any], expected: str
) -> None:
    wait_until(lambda: cluster.status(name).get("result") == "error", 20)
    status = cluster.status(name)
    assert expected in status["message"]
    assert status["backend"] == "none"
    assert cluster.power.requests(node=name, kind="control") == [], "nothing may be written"


def test_a_node_without_a_profile_has_nothing_to_enforce(cluster: SimCluster) -> None:
    wait_until(lambda: cluster.status("no-profile").get("result") == "none", 20)
    # JOULIE_API=auto (the chart's default): either API's object would do.
    assert cluster.status("no-profile")["message"] == (
        "nothing to enforce: no NodeTwin or NodePowerProfile targets this node"
    )
    assert cluster.power.requests(node="no-profile", kind="control") == []


def test_two_profiles_for_one_node_pick_the_oldest_and_say_so(cluster: SimCluster) -> None:
    wait_until(lambda: cluster.status("twice").get("result") == "applied", 20)
    status = cluster.status("twice")
    assert status["observed"]["capWatts"] == 120  # from "twice", created first
    assert (
        "2 NodePowerProfiles target node twice (twice, twice-b); using the oldest, 'twice'"
        in (status["message"])
    )


@pytest.mark.parametrize(
    "name", ["a" * 63 + "." + "b" * 63 + ".example.com", "nöde-ü", "dotted.node.name"]
)
def test_long_dotted_and_non_ascii_node_names_work(cluster: SimCluster, name: str) -> None:
    wait_until(lambda: cluster.status(name).get("result") == "applied", 20)
    live_worker_pid(cluster.agent, name)  # type: ignore[attr-defined]
