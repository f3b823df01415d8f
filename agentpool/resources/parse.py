"""Parse NodePowerProfile, NodeTwin and TelemetryProfile JSON into typed values.

Malformed input raises :class:`ProfileError` naming the exact field (for
example ``spec.cpu.packagePowerCapWatts``); the controller turns it into
status ``error`` and writes nothing to the host. Every bound here is the
chart's CRD bound (tests/deploy/test_crds.py holds the two against each
other), so a value the API server would refuse is refused here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentpool.errors import ProfileError, shown
from agentpool.jsonnumbers import json_number
from agentpool.resources.desired import GpuCap, PowerPolicy, Profile
from agentpool.resources.routing import (
    DEFAULT_HTTP_TIMEOUT_S,
    ControlMode,
    ControlType,
    GpuControlMode,
    GpuRouting,
    HttpEndpoint,
    NodeRouting,
    Routing,
    SourceType,
    url_problem,
)

NPP = "NodePowerProfile"
TP = "TelemetryProfile"
NT = "NodeTwin"
MAX_TIMEOUT_S = 300.0
"""A longer HTTP timeout would let one tick hang for minutes; refuse it."""


def metadata_name(obj: Mapping[str, Any]) -> str:
    """``metadata.name`` of a raw object; '' when it has none (malformed input)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return str(name) if name else ""


def spec_node_name(obj: Mapping[str, Any]) -> str | None:
    """``spec.nodeName`` of a NodePowerProfile, NodeTwin or NodeHardware; None when the object
    has none, or one that is not a non-empty string (malformed input)."""
    spec = obj.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) and node else None


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
    number = json_number(value)
    if number is None:
        raise ProfileError(kind, name, path, f"{shown(value)} is not a number")
    return number


def _choice[E: (SourceType, ControlType, ControlMode, GpuControlMode, Profile)](
    block: Mapping[str, Any], key: str, default: E, kind: str, name: str, path: str
) -> E:
    """An enum-valued field; a value outside the enum names the field and what is accepted."""
    enum = type(default)
    raw = block.get(key, default.value)
    try:
        return enum(raw)
    except ValueError:
        accepted = ", ".join(m.value for m in enum)
        raise ProfileError(kind, name, path, f"{shown(raw)} is not one of {accepted}") from None


# -- desired state: NodePowerProfile, NodeTwin ---------------------------------------------


def parse_power_profile(obj: Mapping[str, Any], kind: str = NPP) -> PowerPolicy:
    """A NodePowerProfile's, or with ``kind=NT`` a NodeTwin's, desired state.

    Both carry the same spec fields; ``cpu.packagePowerCapPctOfMax`` (which
    Joulie releases between the two APIs also put into NodePowerProfiles) is
    accepted in both, and watts win over it.
    """
    name = metadata_name(obj) or "?"  # for error messages
    spec = _mapping(obj, "spec", kind, name, "spec")
    node = spec_node_name(obj)
    if node is None:
        raise ProfileError(kind, name, "spec.nodeName", "required, a node name")
    raw_profile = spec.get("profile")
    if not isinstance(raw_profile, str) or raw_profile not in set(Profile):
        accepted = " or ".join(p.value for p in Profile)
        raise ProfileError(kind, name, "spec.profile", f"{shown(raw_profile)} is not {accepted}")
    profile = Profile(raw_profile)
    cpu = _mapping(spec, "cpu", kind, name, "spec.cpu")
    cap = cpu.get("packagePowerCapWatts")
    cap_watts: float | None = None
    if cap is not None:
        cap_watts = _number(cap, kind, name, "spec.cpu.packagePowerCapWatts")
        if cap_watts < 1:
            problem = f"{shown(cap)} must be a number >= 1"
            raise ProfileError(kind, name, "spec.cpu.packagePowerCapWatts", problem)
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


def parse_gpu_cap(
    spec: Mapping[str, Any], kind: str, name: str, path: str = "spec"
) -> GpuCap | None:
    """The ``gpu.powerCap`` of a NodePowerProfile or NodeTwin ``spec``; None when absent.

    Watts win over percent when both are set (the parser keeps only them).
    """
    gpu = _mapping(spec, "gpu", kind, name, f"{path}.gpu")
    where = f"{path}.gpu.powerCap"
    block = _mapping(gpu, "powerCap", kind, name, where)
    raw_watts, raw_pct = block.get("capWattsPerGpu"), block.get("capPctOfMax")
    watts, pct = json_number(raw_watts), json_number(raw_pct)
    if raw_watts is not None and (watts is None or watts < 1):
        problem = f"{shown(raw_watts)} must be a number >= 1"
        raise ProfileError(kind, name, f"{where}.capWattsPerGpu", problem)
    if raw_pct is not None and (pct is None or not 0 < pct <= 100):
        problem = f"{shown(raw_pct)} must be a number, 0 < pct <= 100"
        raise ProfileError(kind, name, f"{where}.capPctOfMax", problem)
    if watts is not None:
        return GpuCap(watts_per_gpu=watts)
    if pct is not None:
        return GpuCap(pct_of_max=pct)
    return None


# -- routing: the TelemetryProfile targeting the node wins, CPU and GPU alike; without one,
# -- the TELEMETRY_* variables (``env``), on either Joulie API. Each part parses (and fails)
# -- on its own: a malformed GPU block leaves the CPU routing as it is, and the reverse.


def cpu_routing(telemetry_profile: Mapping[str, Any] | None, env: NodeRouting) -> Routing:
    """A node's CPU routing."""
    if telemetry_profile is None:
        return env.cpu
    return parse_telemetry_profile(telemetry_profile)


def gpu_routing(telemetry_profile: Mapping[str, Any] | None, env: NodeRouting) -> GpuRouting:
    """A node's GPU routing."""
    if telemetry_profile is None:
        return env.gpu
    return parse_gpu_routing(telemetry_profile)


def _typed_block[E: (SourceType, ControlType, ControlMode, GpuControlMode, Profile)](
    parent: Mapping[str, Any], key: str, default: E, name: str, path: str
) -> tuple[Mapping[str, Any], E]:
    """A source or control block and its ``type``: ``default`` when the block is absent;
    a block that is there must say its type (the CRD requires it)."""
    block = _mapping(parent, key, TP, name, path)
    if parent.get(key) is not None and block.get("type") is None:
        accepted = ", ".join(m.value for m in type(default))
        raise ProfileError(TP, name, f"{path}.type", f"required, one of {accepted}")
    return block, _choice(block, "type", default, TP, name, f"{path}.type")


def _endpoint(
    block: Mapping[str, Any], name: str, path: str
) -> tuple[HttpEndpoint, Mapping[str, Any]]:
    http = _mapping(block, "http", TP, name, f"{path}.http")
    endpoint = http.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise ProfileError(TP, name, f"{path}.http.endpoint", "required, a URL")
    problem = url_problem(endpoint)
    if problem is not None:
        raise ProfileError(TP, name, f"{path}.http.endpoint", f"{shown(endpoint)} {problem}")
    raw_timeout = http.get("timeoutSeconds", DEFAULT_HTTP_TIMEOUT_S)
    timeout = json_number(raw_timeout)
    if timeout is None or not 0 < timeout <= MAX_TIMEOUT_S:
        raise ProfileError(
            TP,
            name,
            f"{path}.http.timeoutSeconds",
            f"{shown(raw_timeout)} must be a number of seconds, 0 < t <= {MAX_TIMEOUT_S:g}",
        )
    return HttpEndpoint(endpoint, timeout), http


def _http_of(
    block: Mapping[str, Any], used: bool, name: str, path: str
) -> tuple[HttpEndpoint | None, Mapping[str, Any]]:
    """A block's HTTP endpoint (None unless ``used``: its type is http) and ``http`` block.

    An ``http`` block is checked even where its type does not use it: the CRD
    holds it to the same bounds, so the agent never takes what a cluster would refuse.
    """
    if not used and block.get("http") is None:
        return None, {}
    endpoint, http = _endpoint(block, name, path)
    return (endpoint if used else None), http


def parse_telemetry_profile(obj: Mapping[str, Any]) -> Routing:
    """The CPU routing of a TelemetryProfile."""
    name = metadata_name(obj) or "?"  # for error messages
    spec = _mapping(obj, "spec", TP, name, "spec")
    sources = _mapping(spec, "sources", TP, name, "spec.sources")
    controls = _mapping(spec, "controls", TP, name, "spec.controls")
    source_block, source = _typed_block(sources, "cpu", SourceType.HOST, name, "spec.sources.cpu")
    control_block, control = _typed_block(
        controls, "cpu", ControlType.HOST, name, "spec.controls.cpu"
    )
    source_http, _ = _http_of(source_block, source is SourceType.HTTP, name, "spec.sources.cpu")
    control_http, http = _http_of(
        control_block, control is ControlType.HTTP, name, "spec.controls.cpu"
    )
    mode = _choice(http, "mode", ControlMode.AUTO, TP, name, "spec.controls.cpu.http.mode")
    return Routing(
        source=source,
        source_http=source_http,
        control=control,
        control_http=control_http,
        mode=mode,
        profile_name=name,
    )


def parse_gpu_routing(obj: Mapping[str, Any]) -> GpuRouting:
    """The GPU routing of a TelemetryProfile (``spec.controls.gpu``, ``spec.sources.gpu``).

    The blocks have the CPU blocks' shape. The GPU answer of Joulie's
    simulator rides in the same telemetry document as the CPU one, so
    without an HTTP ``sources.gpu`` the CPU telemetry endpoint is read for
    the ``gpu`` object.
    """
    name = metadata_name(obj) or "?"  # for error messages
    spec = _mapping(obj, "spec", TP, name, "spec")
    controls = _mapping(spec, "controls", TP, name, "spec.controls")
    sources = _mapping(spec, "sources", TP, name, "spec.sources")
    block, control = _typed_block(controls, "gpu", ControlType.HOST, name, "spec.controls.gpu")
    control_http, http = _http_of(block, control is ControlType.HTTP, name, "spec.controls.gpu")
    mode = _choice(http, "mode", GpuControlMode.AUTO, TP, name, "spec.controls.gpu.http.mode")
    telemetry = None
    for key in ("gpu", "cpu"):
        where = f"spec.sources.{key}"
        source, kind = _typed_block(sources, key, SourceType.HOST, name, where)
        endpoint, _ = _http_of(source, kind is SourceType.HTTP, name, where)
        if endpoint is not None:
            telemetry = endpoint
            break
        if key == "gpu" and source:
            break  # an explicit non-HTTP GPU source: do not borrow the CPU one
    return GpuRouting(control, control_http, mode, telemetry, name)


def oldest_claim(
    objs: list[dict[str, Any]], kind: str, node: str
) -> tuple[dict[str, Any], str | None]:
    """Several objects of ``kind`` target ``node``: the oldest wins (then the first name),
    and a note says so (None when there is only one)."""
    chosen = min(
        objs, key=lambda o: (str((o.get("metadata") or {}).get("creationTimestamp") or ""),
                             metadata_name(o))
    )
    if len(objs) == 1:
        return chosen, None
    names = ", ".join(sorted(metadata_name(o) for o in objs))
    note = f"{len(objs)} {kind}s target node {node} ({names}); using the oldest, "
    return chosen, note + repr(metadata_name(chosen))


def target_problem(obj: Mapping[str, Any]) -> ProfileError | None:
    """What is wrong with a TelemetryProfile's ``spec.target``, None when nothing is.

    The CRD's schema refuses these on a server that validates it; this is the
    same rule for objects it never checked (written before the schema had it,
    or served by a CRD that lacks it), which would otherwise be ignored silently.
    """
    name = metadata_name(obj) or "?"
    scope, node = target_of(obj)
    if scope == "node" and not node:
        return ProfileError(
            TP, name, "spec.target.nodeName", "required when spec.target.scope is node"
        )
    return None


def target_of(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    """(scope, nodeName) of a TelemetryProfile, tolerant of junk (used for indexing)."""
    spec = obj.get("spec")
    target = spec.get("target") if isinstance(spec, Mapping) else None
    if not isinstance(target, Mapping):
        return ("", None)
    node = target.get("nodeName")
    return (str(target.get("scope", "")), node if isinstance(node, str) else None)
