"""Plain typed values the node controller works with; no I/O, no Kubernetes types.

Raw custom-resource JSON arrives as dicts (the supervisor forwards them over a
pipe); :mod:`agentpool.spec.parse` turns them into these values.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:
    from agentpool.spec.gpu import GpuCap, GpuTickResult


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


def finite_number(value: Any) -> float | None:
    """A decoded JSON number as a finite float; None for anything else.

    Not a number: ``true``/``false`` (bool is an int subclass), NaN and
    infinities (Python's json reads them), and integers too large for a
    float (JSON numbers have no limit; ``math.isfinite`` would raise on them).
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def url_problem(template: str) -> str | None:
    """Why an endpoint (``{node}`` standing for a node name) cannot be requested; None if it can.

    Checked when the endpoint is configured, so that a bad one is an error naming its field
    or variable rather than a failure of every request: ``http.client`` refuses whitespace
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
        # Percent-encoded: a node name is a path segment, and http.client refuses
        # non-ASCII in a request line (DNS-1123 names pass through unchanged).
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
    """The TelemetryProfile this came from; None means the host defaults."""


@dataclass(frozen=True)
class Hardware:
    """What Node Feature Discovery labels say about the node."""

    cpu_vendor: str | None = None
    """``GenuineIntel``, ``AuthenticAMD``, another raw vendor id, or None if unknown."""
    gpu_vendors: tuple[str, ...] = ()
    """From NFD PCI labels: a hint for which host GPU library to try first."""

    @property
    def rapl_capable(self) -> bool:
        """False only when the node is known to be neither Intel nor AMD."""
        return self.cpu_vendor is None or self.cpu_vendor in ("GenuineIntel", "AuthenticAMD")


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
