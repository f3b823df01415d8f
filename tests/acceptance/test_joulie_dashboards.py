"""Joulie's Grafana dashboards against a live agent's ``/metrics`` (issue 41, section 2).

Every query of every agent panel of Joulie's dashboards at b9a50b1 and c38b80d
(``tests/support/joulie_dashboards.py``, our own fixture) is parsed and evaluated against what
the real agent serves, running against the simulation kit with a node of each kind
the panels show: RAPL over HTTP (a NodePowerProfile), DVFS over HTTP, DVFS on a host
whose RAPL is locked (cpufreq and RAPL energy series), and a NodeTwin. Each selector
must pick at least one series carrying the labels the query groups by and its legend
shows; ``rate``/``increase`` must read counters; and the panels must mean what they
mean against Joulie's agent: ``policy`` is the policy object's name, so a profile
switch changes the value of one series, which ``changes()`` counts.

This stands in for Prometheus: a selector's matchers are evaluated as Prometheus
does (regular expressions anchored), and ``changes()`` over two scrapes; the
expressions' arithmetic is not.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.cluster import SimCluster
from agentpool.sim.objects import node_twin, twin_name
from agentpool.sim.polling import wait_until
from agentpool.sim.sysfs.dynamics import LiveSysfs
from agentpool.sim.sysfs.trees import read_only_rapl
from tests.support.agents import host_cluster
from tests.support.joulie_dashboards import (
    AGENT_LABEL_VALUES,
    AGENT_METRICS,
    NODE_VARIABLE,
    PANELS,
    REVISIONS,
    Panel,
    Selector,
    parse,
)

RAPL, DVFS, HOST, TWIN = "jd-rapl", "jd-dvfs", "jd-host", "jd-twin"
NODES = (RAPL, DVFS, HOST, TWIN)


class Scrape:
    """One ``/metrics`` page: every sample's labels and value, and each family's type."""

    def __init__(self, text: str) -> None:
        self.samples: list[tuple[str, dict[str, str], float]] = []
        self.types: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples.append((sample.name, dict(sample.labels), sample.value))
                self.types[sample.name] = family.type

    def select(self, selector: Selector, variables: dict[str, str]) -> list[dict[str, str]]:
        """The label sets of the series ``selector`` picks (NaN: no series, as exported)."""
        return [
            labels for name, labels, value in self.samples
            if name == selector.metric and value == value
            and all(matches(labels.get(label, ""), op, expand(value_, variables))
                    for label, op, value_ in selector.matchers)
        ]

    def values(self, selector: Selector, variables: dict[str, str]) -> dict[tuple[Any, ...], float]:
        selected = {tuple(sorted(labels.items())) for labels in self.select(selector, variables)}
        return {
            tuple(sorted(labels.items())): value for name, labels, value in self.samples
            if name == selector.metric and tuple(sorted(labels.items())) in selected
        }


def expand(value: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$([a-z_]+)", lambda m: variables[m[1]], value)


def matches(actual: str, op: str, wanted: str) -> bool:
    if op == "=":
        return actual == wanted
    if op == "!=":
        return actual != wanted
    found = re.fullmatch(wanted, actual) is not None  # Prometheus anchors its regexes
    return found if op == "=~" else not found


def changes(before: Scrape, after: Scrape, selector: Selector,
            variables: dict[str, str]) -> dict[str, float]:
    """``changes(selector[window])`` over two scrapes, by node: a series present in both
    with another value counts 1, one that appears or vanishes counts nothing."""
    old, new = before.values(selector, variables), after.values(selector, variables)
    counted: dict[str, float] = {}
    for labels, value in new.items():
        node = dict(labels)["node"]
        changed = labels in old and old[labels] != value
        counted[node] = max(counted.get(node, 0.0), 1.0 if changed else 0.0)
    return counted


def node_variable(panel: Panel, scrape: Scrape) -> str:
    """``$node`` as Grafana fills it with every value selected."""
    query = NODE_VARIABLE[panel.dashboard]
    if query == "label_values(joulie_policy_cap_watts, node)":
        nodes = sorted({labels["node"] for name, labels, value in scrape.samples
                        if name == "joulie_policy_cap_watts" and value == value})
        assert nodes, "the $node variable lists no node"
    else:  # the operator's metric: it lists the managed nodes
        nodes = list(NODES)
    return "|".join(re.escape(n) for n in nodes)


def scrape(agent: AgentProcess) -> Scrape:
    return Scrape(agent.metrics())


def has(page: Scrape, metric: str, node: str) -> bool:
    return any(n == metric and labels.get("node") == node and v == v
               for n, labels, v in page.samples)


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[SimCluster, AgentProcess, Scrape, Scrape]]:
    """The agent, a scrape once every kind of node is controlled, and one after a profile
    switch of the RAPL node (NodePowerProfile) and of the NodeTwin."""
    with SimCluster() as cluster:
        cluster.add_node(RAPL, cap=120)
        cluster.add_node(DVFS, cap=80, mode="dvfs")  # below the simulated ~155 W
        cluster.add_node(TWIN, profile="")  # routed by its TelemetryProfile, no NPP
        cluster.api.create("nodetwins", node_twin(TWIN, cap=150))
        template, trees = host_cluster(cluster, [HOST], builder=read_only_rapl, cap=100)
        with LiveSysfs(trees[HOST]).start():
            agent = cluster.start_agent({"SYSFS_ROOT": template})
            agent.wait_ready(60)

            def ready() -> Scrape | None:
                page = scrape(agent)
                wanted = [(RAPL, "joulie_policy_cap_watts"), (TWIN, "joulie_policy_cap_watts"),
                          (DVFS, "joulie_dvfs_ema_power_watts"),
                          (HOST, "joulie_dvfs_cpu_max_freq_khz"),
                          (HOST, "joulie_rapl_package_total_power_watts")]
                return page if all(has(page, m, n) for n, m in wanted) else None

            before = wait_until(ready, 60)
            cluster.set_cap(RAPL, 200, profile="performance")
            cluster.api.patch("nodetwins", twin_name(TWIN),
                              {"spec": {"profile": "performance", "cpu": {
                                  "packagePowerCapWatts": 250}}})

            def switched() -> Scrape | None:
                page = scrape(agent)
                caps = {labels["node"]: v for n, labels, v in page.samples
                        if n == "joulie_policy_cap_watts" and v == v}
                return page if (caps.get(RAPL), caps.get(TWIN)) == (200, 250) else None

            after = wait_until(switched, 30)
            assert before is not None
            assert after is not None
            try:
                yield cluster, agent, before, after
            finally:
                assert agent.terminate() == 0
                for tree in trees.values():
                    tree.close()


@pytest.mark.parametrize("revision", REVISIONS)
def test_every_query_of_every_agent_panel_selects_series_with_its_labels(
    live: tuple[SimCluster, AgentProcess, Scrape, Scrape], revision: str
) -> None:
    _, _, before, page = live
    checked = 0
    for panel in (p for p in PANELS if revision in p.revisions):
        variables = {"node": node_variable(panel, page)}
        for expr, legend in panel.queries:
            query = parse(expr, legend)
            where = f"{panel.dashboard}: {panel.title!r}: {expr}"
            for selector in query.selectors:
                selected = page.select(selector, variables)
                assert selected, f"{where}: no series"
                needed = set(query.by) | set(query.legend)
                assert any(needed <= labels.keys() for labels in selected), (
                    f"{where}: no series with the labels {sorted(needed)}: {selected}")
                if {"rate", "increase"} & set(query.functions):
                    assert page.types[selector.metric] == "counter", where
                if "changes" in query.functions:
                    counted = changes(before, page, selector, variables)
                    assert min(counted[RAPL], counted[TWIN]) >= 1, (where, counted)
                checked += 1
    assert checked >= 20


def test_the_policy_label_is_the_policy_objects_name(
    live: tuple[SimCluster, AgentProcess, Scrape, Scrape],
) -> None:
    _, _, _, page = live
    policies = {labels["node"]: labels["policy"] for name, labels, value in page.samples
                if name == "joulie_policy_cap_watts" and value == value}
    # The NodePowerProfile's name (SimCluster names it after the node), the NodeTwin's.
    assert policies == {RAPL: RAPL, DVFS: DVFS, HOST: HOST, TWIN: twin_name(TWIN)}


def test_every_joulie_metric_has_joulies_labels_and_label_values(
    live: tuple[SimCluster, AgentProcess, Scrape, Scrape],
) -> None:
    _, _, _, page = live
    for metric, (kind, labels) in AGENT_METRICS.items():
        series = [lbl for name, lbl, value in page.samples if name == metric and value == value]
        assert series, f"{metric}: not exported"
        assert page.types[metric] == kind, metric
        assert {tuple(sorted(s)) for s in series} == {tuple(sorted(labels))}, metric
        for (name, label), pattern in AGENT_LABEL_VALUES.items():
            if name == metric:
                odd = {s[label] for s in series if not re.fullmatch(pattern, s[label])}
                assert not odd, f"{metric}{{{label}}}: {odd} is not how Joulie's agent fills it"
    modes = {(lbl["node"], lbl["mode"]) for name, lbl, value in page.samples
             if name == "joulie_backend_mode" and value == 1}
    assert modes == {(RAPL, "rapl"), (TWIN, "rapl"), (DVFS, "dvfs"), (HOST, "dvfs")}
