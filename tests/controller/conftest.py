"""Fixtures the controller tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentpool.sim.power.model import NodeConfig
from agentpool.sim.power.server import PowerSim


@pytest.fixture
def sim() -> Iterator[PowerSim]:
    # load 1.0: 260 W at full clock; throttling removes up to 70 % of the 200 W dynamic part.
    quiet = NodeConfig(idle_watts=60.0, max_watts=260.0, load=1.0, noise_watts=0.0)
    with PowerSim(defaults=quiet) as s:
        yield s
