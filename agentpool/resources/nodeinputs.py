"""What a worker is given for its node: the raw objects of the API the node follows.

The supervisor builds a :class:`NodeInputs` from what it watches and sends it
over the worker's pipe (pickled) whenever any part changes; the worker parses
the parts with :mod:`agentpool.resources.parse`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class NodeApi(enum.StrEnum):
    """Which Joulie API a node follows (label ``api`` of ``agentpool_node_api``)."""

    NODETWIN = "nodetwin"
    """Desired state from the node's NodeTwin."""
    PROFILES = "profiles"
    """Desired state from the node's NodePowerProfile."""
    NONE = "none"
    """``JOULIE_API=auto`` and neither a NodeTwin nor a NodePowerProfile targets the node."""


@dataclass(frozen=True)
class GpuRange:
    """A node's per-GPU power-limit range known from outside its telemetry (HTTP percent
    caps when the telemetry gives no maximum)."""

    max_watts: float
    min_watts: float | None
    source: str
    """Where it comes from, for the status: ``NodeHardware``, ``hardware catalog: KEY`` or
    ``built-in table: PRODUCT (data sheet)``."""


@dataclass(frozen=True)
class NodeInputs:
    """Everything the supervisor knows about one node, as raw API JSON.

    Sent to the worker whenever any part changes. Plain dicts pickle small and
    keep the worker free of Kubernetes client types.
    """

    node_name: str
    labels: dict[str, str] = field(default_factory=dict)
    power_profile: dict[str, Any] | None = None
    telemetry_profile: dict[str, Any] | None = None
    power_profile_note: str | None = None
    """Why this NodePowerProfile was chosen when several target the node."""
    gpu_allocatable: dict[str, str] = field(default_factory=dict)
    """The Node's allocatable GPU resources, as Joulie counts them (``*/gpu``, Intel's
    ``gpu.intel.com/i915``): none allocatable blocks a GPU cap."""
    node_twin: dict[str, Any] | None = None
    """NodeTwin API: the node's NodeTwin (trimmed to metadata and spec)."""
    api: NodeApi = NodeApi.PROFILES
    """The API the node follows: its desired state is ``node_twin`` (NODETWIN) or
    ``power_profile`` (PROFILES); NONE, only with ``JOULIE_API=auto``, when neither
    kind targets the node (its messages then name both)."""
    hardware_max_w: float | None = None
    """CPU package maximum of the whole node from its NodeHardware (HTTP percent caps)."""
    gpu_range: GpuRange | None = None
    """Per-GPU range from the node's NodeHardware ``capRangePerGpu``, else the hardware
    catalog, else agentpool's table of data sheets (HTTP GPU percent caps)."""
    spec_stale: bool = False
    """The desired state has not been confirmed from the API for SPEC_READ_TIMEOUT."""
