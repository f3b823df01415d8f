"""A Joulie user's values, monitoring and docs against agentpool's chart (issue 41, sections
1-2; issue 47, item 1).

Fixtures of our own state what Joulie's chart takes (``joulie/values-<revision>.yaml``:
every key of its values at revisions b9a50b1 and c38b80d; :data:`JOULIE_SET`: the
``--set`` expressions its experiments install with), how its ServiceMonitors find
the agent (:data:`SERVICE_MONITORS`) and how its docs and its agent Service find the
agent pods (:data:`POD_SELECTORS`). Rendered by the real Helm engine, loaded
as Helm loads a ``-f`` file (its YAML parser, its number types).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.chart import (
    BOTH_MODES,
    CHART_DIR,
    NAMESPACE,
    RELEASE,
    Manifest,
    Render,
    agent_workload,
    container,
    env_of,
    find,
    one,
    parse_manifests,
)
from tests.support.joulie_chart import (
    POD_SELECTORS,
    SERVICE_MONITORS,
    VALUES_DIR,
    selector_labels,
)

REVISIONS = ("b9a50b1", "c38b80d")
IGNORED = ("operator", "schedulerExtender", "grafanaDashboard")
"""Top-level keys of Joulie's chart for components this chart does not deploy."""

JOULIE_SET = [
    # What Joulie's experiments (experiments/*/scripts/03_install_components.sh at
    # c38b80d) pass to `helm upgrade --install`, with values of our own.
    "agent.image.repository=registry.example.com/energy/agentpool",
    "agent.image.tag=20250101",
    "agent.image.pullPolicy=IfNotPresent",
    "agent.env.RECONCILE_INTERVAL=5s",
    "agent.env.KUBE_CLIENT_QPS=200",
    "agent.env.KUBE_CLIENT_BURST=400",
    "agent.env.TELEMETRY_CPU_SOURCE=http",
    "agent.env.TELEMETRY_CPU_HTTP_ENDPOINT=http://sim.energy.svc/telemetry/{node}",
    "agent.env.TELEMETRY_CPU_CONTROL=http",
    "agent.env.TELEMETRY_CPU_CONTROL_MODE=rapl",
    "agent.env.JOULIE_CONTROL_TYPE=http",
    "operator.image.tag=20250101",
    "operator.env.KUBE_CLIENT_QPS=200",
    "operator.env.STATIC_HP_FRAC=0.25",
    "schedulerExtender.enabled=true",
    "schedulerExtender.clusterIP=10.0.0.76",
]
JOULIE_SET_STRING = [
    "agent.pool.podNodeSelector.joulie\\.io/infra=true",
    "operator.nodeSelector.joulie\\.io/infra=true",
]


def joulie_values(helm: Any, revision: str, **agent: Any) -> dict[str, Any]:
    """The fixture as ``helm -f`` reads it, with ``agent`` keys set over it."""
    text = (VALUES_DIR / f"values-{revision}.yaml").read_text()
    values: dict[str, Any] = helm.values_from_yaml(text)
    values["agent"].update(agent)
    return values


def set_values(helm: Any, *expressions: str, string: tuple[str, ...] = ()) -> dict[str, Any]:
    """What ``--set`` and ``--set-string`` make of the expressions, merged as Helm merges."""
    merged: dict[str, Any] = {}
    parsed = [helm.parse_set_string(e) for e in expressions]
    parsed += [helm.parse_set_string_values(e) for e in string]
    for part in parsed:
        deep_merge(merged, part)
    return merged


def deep_merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            deep_merge(into[key], value)
        else:
            into[key] = value


def notes(chart: Any, values: dict[str, Any]) -> str:
    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    (path,) = [p for p in rendered if p.endswith("NOTES.txt")]
    text: str = rendered[path]
    return text


def pod_spec(workload: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


# --- section 1: a Joulie values file installs ---------------------------------------


@pytest.mark.parametrize("revision", REVISIONS)
@BOTH_MODES
def test_a_joulie_values_file_installs_and_lints(
    helm: Any, render: Render, revision: str, mode: str
) -> None:
    values = joulie_values(helm, revision, mode=mode)
    objects = render(values)
    assert agent_workload(objects)
    report = helm.lint(CHART_DIR, values, strict=True, namespace=NAMESPACE,
                       kube_version="v1.30.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("revision", REVISIONS)
@BOTH_MODES
def test_joulies_agent_keys_mean_what_they_mean_in_joulies_chart(
    helm: Any, render: Render, revision: str, mode: str
) -> None:
    values = joulie_values(helm, revision, mode=mode)
    agent = values["agent"]
    objects = render(values)
    workload = agent_workload(objects)
    image = agent["image"]
    assert container(workload)["image"] == f"{image['repository']}:{image['tag']}"
    assert container(workload)["imagePullPolicy"] == image["pullPolicy"]
    env = env_of(workload)
    assert {k: env[k] for k in agent["env"]} == agent["env"]
    pod = pod_spec(workload)
    if mode == "daemonset":
        assert pod.get("nodeSelector") == (agent.get("daemonset") or {}).get("nodeSelector")
        assert pod["hostNetwork"] is agent["hostNetwork"]
        assert container(workload)["securityContext"]["privileged"] is agent["privileged"]
    else:
        assert pod.get("nodeSelector") == (agent["pool"].get("podNodeSelector") or None)
        assert workload["spec"]["replicas"] == agent["pool"]["replicas"]
        assert env["POOL_SHARDS"] == str(agent["pool"]["shards"])
        assert env["POOL_NODE_SELECTOR"] == agent["pool"]["nodeSelector"]
    service = one(objects, "Service", f"{RELEASE}-agent-metrics")
    assert service["spec"]["ports"][0]["port"] == agent["service"]["port"]
    assert agent["service"]["annotations"].items() <= service["metadata"]["annotations"].items()


def test_the_set_expressions_of_joulies_experiments_install(helm: Any, render: Render) -> None:
    values = set_values(helm, "agent.mode=pool", *JOULIE_SET, string=tuple(JOULIE_SET_STRING))
    assert values["agent"]["env"]["KUBE_CLIENT_QPS"] == 200  # a number, as --set gives it
    sts = one(render(values), "StatefulSet")
    env = env_of(sts)
    assert (env["KUBE_CLIENT_QPS"], env["KUBE_CLIENT_BURST"]) == ("200", "400")
    assert env["TELEMETRY_CPU_HTTP_ENDPOINT"] == "http://sim.energy.svc/telemetry/{node}"
    assert container(sts)["image"] == "registry.example.com/energy/agentpool:20250101"
    assert pod_spec(sts)["nodeSelector"] == {"joulie.io/infra": "true"}


@pytest.mark.parametrize(
    ("value", "written"),
    [(200, "200"), (1500000, "1500000"), (0.3, "0.3"), (True, "true"), ("20s", "20s")],
)
def test_env_numbers_are_written_as_the_agent_reads_them(
    helm: Any, render: Render, value: Any, written: str
) -> None:
    # From a values file a number is a float to Helm (1500000 would print as 1.5e+06).
    from_file = helm.values_from_yaml(f"agent:\n  env:\n    X_VALUE: {value!s}\n".replace(
        "True", "true"))
    assert env_of(one(render(from_file), "DaemonSet"))["X_VALUE"] == written


def test_agent_image_wins_over_image_field_by_field(render: Render) -> None:
    values = {"image": {"repository": "ours/agentpool", "tag": "1.0", "pullPolicy": "Never"},
              "agent": {"image": {"tag": "2.0"}}}
    workload = one(render(values), "DaemonSet")
    assert container(workload)["image"] == "ours/agentpool:2.0"
    assert container(workload)["imagePullPolicy"] == "Never"
    assert workload["metadata"]["labels"]["app.kubernetes.io/version"] == "2.0"


@BOTH_MODES
def test_the_modes_node_selector_merges_over_agent_node_selector(
    render: Render, mode: str
) -> None:
    values = {"agent": {"mode": mode, "nodeSelector": {"a": "1", "b": "1"},
                        "daemonset": {"nodeSelector": {"b": "ds"}},
                        "pool": {"podNodeSelector": {"b": "pool"}}}}
    pod = pod_spec(agent_workload(render(values)))
    assert pod["nodeSelector"] == {"a": "1", "b": "ds" if mode == "daemonset" else "pool"}


@pytest.mark.parametrize("revision", REVISIONS)
def test_notes_say_in_one_line_which_values_were_ignored(
    chart: Any, helm: Any, revision: str
) -> None:
    values = joulie_values(helm, revision)
    lines = [line for line in notes(chart, values).splitlines() if "Ignored" in line]
    given = [key for key in IGNORED if key in values]
    assert len(lines) == 1
    assert re.findall(r"\b(operator|schedulerExtender|grafanaDashboard)\b", lines[0]) == given
    assert not [line for line in notes(chart, {}).splitlines() if "Ignored" in line]


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"agent": {"imag": {"tag": "x"}}}, "imag"),
        ({"agent": {"image": {"repo": "x"}}}, "repo"),
        ({"agent": {"image": {"pullPolicy": "Sometimes"}}}, "/agent/image/pullPolicy"),
        ({"agent": {"daemonset": {"nodeSelecter": {}}}}, "nodeSelecter"),
        ({"agent": {"pool": {"podNodeSelecter": {}}}}, "podNodeSelecter"),
        ({"agent": {"service": {"annotation": {}}}}, "annotation"),
        ({"hardwareCatalog": {"enable": True}}, "enable"),
        ({"hardwareCatalog": {"mountPath": "etc"}}, "/hardwareCatalog/mountPath"),
        ({"operater": {}}, "operater"),
        ({"agent": {"env": {"X": ["a"]}}}, "/agent/env/X"),
        ({"hardwareCatalog": {"enabled": True}, "agent": {"env": {"HARDWARE_CATALOG_PATH": "/x"}}},
         "HARDWARE_CATALOG_PATH"),
    ],
)
def test_typos_in_agentpools_own_keys_still_fail(
    chart: Any, helm: Any, values: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(complaint)):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


def test_joulies_other_components_render_nothing(render: Render, helm: Any) -> None:
    # Accepted, not acted on: the same objects as without them.
    values = joulie_values(helm, "c38b80d")
    without = {k: v for k, v in values.items() if k not in IGNORED}
    names = [(o["kind"], o["metadata"]["name"]) for o in render(values)]
    assert names == [(o["kind"], o["metadata"]["name"]) for o in render(without)]


@BOTH_MODES
def test_the_hardware_catalog_is_mounted_and_passed_as_joulies_chart_does(
    render: Render, mode: str
) -> None:
    catalog = {"enabled": True, "configMapName": "hw", "key": "hardware.yaml",
               "mountPath": "/etc/joulie-catalog"}
    workload = agent_workload(render({"agent": {"mode": mode}, "hardwareCatalog": catalog}))
    assert env_of(workload)["HARDWARE_CATALOG_PATH"] == "/etc/joulie-catalog/hardware.yaml"
    volumes = {v["name"]: v for v in pod_spec(workload)["volumes"]}
    mounts = {m["mountPath"]: m for m in container(workload)["volumeMounts"]}
    mount = mounts["/etc/joulie-catalog"]
    assert mount["readOnly"] is True
    assert "subPath" not in mount  # a ConfigMap update reaches the pod
    assert volumes[mount["name"]] == {"name": mount["name"], "configMap": {"name": "hw"}}

    workload = agent_workload(render({"agent": {"mode": mode}}))
    assert "HARDWARE_CATALOG_PATH" not in env_of(workload)
    assert not [v for v in pod_spec(workload)["volumes"] if "configMap" in v]


# --- section 2: Joulie's ServiceMonitors find the agent --------------------------------


def selected(objects: list[Manifest], match_labels: dict[str, str]) -> list[Manifest]:
    """The Services a ServiceMonitor with these matchLabels selects (one namespace)."""
    return [s for s in find(objects, "Service")
            if match_labels.items() <= (s["metadata"].get("labels") or {}).items()]


@pytest.mark.parametrize("monitor", SERVICE_MONITORS)
@BOTH_MODES
def test_joulies_service_monitors_find_the_agent_pods_once(
    render: Render, monitor: str, mode: str
) -> None:
    match_labels, port = SERVICE_MONITORS[monitor]
    objects = render({"agent": {"mode": mode}})
    (service,) = selected(objects, match_labels)  # not the pool's headless Service too
    assert service["metadata"]["name"] == f"{RELEASE}-agent-metrics"
    assert [p["name"] for p in service["spec"]["ports"]] == [port]
    assert service["spec"]["ports"][0]["targetPort"] == container(
        agent_workload(objects))["ports"][0]["name"]
    pod_labels = agent_workload(objects)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


@BOTH_MODES
def test_agentpools_service_monitor_selects_the_same_service(render: Render, mode: str) -> None:
    objects = render({"agent": {"mode": mode}, "serviceMonitor": {"enabled": True}})
    monitor = one(objects, "ServiceMonitor")
    (service,) = selected(objects, monitor["spec"]["selector"]["matchLabels"])
    assert service["metadata"]["name"] == f"{RELEASE}-agent-metrics"
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    # A second release in the namespace keeps its own: the selector names the release.
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == RELEASE


def test_the_service_annotations_of_a_joulie_values_file_are_not_doubled(
    chart: Any, helm: Any
) -> None:
    values = joulie_values(helm, "b9a50b1")
    values["agent"]["service"]["annotations"]["prometheus.io/path"] = "/other"
    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    text = rendered["joulie/templates/service.yaml"]
    # A key twice in a mapping is refused when the manifest is applied.
    assert text.count("prometheus.io/path") == 1, text
    service = one(parse_manifests({"service.yaml": text}), "Service")
    assert service["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": "8080",
        "prometheus.io/path": "/other",  # the user's value wins
    }


# --- issue 47, item 1: Joulie's docs and agent Service find the agent pods -------------


@pytest.mark.parametrize("where", POD_SELECTORS)
@pytest.mark.parametrize("values", ["chart defaults", "Joulie's values file", "nameOverride"])
@BOTH_MODES
def test_joulies_pod_selectors_find_the_agent_pods(
    helm: Any, render: Render, where: str, values: str, mode: str
) -> None:
    given = {
        "chart defaults": {"agent": {"mode": mode}},
        "Joulie's values file": joulie_values(helm, "c38b80d", mode=mode),
        "nameOverride": {"nameOverride": "power", "agent": {"mode": mode}},
    }[values]
    objects = render(given)
    wanted = selector_labels(POD_SELECTORS[where])
    # The agent workload makes every pod of the release; each one is found.
    pods = [w["spec"]["template"]["metadata"]["labels"]
            for w in find(objects, "DaemonSet") + find(objects, "StatefulSet")]
    assert len(pods) == 1
    assert wanted.items() <= pods[0].items(), (where, pods[0])
