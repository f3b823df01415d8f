"""Fixtures of the end-to-end suite: the cluster from the environment, or a skip saying how.

Session-wide: the cluster's clients, the namespace, the node helper, the power
simulator. Each test module installs its own release of the chart and removes it,
with the fake nodes and custom resources it made.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .cluster import HOW_TO_RUN, NAMESPACE, Cluster, Settings, wait_until
from .timing import report_lines
from .workloads import NodeHelper, Simulator


@pytest.fixture(scope="session")
def e2e_settings() -> Settings:
    settings = Settings.from_environment()
    if settings is None:
        pytest.skip(HOW_TO_RUN)
    return settings


@pytest.fixture(scope="session")
def cluster(e2e_settings: Settings) -> Iterator[Cluster]:
    """The cluster, with this suite's namespace; everything made here is removed after."""
    cluster = Cluster(e2e_settings)
    crds_before = cluster.crds_present()
    namespace = client.V1Namespace(metadata=client.V1ObjectMeta(
        name=NAMESPACE,
        # Pod Security admission (1.23+) would refuse the privileged DaemonSet and helper.
        labels={"pod-security.kubernetes.io/enforce": "privileged"},
    ))
    cluster.core.create_namespace(namespace)
    try:
        # The controller-manager makes the namespace's `default` ServiceAccount a moment
        # after the namespace, and until then the ServiceAccount admission plugin refuses
        # every pod in it, even one that mounts no token (seen in CI: the node helper's
        # pod refused with "serviceaccount \"default\" not found").
        wait_until("the namespace's default ServiceAccount", lambda: _has_default_sa(cluster),
                   120)
        yield cluster
    finally:
        try:
            cluster.uninstall()
        finally:
            cluster.delete_fake_nodes()
            cluster.delete_crds(cluster.crds_present() - crds_before)
            cluster.core.delete_namespace(NAMESPACE)
            wait_until("the suite's namespace to be gone", cluster.namespace_gone, 180)
            cluster.close()


def _has_default_sa(cluster: Cluster) -> bool:
    try:
        cluster.core.read_namespaced_service_account("default", NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


@pytest.fixture(scope="session")
def helper(cluster: Cluster) -> Iterator[NodeHelper]:
    node_helper = NodeHelper(cluster, cluster.real_node()).start()
    try:
        yield node_helper
    finally:
        node_helper.stop()


@pytest.fixture(scope="session")
def simulator(cluster: Cluster) -> Simulator:
    return Simulator(cluster).start()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = report_lines()
    if lines:
        terminalreporter.section("agent pods: time to ready")
        for line in lines:
            terminalreporter.write_line(line)
