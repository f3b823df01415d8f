"""Plain typed values of the Joulie custom resources.

No I/O, no Kubernetes types. Raw custom-resource JSON arrives as dicts (the
supervisor forwards them over a pipe); :mod:`agentpool.spec.parse` turns
them into these values. The same values serve both Joulie APIs: a NodeTwin's
desired state is a :class:`PowerPolicy` as a NodePowerProfile's is, and
``gpu.powerCap`` has one shape in both.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit


class Profile(enum.StrEnum):
    PERFORMANCE = "performance"
    ECO = "eco"


class SourceType(enum.StrEnum):
    NONE = "none"
    HOST = "host"
    HTTP = "http"
    PROMETHEUS = "prometheus"
    """Accepted by the CRD; the agent treats it as 'no reading' (not implemented)."""


class ControlType(enum.StrEnum):
    NONE = "none"
    HOST = "host"
    HTTP = "http"


class ControlMode(enum.StrEnum):
    AUTO = "auto"
    """RAPL first, DVFS when RAPL is unavailable."""
    RAPL = "rapl"
    """RAPL only; no DVFS fallback."""
    DVFS = "dvfs"
    """Skip RAPL, go straight to the DVFS controller."""


class NodeApi(enum.StrEnum):
    """Which Joulie API a node follows (label ``api`` of ``agentpool_node_api``)."""

    NODETWIN = "nodetwin"
    """Desired state from the node's NodeTwin."""
    PROFILES = "profiles"
    """Desired state from the node's NodePowerProfile."""
    NONE = "none"
    """``JOULIE_API=auto`` and neither a NodeTwin nor a NodePowerProfile targets the node."""


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
    """Total CPU package budget; None means nothing to enforce (unless ``cap_pct``)."""
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
        """The ``policy`` label value of ``joulie_policy_cap_watts``."""
        return self.profile.value


def url_problem(template: str) -> str | None:
    """Why an endpoint (``{node}`` standing for a node name) cannot be requested; None if it can.

    Checked when the endpoint is configured, so that a bad one is an error naming its field
    or variable rather than a failure of every request: a request line refuses whitespace
    and control characters, non-ASCII cannot go into a request line, and a port must be a
    number from 1 to 65535.
    """
    url = template.replace("{node}", "node")
    if not url.isascii() or any(c.isspace() or not c.isprintable() for c in url):
        return "has whitespace, control or non-ASCII characters (percent-encode them)"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"is not a URL: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "is not an http:// or https:// URL"
    if port == 0:
        return "has port 0, which cannot be connected to"
    if parts.username is not None or parts.password is not None:
        return "has credentials, which are never sent (use HTTP_TOKEN_FILE)"
    return None


DEFAULT_HTTP_TIMEOUT_S = 2.0
"""An endpoint's timeout when its ``timeoutSeconds`` is not given."""


@dataclass(frozen=True)
class HttpEndpoint:
    template: str
    """URL with an optional ``{node}`` placeholder."""
    timeout_s: float = DEFAULT_HTTP_TIMEOUT_S

    def url(self, node: str) -> str:
        # Percent-encoded: a node name is a path segment, and a request line holds no
        # non-ASCII (DNS-1123 names pass through unchanged).
        return self.template.replace("{node}", quote(node, safe=""))


@dataclass(frozen=True)
class Routing:
    """Where a node's CPU telemetry comes from and where its controls go."""

    source: SourceType = SourceType.HOST
    source_http: HttpEndpoint | None = None
    control: ControlType = ControlType.HOST
    control_http: HttpEndpoint | None = None
    mode: ControlMode = ControlMode.AUTO
    profile_name: str | None = None
    """The TelemetryProfile this came from; None means the TELEMETRY_* variables."""


class GpuControlMode(enum.StrEnum):
    AUTO = "auto"
    """Power caps (the only method this agent implements)."""
    POWERCAP = "powercap"
    """Power caps, explicitly."""
    CLOCKS = "clocks"
    """Clock locking: accepted by the CRD, not implemented, so reported ``blocked``."""


@dataclass(frozen=True)
class GpuRouting:
    """Where a node's GPU controls go and where its GPU telemetry is read."""

    control: ControlType = ControlType.HOST
    control_http: HttpEndpoint | None = None
    mode: GpuControlMode = GpuControlMode.AUTO
    telemetry_http: HttpEndpoint | None = None
    """Where the ``gpu`` telemetry object is read; None: no HTTP GPU telemetry."""
    profile_name: str | None = None
    """The TelemetryProfile this came from; None means the TELEMETRY_* variables."""


@dataclass(frozen=True)
class NodeRouting:
    """A node's routing, CPU and GPU: from the TelemetryProfile targeting it, else from the
    TELEMETRY_* variables (:func:`agentpool.spec.parse.cpu_routing`, ``gpu_routing``), on
    either API."""

    cpu: Routing = field(default_factory=Routing)
    gpu: GpuRouting = field(default_factory=GpuRouting)


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
    """The Node's allocatable ``nvidia.com/gpu`` / ``amd.com/gpu`` (GPU discovery)."""
    node_twin: dict[str, Any] | None = None
    """NodeTwin API: the node's NodeTwin (trimmed to metadata and spec)."""
    nodetwin_api: bool = False
    """The node follows the NodeTwin API: desired state comes from ``node_twin`` only."""
    auto_api: bool = False
    """``JOULIE_API=auto``: the desired state may come from either API (messages name both)."""
    hardware_max_w: float | None = None
    """CPU package maximum of the whole node from its NodeHardware (HTTP percent caps)."""
    spec_stale: bool = False
    """The desired state has not been confirmed from the API for SPEC_READ_TIMEOUT."""
