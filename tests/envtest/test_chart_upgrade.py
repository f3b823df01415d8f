"""``helm upgrade`` from chart 0.1.0 on the real API server (issue 47, item 1).

Chart 0.2.0 labels the agent pods with Joulie's ``app.kubernetes.io/name: joulie-agent``,
which is in their workload's selector, and a DaemonSet's or StatefulSet's selector cannot
change. An upgrade from a 0.1.0 release must be refused before anything is applied,
saying how to replace the workload; once it is replaced the upgrade goes through, and a
rollback to 0.1.0 takes the same step. The previous chart is the packaged 0.1.0
(``PREVIOUS_CHART``), installed and upgraded by Helm's SDK as ``helm`` does it, without
its own CRDs: the server already has this chart's, as after ``kubectl apply -f
charts/joulie/crds/`` (docs/deploy.md), and Helm 4 would server-side apply 0.1.0's
descriptions over them, in conflict with the manager that applied them.

envtest runs no controllers: no pod starts and a workload deleted in the background goes
at once (the pods, the kubelet's part and the documented foreground deletion are
``tests/e2e/test_upgrade.py``'s, on a real cluster).
"""

from __future__ import annotations

import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentpool.sim.envtest import EnvtestServer
from tests.support.chart import BOTH_MODES, CHART_DIR, PREVIOUS_CHART, load_helm

NAMESPACE = "agentpool-upgrade"
RELEASE = "joulie"
OLD = {"app.kubernetes.io/name": "joulie", "app.kubernetes.io/instance": RELEASE,
       "app.kubernetes.io/component": "agent"}
NEW = {**OLD, "app.kubernetes.io/name": "joulie-agent"}


def workload_of(mode: str) -> tuple[str, str]:
    """(kind as kubectl names it, name) of the release's agent workload."""
    if mode == "pool":
        return "statefulset", f"{RELEASE}-agent-pool"
    return "daemonset", f"{RELEASE}-agent"


def plural(kind: str) -> str:
    return f"{kind}s"  # the resource, as the API server serves it (1.20 gives no singular)


@pytest.fixture
def previous_chart(tmp_path: Path) -> Path:
    """0.1.0 unpacked, its crds/ left out (``helm install --skip-crds``)."""
    with tarfile.open(PREVIOUS_CHART) as archive:
        archive.extractall(tmp_path / "previous", filter="data")
    chart = tmp_path / "previous" / "joulie"
    shutil.rmtree(chart / "crds")
    return chart


@pytest.fixture
def helm(envtest_server: EnvtestServer, tmp_path: Path) -> Iterator[Any]:
    """Helm's SDK on the real API server, as cluster-admin; the release removed after."""
    sdk = load_helm()
    kubeconfig = envtest_server.kubeconfig(tmp_path / "kubeconfig")
    with sdk.Config(kubeconfig_path=str(kubeconfig), namespace=NAMESPACE) as config:
        try:
            yield config
        finally:
            config.uninstall(RELEASE, ignore_not_found=True)


def revisions(helm: Any) -> list[tuple[int, str, str]]:
    """(revision, chart version, status) of every revision of the release."""
    return [(r["revision"], r["chart_version"], r["status"]) for r in helm.history(RELEASE)]


@BOTH_MODES
def test_an_upgrade_from_0_1_0_is_refused_with_the_way_out_then_goes_through(
    envtest_server: EnvtestServer, helm: Any, previous_chart: Path, mode: str
) -> None:
    api = envtest_server.api()
    kind, name = workload_of(mode)
    values = {"agent": {"mode": mode}}
    helm.install(str(previous_chart), RELEASE, values, namespace=NAMESPACE,
                 create_namespace=True)
    before = api.get(plural(kind), name, NAMESPACE)
    assert before["spec"]["selector"] == {"matchLabels": OLD}
    metrics = f"{RELEASE}-agent-metrics"
    service_before = api.get("services", metrics, NAMESPACE)

    with pytest.raises(load_helm().HelmError) as refused:
        helm.upgrade(str(CHART_DIR), RELEASE, values, namespace=NAMESPACE)
    message = str(refused.value)
    assert f"kubectl -n {NAMESPACE} delete {kind} {name} --cascade=foreground" in message
    assert ",".join(f"{k}={v}" for k, v in sorted(OLD.items())) in message
    assert ",".join(f"{k}={v}" for k, v in sorted(NEW.items())) in message
    # Refused before anything was applied: the workload, its Service and the release are
    # as they were.
    after = api.get(plural(kind), name, NAMESPACE)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    service_after = api.get("services", metrics, NAMESPACE)
    assert service_after["metadata"]["resourceVersion"] == (
        service_before["metadata"]["resourceVersion"])
    assert revisions(helm) == [(1, "0.1.0", "deployed")]

    # What the message says (kubectl's foreground deletion waits for the pods; there are
    # none here), then the same upgrade again.
    api.delete(plural(kind), name, NAMESPACE)
    helm.upgrade(str(CHART_DIR), RELEASE, values, namespace=NAMESPACE)
    upgraded = api.get(plural(kind), name, NAMESPACE)
    assert upgraded["spec"]["selector"] == {"matchLabels": NEW}
    assert NEW.items() <= upgraded["spec"]["template"]["metadata"]["labels"].items()
    assert api.get("services", metrics, NAMESPACE)["spec"]["selector"] == NEW
    assert revisions(helm)[-1] == (2, "0.2.0", "deployed")

    # Back to 0.1.0 the selector changes again: refused by the API server this time (a
    # rollback applies the old revision's stored manifests; 0.1.0 has no check of its own).
    with pytest.raises(load_helm().HelmError, match=r"immutable|Forbidden"):
        helm.rollback(RELEASE, version=1)
    assert api.get(plural(kind), name, NAMESPACE)["metadata"]["uid"] == upgraded["metadata"]["uid"]
    api.delete(plural(kind), name, NAMESPACE)
    helm.rollback(RELEASE, version=1)
    assert api.get(plural(kind), name, NAMESPACE)["spec"]["selector"] == {"matchLabels": OLD}


def test_an_upgrade_that_keeps_the_selector_is_not_checked_again(
    envtest_server: EnvtestServer, helm: Any
) -> None:
    # 0.2.0 to 0.2.0 with changed values: the lookup finds the same selector and lets the
    # upgrade through, in place.
    api = envtest_server.api()
    kind, name = workload_of("daemonset")
    helm.install(str(CHART_DIR), RELEASE, {}, namespace=NAMESPACE, create_namespace=True)
    uid = api.get(plural(kind), name, NAMESPACE)["metadata"]["uid"]
    helm.upgrade(str(CHART_DIR), RELEASE, {"agent": {"podLabels": {"team": "a"}}},
                 namespace=NAMESPACE)
    upgraded = api.get(plural(kind), name, NAMESPACE)
    assert upgraded["metadata"]["uid"] == uid
    assert upgraded["spec"]["template"]["metadata"]["labels"]["team"] == "a"
