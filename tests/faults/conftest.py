"""The fault suite (issue 43): the surroundings fail under the real agent's processes.

Shared here: a real control plane that faults may crash and restart.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentpool.sim.clusterapi import chart_crds
from agentpool.sim.envtest import EnvtestServer, EnvtestUnavailableError, find_assets
from tests.faults.apipath import AGENT_USER


@pytest.fixture(scope="package")
def audited_server() -> Iterator[EnvtestServer]:
    """etcd + kube-apiserver of this package's own, with an audit log: unlike the session's
    shared one, a fault may kill it. The chart's CRDs are installed."""
    try:
        assets = find_assets()
    except EnvtestUnavailableError as exc:
        pytest.skip(str(exc))
    with EnvtestServer(assets, users={AGENT_USER: ("system:masters",)}, audit=True) as server:
        server.api().apply(chart_crds())
        yield server
