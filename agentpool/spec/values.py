"""Plain typed values of the Joulie custom resources and of what the agent reports back.

No I/O, no Kubernetes types. Raw custom-resource JSON arrives as dicts (the
supervisor forwards them over a pipe); :mod:`agentpool.spec.parse` turns
them into these values. The same values serve both Joulie APIs: a NodeTwin's
desired state is a :class:`PowerPolicy` as a NodePowerProfile's is, and
``gpu.powerCap`` has one shape in both.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit


def json_number(value: object) -> float | None:
    """``value`` when it is a finite JSON number, as a float; None for anything else.

    ``bool`` is an ``int`` subclass in Python, and JSON ``true`` is no wattage;
    ``json.loads`` accepts ``NaN`` and ``Infinity``, and one of those in a
    reading would poison every computation after it (each comparison with NaN
    is false). JSON integers have no limit: one too large for a float (where
    ``float()`` and ``math.isfinite`` raise ``OverflowError``) is no number
    either.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def json_count(value: object) -> int | None:
    """``value`` when it is a JSON integer (not ``true``/``false``); None otherwise."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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


class Backend(enum.StrEnum):
    NONE = "none"
    RAPL = "rapl"
    DVFS = "dvfs"


class NodeApi(enum.StrEnum):
    """Which Joulie API a node follows (label ``api`` of ``agentpool_node_api``)."""

    NODETWIN = "nodetwin"
    """Desired state from the node's NodeTwin."""
    PROFILES = "profiles"
    """Desired state from the node's NodePowerProfile."""
    NONE = "none"
    """``JOULIE_API=auto`` and neither a NodeTwin nor a NodePowerProfile targets the node."""


class Result(enum.StrEnum):
    APPLIED = "applied"
    BLOCKED = "blocked"
    ERROR = "error"
    NONE = "none"
    """Nothing to enforce (no profile, or a profile without a cap)."""


class GpuBackend(enum.StrEnum):
    """Values of ``status.control.gpu.backend`` (README "GPU power caps")."""

    NONE = "none"
    # nothing enforced (no cap, no GPU, or no way to enforce it)
    HTTP = "http"
    # the node's GPU control endpoint (Joulie simulator, BMC gateway)
    HOST_NVIDIA = "host-nvidia"
    # NVML on this host
    HOST_AMD = "host-amd"
    # AMD SMI on this host


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
class DeviceLimits:
    """What one device allows, in watts (NVML reports milliwatts; backends convert)."""

    min_watts: float
    max_watts: float
    default_watts: float | None = None


def limits_problem(limits: DeviceLimits) -> str | None:
    """Why a device's reported limits make no range a cap can be clamped into; None if they do.

    A driver that reports a maximum of 0, or a minimum above its maximum, has no
    limit the agent could set: the device is ``blocked``, never written.
    """
    low, high = limits.min_watts, limits.max_watts
    if not (math.isfinite(low) and math.isfinite(high)) or not 0 <= low <= high or high <= 0:
        return f"reports no usable power limit range (min {low:g} W, max {high:g} W)"
    return None


def resolve_cap(cap: GpuCap, limits: DeviceLimits) -> tuple[float, float]:
    """(target, clamped) watts for one device: percent against its own max, then clamped."""
    if cap.watts_per_gpu is not None:
        target = cap.watts_per_gpu
    else:
        assert cap.pct_of_max is not None
        target = limits.max_watts * cap.pct_of_max / 100.0
    return target, min(limits.max_watts, max(limits.min_watts, target))


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
        """The ``policy`` label value of ``joulie_policy_cap_watts``: the object's name, as
        Joulie's agent exports it (a profile switch then changes the series' value, which
        Joulie's "Policy Reassignment Events" panel counts with ``changes()``)."""
        return self.source


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


@dataclass(frozen=True)
class GpuTickResult:
    """What one reconcile concluded about a node's GPUs; becomes ``control.gpu``."""

    backend: GpuBackend
    result: Result
    message: str
    observed: dict[str, Any] = field(default_factory=dict)

    def status_key(self) -> tuple[str, str, str]:
        return (self.backend.value, self.result.value, self.message)


@dataclass(frozen=True)
class TickResult:
    """What one reconcile concluded; the supervisor turns it into the status."""

    backend: Backend
    result: Result
    message: str
    observed: dict[str, Any] = field(default_factory=dict)
    gpu: GpuTickResult | None = None
    """The GPU side of the same tick (``control.gpu``); None when the node has no GPU cap."""

    def status_key(self) -> tuple[str, ...]:
        """Status writes are skipped while this stays the same (heartbeat aside)."""
        cpu = (self.backend.value, self.result.value, self.message)
        return cpu if self.gpu is None else cpu + self.gpu.status_key()
