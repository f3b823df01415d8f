"""Fixtures the envtest tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentpool.sim.clusterapi import chart_crds
from agentpool.sim.envtest import EnvtestServer, EnvtestUnavailableError, find_assets
from tests.envtest.accounts import AUDITED_AGENT, chart_account


@pytest.fixture(scope="module")
def nodetwin_account(envtest_server: EnvtestServer) -> Iterator[tuple[str, str]]:
    """The chart's ServiceAccount with the RBAC it renders for ``joulie.api=nodetwin``."""
    with chart_account(envtest_server, "pool", joulie={"api": "nodetwin"}) as account:
        yield account


@pytest.fixture(scope="module")
def audited() -> Iterator[EnvtestServer]:
    """A kube-apiserver of its own, with the audit log on (the shared one has it off), the
    chart's CRDs and the user ``AUDITED_AGENT``."""
    try:
        assets = find_assets()
    except EnvtestUnavailableError as exc:
        pytest.skip(str(exc))
    with EnvtestServer(assets, users={AUDITED_AGENT: ("system:masters",)},
                       audit=True) as server:
        server.api().apply(chart_crds())
        yield server
