"""CPU control on the host: RAPL PL1 through powercap, DVFS through cpufreq when RAPL cannot.

One of the node controller's CPU strategies (:mod:`agentpool.controller.cpu_http`
is the other), chosen once per input by
:class:`~agentpool.controller.node.NodeController` when the node's control is
``host``. It owns the host's backends for the node's sysfs tree; the DVFS
state machine that decides the throttle stays the node controller's, since it
outlives a change of strategy.
"""

from __future__ import annotations

import logging
from typing import Any

from agentpool.backends.sysfs.cpufreq import CpufreqHost
from agentpool.backends.sysfs.rapl import RaplHost
from agentpool.controller import percent
from agentpool.controller.metrics import NodeMetrics
from agentpool.errors import RaplUnavailableError
from agentpool.hardware.labels import Hardware
from agentpool.results import Backend, Result, TickResult

log = logging.getLogger(__name__)

NO_BACKEND = "RAPL unavailable, no cpufreq host control, and no HTTP control backend"


def clamped(cap: float, applied: dict[str, int]) -> str:
    """What the zones' PL1 range made of ``cap`` ('' where every zone took it as asked)."""
    watts = {zone: uw / 1_000_000 for zone, uw in applied.items()}
    off = {zone: w for zone, w in watts.items() if abs(w - cap) > 0.005 * cap}
    if not off:
        return ""
    if len(off) == len(watts) and len(set(off.values())) == 1:
        return f", clamped to {next(iter(off.values())):g} W by the zones' PL1 range"
    return ", clamped by the zones' PL1 range: " + ", ".join(
        f"{zone} {w:g} W" for zone, w in off.items()
    )


class HostCpu:
    """RAPL first, cpufreq throttling as the fallback, on one node's sysfs tree."""

    def __init__(
        self, node: str, rapl: RaplHost, cpufreq: CpufreqHost, metrics: NodeMetrics
    ) -> None:
        self.node = node
        self.rapl = rapl
        self.cpufreq = cpufreq
        self.metrics = metrics

    def plan(self, hardware: Hardware) -> str:
        """What a cap would be written to (simulate-only says it instead)."""
        zones = [z.label for z in self.rapl.zones() if z.limit_file is not None]
        if zones and hardware.rapl_capable:
            return f"RAPL PL1 on {', '.join(zones)}"
        if self.cpufreq.available():
            return f"DVFS on {len(self.cpufreq.policies())} cpufreq policies"
        return "nothing (" + NO_BACKEND + ")"

    def maximum(self, hardware_max_w: float | None) -> percent.Maximum:
        """The package maximum a percent cap means: the zones' PL1 constraint."""
        return percent.host_maximum(self.rapl.zones())

    def cap(
        self, cap: float, hardware: Hardware, throttled: bool, observed: dict[str, Any]
    ) -> TickResult | str:
        """Cap through RAPL: the tick's result, or why DVFS has to take over."""
        if not hardware.rapl_capable:
            reason = f"CPU vendor {hardware.cpu_vendor} has no RAPL"
        else:
            try:
                applied = self.rapl.apply(cap)
            except RaplUnavailableError as exc:
                reason = f"RAPL unavailable: {exc}"
            else:
                self._release(throttled)
                observed["raplLimitsUw"] = applied
                self.metrics.set_rapl_limits(applied)
                zones = ", ".join(applied)
                message = (
                    f"RAPL PL1 {cap:g} W per package on {len(applied)} package zone(s) "
                    f"({zones}){clamped(cap, applied)}"
                )
                return TickResult(Backend.RAPL, Result.APPLIED, message, observed)
        if not self.cpufreq.available():
            return TickResult(Backend.NONE, Result.BLOCKED, NO_BACKEND, observed)
        return reason

    def dvfs_budget(self, cap: float) -> tuple[float, str]:
        """The node's package power DVFS holds under: the cap is per package, and the host's
        reading is the sum over its packages."""
        packages = len(self.rapl.zones())
        if packages <= 1:
            return cap, f"{cap:g} W"
        return cap * packages, f"{cap * packages:g} W ({cap:g} W per package x {packages})"

    def _release(self, throttled: bool) -> None:
        """RAPL took over: give cpufreq its values back if DVFS had throttled it."""
        if throttled or self.cpufreq.holds_originals():
            problems = self.cpufreq.restore()
            if problems:
                log.warning("node %s: could not release DVFS throttle: %s", self.node, problems)
            else:
                log.info("node %s: RAPL took over, cpufreq limits restored", self.node)

    def dvfs_levels(self) -> int | None:
        """Host cpufreq throttles whole policies: the controller moves in their steps."""
        return len(self.cpufreq.policies())

    def throttle_available(self) -> bool:
        return self.cpufreq.available()

    def throttle(self, cap: float, pct: int, observed: dict[str, Any]) -> tuple[Result, str]:
        """Throttle the policies by ``pct``; (result, message of a refusal)."""
        self.cpufreq.apply(pct)
        for reading in self.cpufreq.readings():
            self.metrics.set_cpu_freq(reading.cpu, reading.cur_khz, reading.max_khz)
        return Result.APPLIED, ""

    def restore(self) -> list[str]:
        """Every host value back as found at start (graceful stop, stale desired state);
        the problems."""
        return self.cpufreq.restore() + self.rapl.restore()
