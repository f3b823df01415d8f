"""What Joulie's own chart gives its agent, written down as fixtures of our own.

agentpool's image may be set as ``agent.image`` in Joulie's chart (joulie-k8s/Joulie,
``charts/joulie``): it then runs with no command (the image's entrypoint), the
environment Joulie's templates pass, as the ServiceAccount ``joulie-agent`` bound to
Joulie's agent ClusterRole, and nothing else (no Events, no Leases). These are that
role's rules and that environment at revisions b9a50b1 and c38b80d, for the envtest
and end-to-end tests that run agentpool so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

VALUES_DIR = Path(__file__).parents[1] / "deploy" / "joulie"
"""``values-<revision>.yaml``: every key of Joulie's chart values at that revision, with
values of our own (checked key by key against its ``values.yaml``)."""

SERVICE_MONITORS = {
    # selector.matchLabels and endpoints[].port of Joulie's agent ServiceMonitors
    # (examples/02-prometheus-grafana/servicemonitor.yaml,
    # examples/10-kubectl-joulie-demo/04-joulie-servicemonitors.yaml): the same at both
    # revisions.
    "examples/02": ({"app.kubernetes.io/name": "joulie-agent"}, "metrics"),
    "examples/10": ({"app.kubernetes.io/name": "joulie-agent"}, "metrics"),
}

POD_SELECTORS = {
    # Where Joulie's docs and chart select its agent pods, and the selector, as kubectl's
    # -l takes it (the snapshot of joulie-k8s/Joulie these fixtures were read from; its
    # chart is c38b80d's). The docs' commands are `kubectl -n joulie-system logs -l ...`
    # (examples/01: `get pod -l ... --field-selector spec.nodeName=...`); the Service is
    # joulie-agent-metrics, whose endpoints are the pods it selects.
    "website/content/en/docs/getting-started/01-quickstart.md":
        "app.kubernetes.io/name=joulie-agent",
    "examples/01-stress-ng-throttling/README.md": "app.kubernetes.io/name=joulie-agent",
    "examples/05-simulated-telemetry-control/README.md": "app.kubernetes.io/name=joulie-agent",
    "examples/06-simulator-kwok/README.md": "app.kubernetes.io/name=joulie-agent",
    "examples/07-simulator-gpu-powercaps/README.md": "app.kubernetes.io/name=joulie-agent",
    "charts/joulie/templates/services.yaml": "app.kubernetes.io/name=joulie-agent",
}


def selector_labels(selector: str) -> dict[str, str]:
    """An equality-based label selector (``k=v,k=v``, all these are) as the labels it needs."""
    pairs = [term.split("=", 1) for term in selector.split(",")]
    assert all(len(p) == 2 and p[0] and "!" not in p[0] for p in pairs), selector
    return {key.strip(): value.strip() for key, value in pairs}


SERVICE_ACCOUNT = "joulie-agent"
"""The ServiceAccount Joulie's chart runs its agent as (both modes)."""
STATEFULSET = "joulie-agent-pool"
"""Joulie's pool StatefulSet: its pods are ``joulie-agent-pool-<ordinal>``."""

AGENT_RULES: dict[str, list[dict[str, Any]]] = {
    # charts/joulie/templates/rbac.yaml, ClusterRole <fullname>-agent.
    "b9a50b1": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["joulie.io"], "resources": ["nodepowerprofiles"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["joulie.io"], "resources": ["telemetryprofiles"],
         "verbs": ["get", "list", "watch", "update", "patch"]},
        {"apiGroups": ["joulie.io"], "resources": ["telemetryprofiles/status"],
         "verbs": ["update", "patch"]},
    ],
    "c38b80d": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["joulie.io"], "resources": ["nodetwins"],
         "verbs": ["get", "list", "watch", "update", "patch"]},
        {"apiGroups": ["joulie.io"], "resources": ["nodetwins/status"],
         "verbs": ["update", "patch"]},
        {"apiGroups": ["joulie.io"], "resources": ["nodehardwares"],
         "verbs": ["get", "list", "watch", "create", "update", "patch"]},
        {"apiGroups": ["joulie.io"], "resources": ["nodehardwares/status"],
         "verbs": ["update", "patch"]},
    ],
}


def agent_rbac(namespace: str, revision: str, name: str = "joulie-agent") -> list[dict[str, Any]]:
    """The ServiceAccount, ClusterRole and ClusterRoleBinding Joulie's chart makes for its
    agent (``name``: the role's, ``<fullname>-agent`` there)."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name}, "rules": AGENT_RULES[revision]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                       "namespace": namespace}]},
    ]


def pool_env(replicas: int, agent_env: dict[str, str]) -> dict[str, str]:
    """The variables Joulie's pool StatefulSet sets itself (c38b80d, the same at b9a50b1
    but for ``agent.env``), before the ``agent.env`` it passes through; ``POD_NAME`` comes
    from the downward API. Nothing else: no JOULIE_API, EVENTS, LOG_FORMAT,
    PROMETHEUS_MULTIPROC_DIR or STATE_DIR."""
    return {
        "AGENT_MODE": "pool",
        "POOL_NODE_SELECTOR": "joulie.io/managed=true",
        "POOL_SHARDS": str(replicas),
        **agent_env,
    }


AGENT_ENV: dict[str, str] = {
    # agent.env as Joulie's chart defaults it, plus what its experiments pass with --set
    # (experiments/*/scripts/03_install_components.sh at c38b80d); endpoints are the test's.
    "RECONCILE_INTERVAL": "20s",
    "METRICS_ADDR": ":8080",
    "SIMULATE_ONLY": "false",
    "KUBE_CLIENT_QPS": "200",
    "KUBE_CLIENT_BURST": "400",
}
