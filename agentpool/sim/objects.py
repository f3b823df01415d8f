"""The Joulie objects a scenario seeds, as the operator writes them: profiles, NodeTwins.

Written from Joulie's documented shapes, never from the agent's code: these
are what the agent is tested against, so they must not agree with its bugs.
"""

from __future__ import annotations

import re
from typing import Any

from agentpool.sim.power.server import PowerSim

MANAGED = "joulie.io/managed"
"""The label that puts a node under management."""
_UNSAFE = re.compile(r"[._/]")


def twin_name(node: str) -> str:
    """The name Joulie's operator gives a node's NodeTwin and NodeHardware
    (``sanitizeNodeObjectName``): lowercased, ``.``, ``_``, ``/`` -> ``-``, ``-`` trimmed."""
    return _UNSAFE.sub("-", node.strip().lower()).strip("-")


def power_profile(
    node: str, cap: float | None, profile: str = "eco", gpu_cap: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``gpu_cap`` is the ``spec.gpu.powerCap`` block (``{"capWattsPerGpu": 250}``)."""
    spec: dict[str, Any] = {"nodeName": node, "profile": profile, "policy": {"name": "sim"}}
    if cap is not None:
        spec["cpu"] = {"packagePowerCapWatts": cap}
    if gpu_cap is not None:
        spec["gpu"] = {"powerCap": gpu_cap}
    return {
        "apiVersion": "joulie.io/v1alpha1",
        "kind": "NodePowerProfile",
        "metadata": {"name": node},
        "spec": spec,
    }


def telemetry_profile(
    node: str,
    sim: PowerSim | None,
    mode: str = "auto",
    timeout_s: float = 2.0,
) -> dict[str, Any]:
    """HTTP source and controls (CPU and GPU) at the power simulator, or host ones when
    ``sim`` is None."""
    if sim is None:
        sources: dict[str, Any] = {"cpu": {"type": "host"}}
        controls: dict[str, Any] = {"cpu": {"type": "host"}}
    else:
        sources = {
            "cpu": {
                "type": "http",
                "http": {"endpoint": sim.telemetry_endpoint, "timeoutSeconds": timeout_s},
            }
        }
        controls = {
            "cpu": {
                "type": "http",
                "http": {
                    "endpoint": sim.control_endpoint,
                    "timeoutSeconds": timeout_s,
                    "mode": mode,
                },
            },
            "gpu": {
                "type": "http",
                "http": {"endpoint": sim.control_endpoint, "timeoutSeconds": timeout_s},
            },
        }
    return {
        "apiVersion": "joulie.io/v1alpha1",
        "kind": "TelemetryProfile",
        "metadata": {"name": node},
        "spec": {
            "target": {"scope": "node", "nodeName": node},
            "sources": sources,
            "controls": controls,
        },
    }


def node_twin(
    node: str, cap: float | None = None, pct: float | None = None, profile: str = "eco"
) -> dict[str, Any]:
    """A NodeTwin as Joulie's operator creates it (named after the node, sanitised)."""
    cpu: dict[str, Any] = {}
    if cap is not None:
        cpu["packagePowerCapWatts"] = cap
    if pct is not None:
        cpu["packagePowerCapPctOfMax"] = pct
    return {
        "apiVersion": "joulie.io/v1alpha1",
        "kind": "NodeTwin",
        "metadata": {"name": twin_name(node)},
        "spec": {
            "nodeName": node,
            "profile": profile,
            "policy": {"name": "sim"},
            "scheduling": {"draining": False},
            "cpu": cpu,
        },
    }


def operator_status(node: str) -> dict[str, Any]:
    """The status fields Joulie's operator writes into a NodeTwin (everything but the
    agent's ``controlStatus.cpu``), with values that differ per node."""
    seed = sum(node.encode()) % 50
    return {
        "schedulableClass": "eco",
        "predictedPowerHeadroomScore": 40.0 + seed,
        "predictedCoolingStressScore": 12.5,
        "predictedPsuStressScore": 0,
        "hardwareDensityScore": 0.75,
        "estimatedPUE": 1.12,
        "lastUpdated": "2026-02-27T00:00:00Z",
        "effectiveCapState": {"cpuPct": 60, "gpuPct": 100},
        "powerMeasurement": {
            "source": "http",
            "measuredNodePowerW": 300.0 + seed,
            "cpuCappedPowerW": 150,
            "nodeTdpW": 250,
            "powerTrendWPerMin": -1.5,
        },
        "controlStatus": {
            "gpu": {
                "backend": "http", "result": "applied", "message": "operator-side gpu",
                "updatedAt": "2026-02-27T00:00:00Z",
            }
        },
    }
