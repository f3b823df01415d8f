"""A node's desired state, from its NodePowerProfile or its NodeTwin: the same values on both APIs.

A NodeTwin's desired state is a :class:`PowerPolicy` as a NodePowerProfile's
is, and ``gpu.powerCap`` has one shape in both (:class:`GpuCap`).
:mod:`agentpool.resources.parse` makes them from the raw objects.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Profile(enum.StrEnum):
    PERFORMANCE = "performance"
    ECO = "eco"


@dataclass(frozen=True)
class GpuCap:
    """A node's desired GPU cap: watts per GPU, or a percent of each device's maximum.

    Exactly one is set; when the resource carries both, watts win (the parser
    keeps only them).
    """

    watts_per_gpu: float | None = None
    pct_of_max: float | None = None

    def describe(self) -> str:
        if self.watts_per_gpu is not None:
            return f"{self.watts_per_gpu:g} W per GPU"
        return f"{self.pct_of_max:g}% of each GPU's maximum"


@dataclass(frozen=True)
class PowerPolicy:
    """A node's desired state, from its NodePowerProfile."""

    source: str
    """Name of the NodePowerProfile it came from."""
    node_name: str
    profile: Profile
    cap_watts: float | None
    """The power limit of each CPU package, in watts; None means nothing to enforce (unless
    ``cap_pct``)."""
    policy_name: str | None = None
    """Informational ``spec.policy.name``."""
    gpu_cap: GpuCap | None = None
    """``spec.gpu.powerCap``; None means no GPU cap to enforce."""
    cap_pct: float | None = None
    """``cpu.packagePowerCapPctOfMax``: percent of the hardware maximum, used only
    when ``cap_watts`` is None (watts win)."""
    kind: str = "NodePowerProfile"
    """The kind it came from (NodePowerProfile or NodeTwin), for messages."""

    @property
    def label(self) -> str:
        """The ``policy`` label value of ``joulie_policy_cap_watts``: the object's name, as
        Joulie's agent exports it (a profile switch then changes the series' value, which
        Joulie's "Policy Reassignment Events" panel counts with ``changes()``)."""
        return self.source
