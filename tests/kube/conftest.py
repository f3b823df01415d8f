"""Fixtures the kube tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentpool.kube.api import KubeApi
from agentpool.sim.apiserver import ApiEmulator
from tests.support.apiservers import kube_api_on


@pytest.fixture
def api(api_emulator: ApiEmulator) -> Iterator[KubeApi]:
    with kube_api_on(api_emulator) as client:
        yield client
