"""Routing by environment: Joulie's ``TELEMETRY_*`` variables, validated into a node routing.

Joulie's current operator has no TelemetryProfile CRD: where a node's
telemetry comes from and where its controls go is configured once per agent
by environment variables, the same for every node (``{node}`` in an endpoint
is replaced per node). This module owns reading and validating them. A
value Joulie's agent runs with is read as that agent reads it, and a note
says so (logged once at start); an endpoint no request could reach, or a
pool pod's CPU control left with nothing to control, is a
:class:`ConfigError` naming the variable, so the process exits 2 before
starting anything. Nothing set means host sources and host controls.

A TelemetryProfile that targets a node, where that CRD exists, wins over
these variables for that node, on either API
(:func:`agentpool.resources.parse.cpu_routing`, :func:`~agentpool.resources.parse.gpu_routing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from agentpool.config.joulie import GO_INT
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

TIMEOUT = "TELEMETRY_HTTP_TIMEOUT_SECONDS"


class _Reader:
    """The ``TELEMETRY_*`` values, read as Joulie's agent reads them where it runs with a value
    agentpool would refuse (:mod:`agentpool.config.joulie`): each such reading a note."""

    def __init__(self, values: Mapping[str, str | None]) -> None:
        self.values = values
        self.notes: list[str] = []

    def raw(self, env: str) -> str:
        return (self.values.get(env) or "").strip()

    def choice(self, env: str, default: E, accepted: tuple[E, ...], joulie: str) -> E:
        """A word of ``accepted``; another is ``default`` with a note where Joulie's agent
        reads any word as ``default`` (``joulie`` says so), or an error (``joulie`` empty)."""
        value = self.raw(env).lower()
        if not value:
            return default
        for member in accepted:
            if member.value == value:
                return member
        if not joulie:
            names = ", ".join(m.value for m in accepted)
            raise ConfigError(env, self.values.get(env), f"expected one of {names}")
        self.notes.append(f"{env}={self.values.get(env)!r}: {joulie}; using {default.value}")
        return default

    def endpoint(self, env: str, timeout_s: float) -> HttpEndpoint | None:
        """The URL ``env`` holds; None where it is blank (the caller decides what then)."""
        value = self.raw(env)
        if not value:
            return None
        problem = url_problem(value)
        if problem is not None:
            raise ConfigError(
                env, self.values.get(env),
                f"expected an http:// or https:// URL ('{{node}}' allowed); it {problem}",
            )
        return HttpEndpoint(value, timeout_s)

    def timeout(self) -> float:
        """Whole seconds; Joulie's agent takes 2 for anything else and for 0 or less, and
        uses any larger value, where a request here lasts at most MAX_TIMEOUT_S (as a
        TelemetryProfile's ``timeoutSeconds``)."""
        text = self.raw(TIMEOUT)
        if not text:
            return DEFAULT_HTTP_TIMEOUT_S
        given = self.values.get(TIMEOUT)
        seconds = int(text) if GO_INT.match(text) else None
        if seconds is None or seconds <= 0:
            self.notes.append(
                f"{TIMEOUT}={given!r}: not a timeout of whole seconds; Joulie's agent then "
                f"takes {DEFAULT_HTTP_TIMEOUT_S:g}, and so does agentpool"
            )
            return DEFAULT_HTTP_TIMEOUT_S
        if seconds > MAX_TIMEOUT_S:
            self.notes.append(
                f"{TIMEOUT}={given!r}: Joulie's agent waits that long, but a request here "
                f"lasts at most {MAX_TIMEOUT_S:g} s; using {MAX_TIMEOUT_S:g}"
            )
            return MAX_TIMEOUT_S
        return float(seconds)


def routing_from_env(values: Mapping[str, str | None]) -> NodeRouting:
    """The routing of :func:`read_routing`, its notes aside (a daemonset pod's)."""
    return read_routing(values)[0]


def read_routing(
    values: Mapping[str, str | None], pool: bool = False
) -> tuple[NodeRouting, tuple[str, ...]]:
    """The CPU and GPU routing the ``TELEMETRY_*`` values describe, and what was read
    differently from what they say (one line each, logged at start).

    GPU telemetry rides on the CPU telemetry answer (Joulie's simulator puts
    its ``gpu`` object there), as it does for a TelemetryProfile without an
    HTTP ``sources.gpu``. Where Joulie's agent falls back to the host (an
    unknown word, ``http`` without its endpoint) so does agentpool, except
    for the CPU control of a pool pod (``pool``), which has no host of its
    nodes to control: that stays an error.
    """
    read = _Reader(values)
    timeout = read.timeout()
    source = read.choice(
        "TELEMETRY_CPU_SOURCE", SourceType.HOST, _SOURCES,
        "Joulie's agent reads the host's power for any source but http",
    )
    source_http = None
    if source is SourceType.HTTP:
        source_http = read.endpoint("TELEMETRY_CPU_HTTP_ENDPOINT", timeout)
        if source_http is None:
            read.notes.append(
                "TELEMETRY_CPU_SOURCE='http': no TELEMETRY_CPU_HTTP_ENDPOINT, so Joulie's agent "
                "reads the host's power; using host"
            )
            source = SourceType.HOST
    control = read.choice(
        "TELEMETRY_CPU_CONTROL", ControlType.HOST, tuple(ControlType),
        "" if pool else "Joulie's agent controls the host for any control but http",
    )
    control_http = None
    if control is ControlType.HTTP:
        env = "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT"
        control_http = read.endpoint(env, timeout)
        if control_http is None and pool:
            raise ConfigError(env, values.get(env) or "",
                              "required when TELEMETRY_CPU_CONTROL is http in pool mode: a pool "
                              "pod has no host of its nodes to control instead")
        if control_http is None:
            read.notes.append(
                f"TELEMETRY_CPU_CONTROL='http': no {env}, so Joulie's agent controls the "
                "host; using host"
            )
            control = ControlType.HOST
    mode = read.choice(
        "TELEMETRY_CPU_CONTROL_MODE", ControlMode.AUTO, tuple(ControlMode),
        "Joulie's agent acts only on dvfs",
    )
    gpu = read.choice(
        "TELEMETRY_GPU_CONTROL", ControlType.HOST, tuple(ControlType),
        "Joulie's agent controls the host's GPUs for any control but http",
    )
    gpu_http = None
    if gpu is ControlType.HTTP:
        env = "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT"
        gpu_http = read.endpoint(env, timeout)
        if gpu_http is None:
            blocked = " (a pool pod reports host GPU caps blocked)" if pool else ""
            read.notes.append(
                f"TELEMETRY_GPU_CONTROL='http': no {env}, so Joulie's agent controls the "
                f"host's GPUs; using host{blocked}"
            )
            gpu = ControlType.HOST
    routing = Routing(
        source=source,
        source_http=source_http,
        control=control,
        control_http=control_http,
        mode=mode,
    )
    gpu_routing = GpuRouting(gpu, gpu_http, telemetry_http=source_http)
    return NodeRouting(routing, gpu_routing), tuple(read.notes)


def describe(routing: Routing) -> str:
    """One line for the start-up log: where CPU telemetry and control go by default."""
    parts = [f"cpu source {routing.source.value}"]
    if routing.source_http is not None:
        parts[-1] += f" ({routing.source_http.template})"
    parts.append(f"cpu control {routing.control.value}")
    if routing.control_http is not None:
        parts[-1] += f" ({routing.control_http.template}, mode {routing.mode.value})"
    return ", ".join(parts)
