"""Routing by environment: Joulie's ``TELEMETRY_*`` variables, validated into a node routing.

Joulie's current operator has no TelemetryProfile CRD: where a node's
telemetry comes from and where its controls go is configured once per agent
by environment variables, the same for every node (``{node}`` in an endpoint
is replaced per node). This module owns reading and validating them; a bad
value is a :class:`ConfigError` naming the variable, so the process exits 2
before starting anything. Nothing set means host sources and host controls.

A TelemetryProfile that targets a node, where that CRD exists, wins over
these variables for that node, on either API
(:func:`agentpool.resources.parse.cpu_routing`, :func:`~agentpool.resources.parse.gpu_routing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from agentpool.errors import ConfigError
from agentpool.resources.parse import MAX_TIMEOUT_S
from agentpool.resources.routing import (
    DEFAULT_HTTP_TIMEOUT_S,
    ControlMode,
    ControlType,
    GpuRouting,
    HttpEndpoint,
    NodeRouting,
    Routing,
    SourceType,
    url_problem,
)

E = TypeVar("E", SourceType, ControlType, ControlMode)

_SOURCES = (SourceType.HOST, SourceType.HTTP, SourceType.NONE)
"""Joulie's variables accept these three (no ``prometheus``, unlike the CRD)."""


def _choice(env: str, raw: str | None, default: E, accepted: tuple[E, ...]) -> E:
    value = (raw or "").strip().lower()
    if not value:
        return default
    for member in accepted:
        if member.value == value:
            return member
    names = ", ".join(m.value for m in accepted)
    raise ConfigError(env, raw, f"expected one of {names}")


def _endpoint(env: str, raw: str | None, needed_by: str, timeout_s: float) -> HttpEndpoint:
    value = (raw or "").strip()
    if not value:
        raise ConfigError(env, raw or "", f"required when {needed_by} is http")
    problem = url_problem(value)
    if problem is not None:
        raise ConfigError(
            env, raw, f"expected an http:// or https:// URL ('{{node}}' allowed); it {problem}"
        )
    return HttpEndpoint(value, timeout_s)


def _timeout(raw: str | None) -> float:
    env = "TELEMETRY_HTTP_TIMEOUT_SECONDS"
    value = (raw or "").strip()
    if not value:
        return DEFAULT_HTTP_TIMEOUT_S
    try:
        seconds = int(value)
    except ValueError:
        raise ConfigError(env, raw, "expected a whole number of seconds") from None
    if not 1 <= seconds <= MAX_TIMEOUT_S:
        raise ConfigError(env, raw, f"expected seconds from 1 to {MAX_TIMEOUT_S:g}")
    return float(seconds)


def routing_from_env(values: Mapping[str, str | None]) -> NodeRouting:
    """The CPU and GPU routing the ``TELEMETRY_*`` values describe.

    GPU telemetry rides on the CPU telemetry answer (Joulie's simulator puts
    its ``gpu`` object there), as it does for a TelemetryProfile without an
    HTTP ``sources.gpu``.
    """
    timeout = _timeout(values.get("TELEMETRY_HTTP_TIMEOUT_SECONDS"))

    def choice(env: str, default: E, accepted: tuple[E, ...]) -> E:
        return _choice(env, values.get(env), default, accepted)

    def endpoint(env: str, needed_by: str, wanted: bool) -> HttpEndpoint | None:
        return _endpoint(env, values.get(env), needed_by, timeout) if wanted else None

    source = choice("TELEMETRY_CPU_SOURCE", SourceType.HOST, _SOURCES)
    control = choice("TELEMETRY_CPU_CONTROL", ControlType.HOST, tuple(ControlType))
    mode = choice("TELEMETRY_CPU_CONTROL_MODE", ControlMode.AUTO, tuple(ControlMode))
    source_http = endpoint(
        "TELEMETRY_CPU_HTTP_ENDPOINT", "TELEMETRY_CPU_SOURCE", source is SourceType.HTTP
    )
    control_http = endpoint(
        "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT", "TELEMETRY_CPU_CONTROL", control is ControlType.HTTP
    )
    gpu = choice("TELEMETRY_GPU_CONTROL", ControlType.HOST, tuple(ControlType))
    gpu_http = endpoint(
        "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT", "TELEMETRY_GPU_CONTROL", gpu is ControlType.HTTP
    )
    routing = Routing(
        source=source,
        source_http=source_http,
        control=control,
        control_http=control_http,
        mode=mode,
    )
    return NodeRouting(routing, GpuRouting(gpu, gpu_http, telemetry_http=source_http))


def describe(routing: Routing) -> str:
    """One line for the start-up log: where CPU telemetry and control go by default."""
    parts = [f"cpu source {routing.source.value}"]
    if routing.source_http is not None:
        parts[-1] += f" ({routing.source_http.template})"
    parts.append(f"cpu control {routing.control.value}")
    if routing.control_http is not None:
        parts[-1] += f" ({routing.control_http.template}, mode {routing.mode.value})"
    return ", ".join(parts)
