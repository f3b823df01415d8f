"""Where a node's telemetry is read and its controls go: a TelemetryProfile's routing.

The TelemetryProfile targeting a node wins, CPU and GPU alike; without one the
TELEMETRY_* variables give the same values (:mod:`agentpool.config.env_routing`),
on either Joulie API. :mod:`agentpool.resources.parse` makes them from the raw
object; :func:`url_problem` checks an endpoint wherever one is configured.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit


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
    """As ``auto``: Joulie's agent gives it no meaning of its own, and its experiments set
    it where they mean "cap with RAPL", which DVFS still backs up when RAPL fails."""
    DVFS = "dvfs"
    """Skip RAPL, go straight to the DVFS controller."""


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
    TELEMETRY_* variables (:func:`agentpool.resources.parse.cpu_routing`, ``gpu_routing``), on
    either API."""

    cpu: Routing = field(default_factory=Routing)
    gpu: GpuRouting = field(default_factory=GpuRouting)
