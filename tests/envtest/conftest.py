"""Fixtures the envtest tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentpool.sim.envtest import EnvtestServer
from tests.envtest.accounts import chart_account


@pytest.fixture(scope="module")
def nodetwin_account(envtest_server: EnvtestServer) -> Iterator[tuple[str, str]]:
    """The chart's ServiceAccount with the RBAC it renders for ``joulie.api=nodetwin``."""
    with chart_account(envtest_server, "pool", joulie={"api": "nodetwin"}) as account:
        yield account
