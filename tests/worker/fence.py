"""A fenced worker's node and its inputs, for the fencing and cadence tests."""

from __future__ import annotations

from typing import Any

from agentpool.resources.nodeinputs import NodeInputs

NODE = "fenced-0"
INTEL = {"feature.node.kubernetes.io/cpu-vendor": "GenuineIntel", "joulie.io/managed": "true"}
DEADLINE_S = 30.0
"""A worker forks and ticks in well under a second here; 30 s is for a loaded CI box."""


def inputs(cap: float, node: str = NODE) -> NodeInputs:
    profile: dict[str, Any] = {
        "metadata": {"name": node},
        "spec": {"nodeName": node, "profile": "eco", "cpu": {"packagePowerCapWatts": cap}},
    }
    return NodeInputs(node, labels=dict(INTEL), power_profile=profile)
