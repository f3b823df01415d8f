"""Fixtures the kube tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentpool.kube.api import KubeApi, load_client
from agentpool.sim.apiserver import ApiEmulator


@pytest.fixture
def api(api_emulator: ApiEmulator) -> Iterator[KubeApi]:
    assert api_emulator.kubeconfig is not None
    client = KubeApi(load_client(str(api_emulator.kubeconfig)))
    yield client
    client.close()
