"""Where a node's GPU telemetry comes from and where its GPU controls go (TelemetryProfile).

``spec.controls.gpu`` and ``spec.sources.gpu`` have the CPU blocks' shape
(README "Custom resources" and "GPU power caps"). The GPU answer of Joulie's simulator rides in
the same telemetry document as the CPU one, so without an HTTP
``sources.gpu`` the CPU telemetry endpoint is read for the ``gpu`` object.
Malformed blocks raise :class:`ProfileError` naming the field.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentpool.errors import ProfileError, shown
from agentpool.spec.parse import TP, _endpoint, _mapping, object_name
from agentpool.spec.values import ControlType, HttpEndpoint, SourceType


class GpuControlMode(enum.StrEnum):
    AUTO = "auto"
    """Power caps (the only method this agent implements)."""
    POWERCAP = "powercap"
    """Power caps, explicitly."""
    CLOCKS = "clocks"
    """Clock locking: accepted by the CRD, not implemented, so reported ``blocked``."""


@dataclass(frozen=True)
class GpuRouting:
    control: ControlType = ControlType.HOST
    control_http: HttpEndpoint | None = None
    mode: GpuControlMode = GpuControlMode.AUTO
    telemetry_http: HttpEndpoint | None = None
    """Where the ``gpu`` telemetry object is read; None: no HTTP GPU telemetry."""
    profile_name: str | None = None


def _kind(
    block: Mapping[str, Any], kinds: type[ControlType] | type[SourceType], name: str, path: str
) -> Any:
    raw = block.get("type", "host")
    try:
        return kinds(raw)
    except ValueError:
        accepted = ", ".join(m.value for m in kinds)
        raise ProfileError(TP, name, path, f"{shown(raw)} is not one of {accepted}") from None


def parse_gpu_routing(obj: Mapping[str, Any] | None) -> GpuRouting:
    """The GPU routing of a TelemetryProfile; None (no profile) means host control."""
    if obj is None:
        return GpuRouting()
    name = object_name(obj) or "?"  # for error messages
    spec = _mapping(obj, "spec", TP, name, "spec")
    controls = _mapping(spec, "controls", TP, name, "spec.controls")
    sources = _mapping(spec, "sources", TP, name, "spec.sources")
    block = _mapping(controls, "gpu", TP, name, "spec.controls.gpu")
    control: ControlType = _kind(block, ControlType, name, "spec.controls.gpu.type")
    control_http, mode = None, GpuControlMode.AUTO
    if control is ControlType.HTTP:
        control_http, http = _endpoint(block, name, "spec.controls.gpu")
        raw_mode = http.get("mode", GpuControlMode.AUTO.value)
        try:
            mode = GpuControlMode(raw_mode)
        except ValueError:
            accepted = ", ".join(m.value for m in GpuControlMode)
            problem = f"{shown(raw_mode)} is not one of {accepted}"
            raise ProfileError(TP, name, "spec.controls.gpu.http.mode", problem) from None
    telemetry = None
    for key in ("gpu", "cpu"):
        source = _mapping(sources, key, TP, name, f"spec.sources.{key}")
        kind: SourceType = _kind(source, SourceType, name, f"spec.sources.{key}.type")
        if kind is SourceType.HTTP:
            telemetry, _ = _endpoint(source, name, f"spec.sources.{key}")
            break
        if key == "gpu" and source:
            break  # an explicit non-HTTP GPU source: do not borrow the CPU one
    return GpuRouting(control, control_http, mode, telemetry, name)
