"""The agent panels of Joulie's Grafana dashboards, written down as a fixture of our own.

Every panel of Joulie's dashboards at revisions b9a50b1 and c38b80d that reads the
agent's metrics (``joulie_backend_mode``, ``joulie_policy_cap_watts``, ``joulie_rapl_*``,
``joulie_dvfs_*``, ``joulie_reconcile_errors_total``): its queries as PromQL and their
legends, with the variable ``$node`` they filter on. Panels of the operator, scheduler
extender, simulator and kube-state-metrics are left out: agentpool does not export
those. A small parser reads the subset of PromQL these queries use (selectors with
label matchers, aggregations with ``by``, range functions), and :data:`AGENT_METRICS` is
what Joulie's agent exports (``cmd/agent/main.go``), to compare label sets with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REVISIONS = ("b9a50b1", "c38b80d")
BOTH = REVISIONS
ONLY_NEW = ("c38b80d",)


@dataclass(frozen=True)
class Panel:
    dashboard: str
    """Its file in Joulie's repository."""
    revisions: tuple[str, ...]
    title: str
    queries: tuple[tuple[str, str], ...]
    """(expr, legendFormat) of each target."""


DVFS = "examples/02-prometheus-grafana/dashboard-joulie-dvfs.json"
INTENTS = "examples/03-workload-intent-classes/dashboard-workload-intents.json"
POLICY = "examples/04-operator-configuration/dashboard-operator-policy.json"
OVERVIEW = "charts/joulie/dashboards/joulie-overview.json"

NODE_VARIABLE = {
    # How each dashboard fills $node. Two list the operator's nodes (not agent metrics: the
    # test puts the managed nodes there, as the operator would); one lists the agent's.
    DVFS: None,
    INTENTS: "label_values(joulie_operator_node_state, node)",
    POLICY: "label_values(joulie_policy_cap_watts, node)",
    OVERVIEW: "label_values(joulie_operator_node_state, node)",
}

PANELS = (
    Panel(DVFS, BOTH, "Backend Mode", (
        ('joulie_backend_mode{mode="rapl"}', "rapl"),
        ('joulie_backend_mode{mode="dvfs"}', "dvfs"))),
    Panel(DVFS, BOTH, "Policy Cap (W)", (("joulie_policy_cap_watts", "{{policy}}"),)),
    Panel(DVFS, BOTH, "Observed vs EMA Power", (
        ("joulie_rapl_package_total_power_watts", "rapl_pkg_total"),
        ("joulie_dvfs_observed_power_watts", "dvfs_observed"),
        ("joulie_dvfs_ema_power_watts", "dvfs_ema"))),
    Panel(DVFS, BOTH, "DVFS Throttle %", (("joulie_dvfs_throttle_pct", "throttle_pct"),)),
    Panel(DVFS, BOTH, "Average CPU Max Freq (MHz)", (
        ("avg(joulie_dvfs_cpu_max_freq_khz) / 1000", "avg_max_mhz"),)),
    Panel(DVFS, BOTH, "Average CPU Current Freq (MHz)", (
        ("avg(joulie_dvfs_cpu_cur_freq_khz) / 1000", "avg_cur_mhz"),)),
    Panel(DVFS, BOTH, "DVFS Action Rates", (
        ('rate(joulie_dvfs_actions_total{action="throttle_up"}[5m])', "throttle_up/s"),
        ('rate(joulie_dvfs_actions_total{action="throttle_down"}[5m])', "throttle_down/s"))),
    Panel(INTENTS, BOTH, "Node Cap (W)", (
        ('joulie_policy_cap_watts{node=~"$node"}', "{{node}}"),)),
    Panel(POLICY, BOTH, "Assigned Cap by Node (W)", (
        ('joulie_policy_cap_watts{node=~"$node"}', "{{node}}"),)),
    Panel(POLICY, BOTH, "Policy Reassignment Events (5m window)", (
        ('changes(joulie_policy_cap_watts{node=~"$node"}[5m])', "{{node}}"),)),
    Panel(POLICY, BOTH, "Backend Mode by Node", (
        ('joulie_backend_mode{mode="none",node=~"$node"}', "{{node}} none"),
        ('joulie_backend_mode{mode="rapl",node=~"$node"}', "{{node}} rapl"),
        ('joulie_backend_mode{mode="dvfs",node=~"$node"}', "{{node}} dvfs"))),
    Panel(POLICY, BOTH, "DVFS Throttle % by Node", (
        ('joulie_dvfs_throttle_pct{node=~"$node"}', "{{node}}"),)),
    Panel(POLICY, BOTH, "Average CPU Max Freq by Node (MHz)", (
        ('avg by (node) (joulie_dvfs_cpu_max_freq_khz{node=~"$node"}) / 1000', "{{node}}"),)),
    Panel(POLICY, BOTH, "Observed / EMA Power by Node", (
        ('joulie_dvfs_observed_power_watts{node=~"$node"}', "{{node}} observed"),
        ('joulie_dvfs_ema_power_watts{node=~"$node"}', "{{node}} ema"))),
    Panel(OVERVIEW, ONLY_NEW, "Backend Mode", (
        ('joulie_backend_mode{mode="rapl",node=~"$node"}', "{{node}} rapl"),
        ('joulie_backend_mode{mode="dvfs",node=~"$node"}', "{{node}} dvfs"),
        ('joulie_backend_mode{mode="none",node=~"$node"}', "{{node}} none"))),
    Panel(OVERVIEW, ONLY_NEW, "RAPL Package Power (per node)", (
        ('joulie_rapl_package_total_power_watts{node=~"$node"}', "{{node}}"),)),
    Panel(OVERVIEW, ONLY_NEW, "Policy Cap (per node)", (
        ('joulie_policy_cap_watts{node=~"$node"}', "{{node}} ({{policy}})"),)),
    Panel(OVERVIEW, ONLY_NEW, "Observed vs EMA Power", (
        ('joulie_dvfs_observed_power_watts{node=~"$node"}', "{{node}} observed"),
        ('joulie_dvfs_ema_power_watts{node=~"$node"}', "{{node}} EMA"))),
    Panel(OVERVIEW, ONLY_NEW, "DVFS Throttle %", (
        ('joulie_dvfs_throttle_pct{node=~"$node"}', "{{node}}"),)),
    Panel(OVERVIEW, ONLY_NEW, "DVFS Action Rates (5m)", (
        ('rate(joulie_dvfs_actions_total{action="throttle_up",node=~"$node"}[5m])',
         "{{node}} throttle_up/s"),
        ('rate(joulie_dvfs_actions_total{action="throttle_down",node=~"$node"}[5m])',
         "{{node}} throttle_down/s"))),
    Panel(OVERVIEW, ONLY_NEW, "Reconcile Errors (rate/5m)", (
        ('sum by (node) (rate(joulie_reconcile_errors_total{node=~"$node"}[5m]))', "{{node}}"),)),
    Panel(OVERVIEW, ONLY_NEW, "Avg CPU Max Freq (MHz)", (
        ('avg by (node) (joulie_dvfs_cpu_max_freq_khz{node=~"$node"}) / 1000', "{{node}}"),)),
)

AGENT_METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    # What Joulie's agent registers (cmd/agent/main.go, both revisions): type and labels.
    "joulie_backend_mode": ("gauge", ("node", "mode")),
    "joulie_policy_cap_watts": ("gauge", ("node", "policy")),
    "joulie_rapl_energy_uj": ("gauge", ("node", "zone")),
    "joulie_rapl_estimated_power_watts": ("gauge", ("node", "zone")),
    "joulie_rapl_package_total_power_watts": ("gauge", ("node",)),
    "joulie_dvfs_observed_power_watts": ("gauge", ("node",)),
    "joulie_dvfs_ema_power_watts": ("gauge", ("node",)),
    "joulie_dvfs_throttle_pct": ("gauge", ("node",)),
    "joulie_dvfs_above_trip_count": ("gauge", ("node",)),
    "joulie_dvfs_below_trip_count": ("gauge", ("node",)),
    "joulie_dvfs_cpu_cur_freq_khz": ("gauge", ("node", "cpu")),
    "joulie_dvfs_cpu_max_freq_khz": ("gauge", ("node", "cpu")),
    "joulie_dvfs_actions_total": ("counter", ("node", "action")),
    "joulie_reconcile_errors_total": ("counter", ("node",)),
}
AGENT_LABEL_VALUES: dict[tuple[str, str], str] = {
    # How Joulie's agent fills a label (regular expressions over its values).
    ("joulie_backend_mode", "mode"): r"none|rapl|dvfs",
    ("joulie_dvfs_actions_total", "action"): r"throttle_up|throttle_down",
    ("joulie_dvfs_cpu_cur_freq_khz", "cpu"): r"[0-9]+",  # strconv.Itoa of the CPU's index
    ("joulie_dvfs_cpu_max_freq_khz", "cpu"): r"[0-9]+",
    ("joulie_rapl_energy_uj", "zone"): r"intel-rapl:[0-9]+",  # the powercap directory
    ("joulie_rapl_estimated_power_watts", "zone"): r"intel-rapl:[0-9]+",
}


# --- the PromQL these queries use ------------------------------------------------------

RANGE_FUNCTIONS = {"rate", "increase", "changes"}
"""Functions over a range vector: ``rate`` and ``increase`` are meant for counters."""
AGGREGATIONS = {"sum", "avg", "max", "min", "count"}
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*,?')
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?")
_CALL = re.compile(r"\b([a-z_]+)\s*(?:by\s*\([^)]*\)\s*)?\(")
_BY = re.compile(r"\bby\s*\(([^)]*)\)")
_LEGEND = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class Selector:
    metric: str
    matchers: tuple[tuple[str, str, str], ...]
    """(label, operator, value) with ``=``, ``!=``, ``=~`` or ``!~``."""


@dataclass(frozen=True)
class Query:
    selectors: tuple[Selector, ...]
    functions: tuple[str, ...]
    by: tuple[str, ...]
    """Labels the query groups by (kept by its aggregations)."""
    legend: tuple[str, ...]
    """Labels its legend shows (``{{node}}``)."""


def parse(expr: str, legend: str = "") -> Query:
    """The selectors, functions and grouping labels of one query of the subset above."""
    functions = tuple(_CALL.findall(expr))
    by = tuple(label.strip() for group in _BY.findall(expr) for label in group.split(",")
               if label.strip())
    bare = _BY.sub(" ", expr)
    bare = re.sub(r"\[[^\]]*\]", " ", bare)  # range durations
    bare = re.sub(r"\b[a-z_]+\s*\(", " (", bare)  # function and aggregation names
    selectors = []
    for metric, braces in _SELECTOR.findall(bare):
        if metric in ("by", "bool", "on", "or", "and", "unless"):
            continue
        matchers: list[tuple[str, str, str]] = []
        body = (braces or "{}")[1:-1]
        position = 0
        while position < len(body.strip()):
            found = _MATCHER.match(body, position)
            if found is None:
                raise ValueError(f"cannot read the matchers of {expr!r} at {body[position:]!r}")
            matchers.append((found[1], found[2], found[3]))
            position = found.end()
        selectors.append(Selector(metric, tuple(matchers)))
    return Query(tuple(selectors), functions, by, tuple(_LEGEND.findall(legend)))
