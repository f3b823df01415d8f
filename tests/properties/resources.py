"""Valid custom resources of both Joulie APIs, as strategies, and their bendable field paths."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

node_names = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True)
caps = st.floats(min_value=1, max_value=2000, allow_nan=False)
percents = st.floats(min_value=0.01, max_value=100, allow_nan=False)
endpoints = st.sampled_from(
    ["http://sim:18080/telemetry/{node}", "https://bmc.example:8443/x", "http://127.0.0.1:9/"]
)

POWER_PATHS = (
    "metadata", "metadata.name", "spec", "spec.nodeName", "spec.profile", "spec.cpu",
    "spec.cpu.packagePowerCapWatts", "spec.cpu.packagePowerCapPctOfMax", "spec.gpu",
    "spec.gpu.powerCap", "spec.gpu.powerCap.scope", "spec.gpu.powerCap.capWattsPerGpu",
    "spec.gpu.powerCap.capPctOfMax", "spec.policy", "spec.policy.name",
    "spec.scheduling", "spec.scheduling.draining",
)  # fmt: skip
"""Every field of a NodePowerProfile or NodeTwin spec the agent reads (and a few it does not)."""

INFORMATIONAL = ("metadata", "metadata.name", "spec.policy.name", "spec.gpu.powerCap.scope",
                 "spec.scheduling", "spec.scheduling.draining")
"""Fields whose value never makes a resource malformed."""


@st.composite
def power_profiles(draw: st.DrawFn) -> dict[str, Any]:
    """A valid NodePowerProfile (or NodeTwin: the same spec) with any mix of optional caps."""
    spec: dict[str, Any] = {
        "nodeName": draw(node_names),
        "profile": draw(st.sampled_from(["performance", "eco"])),
    }
    cpu: dict[str, Any] = {}
    if draw(st.booleans()):
        cpu["packagePowerCapWatts"] = draw(caps | st.integers(1, 2000))
    if draw(st.booleans()):
        cpu["packagePowerCapPctOfMax"] = draw(percents | st.integers(1, 100))
    if cpu or draw(st.booleans()):
        spec["cpu"] = cpu
    if draw(st.booleans()):
        power_cap: dict[str, Any] = {"scope": "perGpu"}
        if draw(st.booleans()):
            power_cap["capWattsPerGpu"] = draw(st.floats(1, 1000) | st.integers(1, 1000))
        if draw(st.booleans()):
            power_cap["capPctOfMax"] = draw(percents)
        spec["gpu"] = {"powerCap": power_cap}
    if draw(st.booleans()):
        # Not empty: a 1.20 API server refuses "" in any string field ("must be of type
        # string: null"), so an empty name is no valid object.
        spec["policy"] = {"name": draw(st.text(min_size=1, max_size=10))}
    return {"metadata": {"name": draw(node_names)}, "spec": spec}


def _http_block(draw: st.DrawFn, modes: list[str] | None) -> dict[str, Any]:
    http: dict[str, Any] = {"endpoint": draw(endpoints)}
    if draw(st.booleans()):
        http["timeoutSeconds"] = draw(st.floats(0.01, 300) | st.integers(1, 300))
    if modes and draw(st.booleans()):
        http["mode"] = draw(st.sampled_from(modes))
    return http


@st.composite
def telemetry_profiles(draw: st.DrawFn) -> dict[str, Any]:
    """A valid TelemetryProfile targeting one node."""
    spec: dict[str, Any] = {"target": {"scope": "node", "nodeName": draw(node_names)}}
    sources: dict[str, Any] = {}
    for key in ("cpu", "gpu"):
        if draw(st.booleans()):
            kind = draw(st.sampled_from(["none", "host", "http", "prometheus"]))
            sources[key] = {"type": kind}
            if kind == "http":
                sources[key]["http"] = _http_block(draw, None)
    controls: dict[str, Any] = {}
    for key, modes in (("cpu", ["auto", "rapl", "dvfs"]), ("gpu", ["auto", "powercap", "clocks"])):
        if draw(st.booleans()):
            kind = draw(st.sampled_from(["none", "host", "http"]))
            controls[key] = {"type": kind}
            if kind == "http":
                controls[key]["http"] = _http_block(draw, modes)
    if sources:
        spec["sources"] = sources
    if controls:
        spec["controls"] = controls
    return {"metadata": {"name": draw(node_names)}, "spec": spec}


def _block_paths(prefix: str) -> list[str]:
    return [prefix, f"{prefix}.type", f"{prefix}.http", f"{prefix}.http.endpoint",
            f"{prefix}.http.timeoutSeconds", f"{prefix}.http.mode"]


TELEMETRY_PATHS = (
    "metadata", "metadata.name", "spec", "spec.target", "spec.target.scope",
    "spec.target.nodeName", "spec.sources", "spec.controls",
    *_block_paths("spec.sources.cpu"), *_block_paths("spec.sources.gpu"),
    *_block_paths("spec.controls.cpu"), *_block_paths("spec.controls.gpu"),
)  # fmt: skip
"""Every field of a TelemetryProfile spec."""
