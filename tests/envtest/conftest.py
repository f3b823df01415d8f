"""Fixtures the envtest tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentpool.sim.envtest import EnvtestServer
from tests.envtest.accounts import RBAC_KINDS
from tests.support.chart import CHART_DIR, NAMESPACE, load_helm, parse_manifests


@pytest.fixture(scope="module")
def nodetwin_account(envtest_server: EnvtestServer) -> Iterator[tuple[str, str]]:
    """The chart's ServiceAccount with the RBAC it renders for ``joulie.api=nodetwin``."""
    helm = load_helm()
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = parse_manifests(chart.render(
            {"agent": {"mode": "pool"}, "joulie": {"api": "nodetwin"}},
            name="joulie", namespace=NAMESPACE,
        ))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    objects = [namespace, *(o for o in rendered if o["kind"] in RBAC_KINDS)]
    envtest_server.api().apply(objects)
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    yield NAMESPACE, account["metadata"]["name"]
    admin = envtest_server.api()
    for obj in reversed(objects[1:]):
        admin.delete(f"{obj['kind']}.{obj['apiVersion']}", obj["metadata"]["name"],
                     obj["metadata"].get("namespace"))
