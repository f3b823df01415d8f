"""The controller tests' node: its name and paths, its custom resources, and a harness
that runs one NodeController against a sysfs tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from agentpool.config.options import DvfsControllerKind
from agentpool.config.settings import DvfsSettings, Settings
from agentpool.controller.metrics import NodeMetrics
from agentpool.controller.node import NodeController
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.results import TickResult
from agentpool.sim.objects import node_twin
from agentpool.sim.sysfs.dynamics import LiveSysfs
from tests.support.clock import Clock

NODE = "worker-0"
VENDOR = "feature.node.kubernetes.io/cpu-vendor"
INTEL = {VENDOR: "GenuineIntel", "joulie.io/managed": "true"}
PKG = "devices/virtual/powercap/intel-rapl/intel-rapl:{n}/constraint_0_power_limit_uw"
PL1 = [PKG.format(n=0), PKG.format(n=1)]
SMAX = "devices/system/cpu/cpufreq/policy{i}/scaling_max_freq"
JOULIE = DvfsSettings(controller=DvfsControllerKind.JOULIE)


def npp(cap: Any = 120, profile: str = "eco", node: str = NODE) -> dict[str, Any]:
    """A NodePowerProfile as the API server returns it."""
    spec: dict[str, Any] = {"nodeName": node, "profile": profile, "policy": {"name": "sample"}}
    if cap is not None:
        spec["cpu"] = {"packagePowerCapWatts": cap}
    return {
        "apiVersion": "joulie.io/v1alpha1",
        "kind": "NodePowerProfile",
        "metadata": {"name": f"{node}-{profile}", "resourceVersion": "7"},
        "spec": spec,
    }


def tp(
    control: str | None = None, mode: str = "auto", telemetry: str | None = None
) -> dict[str, Any]:
    """A TelemetryProfile; endpoints given mean type http, otherwise host."""
    spec: dict[str, Any] = {"target": {"scope": "node", "nodeName": NODE}}
    if telemetry is not None:
        spec["sources"] = {
            "cpu": {"type": "http", "http": {"endpoint": telemetry, "timeoutSeconds": 10}}
        }
    if control is not None:
        spec["controls"] = {
            "cpu": {
                "type": "http",
                "http": {"endpoint": control, "timeoutSeconds": 10, "mode": mode},
            }
        }
    return {"kind": "TelemetryProfile", "metadata": {"name": f"{NODE}-tp"}, "spec": spec}


class Harness:
    def __init__(self, tmp: Path, **settings: Any) -> None:
        self.registry = CollectorRegistry()
        self.clock = Clock()
        # These tests script Joulie's controller (controller/dvfs/joulie.py) unless told otherwise.
        settings.setdefault("dvfs", JOULIE)
        self.settings = Settings(node_name=NODE, sysfs_root=str(tmp / "{node}"), **settings)
        self.root = tmp / NODE
        metrics = NodeMetrics(NODE, registry=self.registry)
        self.controller = NodeController(
            self.settings.controller(), NODE, metrics, clock=self.clock
        )

    def set(self, labels: dict[str, str] | None = None, **inputs: Any) -> None:
        self.controller.update(
            NodeInputs(NODE, labels=INTEL if labels is None else labels, **inputs)
        )

    def tick(self, seconds: float = 0.0, live: LiveSysfs | None = None) -> TickResult:
        if seconds:
            if live is not None:
                live.step(seconds)
            self.clock.now += seconds
        return self.controller.tick()

    def metric(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, {"node": NODE, **labels})

    def backend_mode(self) -> dict[str, float | None]:
        return {m: self.metric("joulie_backend_mode", mode=m) for m in ("none", "rapl", "dvfs")}


def twin(cap: float | None = None, pct: float | None = None) -> dict[str, Any]:
    return node_twin(NODE, cap=cap, pct=pct)
