"""Parse NodePowerProfile and TelemetryProfile JSON into typed values.

Malformed input raises :class:`ProfileError` naming the exact field (for
example ``spec.cpu.packagePowerCapWatts``); the controller turns it into
status ``error`` and writes nothing to the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from agentpool.errors import ProfileError, shown
from agentpool.spec.gpu import parse_gpu_cap
from agentpool.spec.values import (
    DEFAULT_HTTP_TIMEOUT_S,
    ControlMode,
    ControlType,
    HttpEndpoint,
    PowerPolicy,
    Profile,
    Routing,
    SourceType,
    finite_number,
    url_problem,
)

E = TypeVar("E", SourceType, ControlType, ControlMode)

NPP = "NodePowerProfile"
TP = "TelemetryProfile"
NT = "NodeTwin"
MAX_TIMEOUT_S = 300.0
"""A longer HTTP timeout would let one tick hang for minutes; refuse it."""


def object_name(obj: Mapping[str, Any]) -> str:
    """``metadata.name`` of a raw object; '' when it has none (malformed input)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return str(name) if name else ""


def _mapping(
    obj: Mapping[str, Any], key: str, kind: str, name: str, path: str
) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ProfileError(kind, name, path, f"expected an object, got {type(value).__name__}")
    return value


def _number(value: Any, kind: str, name: str, path: str) -> float:
    # bool is an int subclass in Python; JSON true is not a wattage. An integer too large for
    # a float (JSON has no limit) is no more a number of watts than NaN is.
    number = finite_number(value)
    if number is None:
        raise ProfileError(kind, name, path, f"{shown(value)} is not a number")
    return number


def parse_power_profile(obj: Mapping[str, Any], kind: str = NPP) -> PowerPolicy:
    """A NodePowerProfile's, or with ``kind=NT`` a NodeTwin's, desired state.

    Both carry the same spec fields; ``cpu.packagePowerCapPctOfMax`` (which
    Joulie releases between the two APIs also put into NodePowerProfiles) is
    accepted in both, and watts win over it.
    """
    name = object_name(obj) or "?"  # for error messages
    spec = _mapping(obj, "spec", kind, name, "spec")
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node:
        raise ProfileError(kind, name, "spec.nodeName", "required, a node name")
    raw_profile = spec.get("profile")
    try:
        profile = Profile(raw_profile) if isinstance(raw_profile, str) else None
    except ValueError:
        profile = None
    if profile is None:
        accepted = " or ".join(p.value for p in Profile)
        raise ProfileError(kind, name, "spec.profile", f"{shown(raw_profile)} is not {accepted}")
    cpu = _mapping(spec, "cpu", kind, name, "spec.cpu")
    cap = cpu.get("packagePowerCapWatts")
    cap_watts: float | None = None
    if cap is not None:
        cap_watts = _number(cap, kind, name, "spec.cpu.packagePowerCapWatts")
        if cap_watts < 1:
            raise ProfileError(
                kind, name, "spec.cpu.packagePowerCapWatts", f"{shown(cap)} must be a number >= 1"
            )
    pct = cpu.get("packagePowerCapPctOfMax")
    cap_pct: float | None = None
    if pct is not None:
        cap_pct = _number(pct, kind, name, "spec.cpu.packagePowerCapPctOfMax")
        if not 0 < cap_pct <= 100:
            problem = f"{shown(pct)} must be 0 < pct <= 100"
            raise ProfileError(kind, name, "spec.cpu.packagePowerCapPctOfMax", problem)
    policy = _mapping(spec, "policy", kind, name, "spec.policy")
    policy_name = policy.get("name")
    return PowerPolicy(
        source=name,
        node_name=node,
        profile=profile,
        cap_watts=cap_watts,
        policy_name=str(policy_name) if policy_name is not None else None,
        gpu_cap=parse_gpu_cap(spec, kind, name),
        cap_pct=cap_pct,
        kind=kind,
    )


def _endpoint(
    block: Mapping[str, Any], name: str, path: str
) -> tuple[HttpEndpoint, Mapping[str, Any]]:
    http = _mapping(block, "http", TP, name, f"{path}.http")
    endpoint = http.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise ProfileError(TP, name, f"{path}.http.endpoint", "required when type is http")
    problem = url_problem(endpoint)
    if problem is not None:
        raise ProfileError(TP, name, f"{path}.http.endpoint", f"{shown(endpoint)} {problem}")
    timeout = http.get("timeoutSeconds", DEFAULT_HTTP_TIMEOUT_S)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout <= MAX_TIMEOUT_S
    ):
        raise ProfileError(
            TP,
            name,
            f"{path}.http.timeoutSeconds",
            f"{shown(timeout)} must be a number of seconds, 0 < t <= {MAX_TIMEOUT_S:g}",
        )
    return HttpEndpoint(endpoint, float(timeout)), http


def _choice(block: Mapping[str, Any], key: str, default: E, name: str, path: str) -> E:
    """An enum-valued field of a TelemetryProfile; a value outside the enum names the field."""
    kind = type(default)
    raw = block.get(key, default.value)
    try:
        return kind(raw)
    except ValueError:
        accepted = ", ".join(m.value for m in kind)
        raise ProfileError(TP, name, path, f"{shown(raw)} is not one of {accepted}") from None


def parse_telemetry_profile(obj: Mapping[str, Any]) -> Routing:
    name = object_name(obj) or "?"  # for error messages
    spec = _mapping(obj, "spec", TP, name, "spec")
    sources = _mapping(spec, "sources", TP, name, "spec.sources")
    controls = _mapping(spec, "controls", TP, name, "spec.controls")
    source_block = _mapping(sources, "cpu", TP, name, "spec.sources.cpu")
    control_block = _mapping(controls, "cpu", TP, name, "spec.controls.cpu")

    source = _choice(source_block, "type", SourceType.HOST, name, "spec.sources.cpu.type")
    control = _choice(control_block, "type", ControlType.HOST, name, "spec.controls.cpu.type")
    source_http = None
    if source is SourceType.HTTP:
        source_http, _ = _endpoint(source_block, name, "spec.sources.cpu")
    control_http = None
    mode = ControlMode.AUTO
    if control is ControlType.HTTP:
        control_http, http = _endpoint(control_block, name, "spec.controls.cpu")
        mode = _choice(http, "mode", ControlMode.AUTO, name, "spec.controls.cpu.http.mode")
    return Routing(
        source=source,
        source_http=source_http,
        control=control,
        control_http=control_http,
        mode=mode,
        profile_name=name,
    )


def target_of(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    """(scope, nodeName) of a TelemetryProfile, tolerant of junk (used for indexing)."""
    spec = obj.get("spec")
    target = spec.get("target") if isinstance(spec, Mapping) else None
    if not isinstance(target, Mapping):
        return ("", None)
    node = target.get("nodeName")
    return (str(target.get("scope", "")), node if isinstance(node, str) else None)
