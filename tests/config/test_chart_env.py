"""The chart's agent environment, rendered by the real Helm engine, loads as settings.

What the DaemonSet and the StatefulSet pass is exactly what the agent parses
at start: a variable the chart sets that the options table no longer knows,
or a value it refuses, would only show as a crash-looping pod.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentpool.config.options import OPTIONS, AgentMode, Membership
from agentpool.config.settings import Settings, load_settings
from agentpool.pool.assignment import Assignment
from tests.support.chart import CHART_DIR, NAMESPACE, env_of, find, load_helm, parse_manifests

# What the downward API gives the pod (the chart's fieldRefs), for one pod of each shape.
POD = {
    "spec.nodeName": "worker-0",
    "metadata.name": "joulie-agent-pool-1",
    "metadata.namespace": NAMESPACE,
}


@pytest.fixture(scope="module")
def chart() -> Iterator[Any]:
    with load_helm().Chart.load(CHART_DIR) as loaded:
        yield loaded


def settings_of(chart: Any, values: dict[str, Any], kind: str) -> Settings:
    objects = parse_manifests(chart.render(values, name="joulie", namespace=NAMESPACE))
    (workload,) = find(objects, kind)
    env = {
        name: POD[value["fieldRef"]] if isinstance(value, dict) else value
        for name, value in env_of(workload).items()
    }
    unknown = env.keys() - {opt.env for opt in OPTIONS}
    assert not unknown, f"the chart sets variables the agent does not read: {unknown}"
    return load_settings(env)


def test_the_daemonset_env_is_a_daemonset_agent_for_its_node(chart: Any) -> None:
    settings = settings_of(chart, {}, "DaemonSet")
    assert settings.mode is AgentMode.DAEMONSET
    assert settings.node_name == "worker-0"
    assert settings.sysfs_root == "/host-sys"


def test_the_statefulset_env_is_a_static_pool_with_the_ordinal_as_shard(chart: Any) -> None:
    settings = settings_of(chart, {"agent": {"mode": "pool"}}, "StatefulSet")
    assert settings.mode is AgentMode.POOL
    assert (settings.pool_shards, settings.pool_shard_id) == (2, 1)
    assert settings.elastic.membership is Membership.STATIC


def test_the_lease_pool_env_follows_its_statefulset(chart: Any) -> None:
    values = {"agent": {"mode": "pool", "pool": {"membership": "lease", "assignment": "modulo"}}}
    settings = settings_of(chart, values, "StatefulSet")
    assert settings.elastic.lease
    assert settings.elastic.assignment is Assignment.MODULO
    assert settings.elastic.namespace == NAMESPACE
    assert settings.elastic.statefulset == "joulie-agent-pool"
