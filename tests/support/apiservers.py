"""Reaching the API servers under test (emulator, real kube-apiserver) with the real client.

The fixtures that start them (``api_emulator``, ``kube_api``, ``envtest_server``,
``backend``) live in ``tests/conftest.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from kubernetes import client, config

from agentpool.kube.api import KubeApi, load_client
from agentpool.sim.apiserver import ApiEmulator
from agentpool.sim.cluster import DirectApi
from agentpool.sim.envtest import EnvtestServer


def kube_client(kubeconfig: Path) -> client.ApiClient:
    """A real ``kubernetes`` ApiClient configured only from ``kubeconfig``."""
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(cfg)


@contextlib.contextmanager
def kube_api_on(emulator: ApiEmulator) -> Iterator[KubeApi]:
    """The agent's own API client, on ``emulator`` through its kubeconfig."""
    assert emulator.kubeconfig is not None
    api = KubeApi(load_client(str(emulator.kubeconfig)))
    try:
        yield api
    finally:
        api.close()


class Backend:
    """One API server under test, reached by the real client and by the direct API."""

    def __init__(
        self, name: str, direct: DirectApi, kubeconfig: Path, server: EnvtestServer | None = None
    ) -> None:
        self.name = name
        self.direct = direct
        self.server = server
        self.kubeconfig = kubeconfig
        self.client = kube_client(kubeconfig)

    def close(self) -> None:
        self.client.close()
