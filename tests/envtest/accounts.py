"""The chart's ServiceAccount and RBAC on the real API server, and clients acting as it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from agentpool.sim.clusterapi import ClusterApi
from agentpool.sim.envtest import EnvtestServer
from tests.support.chart import CHART_DIR, NAMESPACE, load_helm, parse_manifests

AUDITED_AGENT = "audited-agent"
"""A user of the audited server (``audited`` in conftest.py) in ``system:masters``: its
requests are the agent's alone in the audit log."""
RBAC_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
              "RoleBinding")


def chart_rbac(mode: str, **values: Any) -> list[dict[str, Any]]:
    """The namespace and the RBAC objects of the chart rendered in ``mode``, with
    ``values`` (``agent=`` adds to the agent's, the others are top-level keys)."""
    values = {**values, "agent": {"mode": mode, **values.get("agent", {})}}
    helm = load_helm()
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = parse_manifests(chart.render(values, name="joulie", namespace=NAMESPACE))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    return [namespace, *(o for o in rendered if o["kind"] in RBAC_KINDS)]


@contextlib.contextmanager
def chart_account(server: EnvtestServer, mode: str, **values: Any) -> Iterator[tuple[str, str]]:
    """(namespace, name) of the chart's ServiceAccount, its RBAC applied for that mode
    (the chart's default values, and ``values`` as :func:`chart_rbac` takes them) while in
    the block."""
    objects = chart_rbac(mode, **values)
    server.api().apply(objects)
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    yield NAMESPACE, account["metadata"]["name"]
    admin = server.api()
    for obj in reversed(objects[1:]):
        kind = f"{obj['kind']}.{obj['apiVersion']}"
        admin.delete(kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))


def as_agent(server: EnvtestServer, service_account: tuple[str, str], tmp: Any) -> ClusterApi:
    """The direct API authenticated as the agent's ServiceAccount."""
    config = server.service_account_kubeconfig(tmp / "sa-kubeconfig", *service_account)
    token = config.read_text().split('"token": "')[1].split('"')[0]
    return ClusterApi(server.url, token, server.ssl_context())
