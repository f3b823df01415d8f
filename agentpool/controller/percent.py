"""Caps given as a percent of the hardware maximum: find the maximum, or say it is unknown.

Joulie's current operator writes ``cpu.packagePowerCapPctOfMax`` by default.
The maximum it means is a CPU package's maximum, as the watts cap is a
package's limit:

- host control: the package zones' long-term (PL1) constraint
  ``constraint_N_max_power_uw``, the smallest over the zones (every zone
  gets the cap, so it must take it; Joulie's agent takes the same minimum);
  a cap is raised to the largest ``constraint_N_min_power_uw`` where such
  files exist (a limit below it would not be honoured), and no cap
  resolves below :data:`MIN_CAP_W`;
- HTTP control: the maximum the node's NodeHardware reports
  (``maxWattsPerSocket x sockets``), else what its telemetry reports
  (``cpu.packagePowerMaxWatts``).

A maximum is never guessed: when none is known :class:`Maximum` carries the
reason, and the controller falls back to throttling by ``100 - pct`` percent
(Joulie's own fallback), saying so in the status message.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from agentpool.backends import cpu_http, httpclient
from agentpool.backends.sysfs.rapl import PackageZone, stated_limits
from agentpool.errors import HttpBackendError
from agentpool.resources.routing import HttpEndpoint

log = logging.getLogger(__name__)

MIN_CAP_W = 1.0
"""The smallest cap a percent resolves to: the smallest ``packagePowerCapWatts`` the CRD
accepts. A legal but absurd percent (3.5e-320) is a cap of 1 W, never of 0 W."""


@dataclass(frozen=True)
class Maximum:
    """The node's CPU package maximum, where it came from, and the floor of a cap."""

    watts: float | None
    """None: unknown (``why`` says why)."""
    source: str
    """Where it came from, or why it is unknown, for status messages."""
    floor_watts: float = 0.0
    """The largest of the zones' minimum limits (0 when none is known)."""

    def resolve(self, pct: float) -> float | None:
        """``pct`` of the maximum, raised to the floor; None when the maximum is unknown."""
        if self.watts is None:
            return None
        return max(MIN_CAP_W, self.floor_watts, self.watts * pct / 100.0)


def host_maximum(zones: list[PackageZone]) -> Maximum:
    """One package's maximum, from the package zones' PL1 constraint max (and min) files."""
    writable = [z for z in zones if z.limit_file is not None]
    if not writable:
        return Maximum(None, "no RAPL package zone with a PL1 limit")
    ceilings = []
    floor = 0
    for zone in writable:
        minimum, ceiling = stated_limits(zone)
        if ceiling is None:
            return Maximum(None, f"{zone.label} has no readable PL1 max_power_uw")
        ceilings.append(ceiling)
        floor = max(floor, minimum or 0)
    labels = ", ".join(z.label for z in writable)
    source = f"per-package PL1 max of {labels}"
    return Maximum(min(ceilings) / 1_000_000, source, floor / 1_000_000)


def http_maximum(hardware_w: float | None, telemetry_w: float | None) -> Maximum:
    """From the node's NodeHardware, else its telemetry."""
    if hardware_w is not None and hardware_w > 0:
        return Maximum(hardware_w, "NodeHardware cpu.capRange")
    if telemetry_w is not None and telemetry_w > 0:
        return Maximum(telemetry_w, "telemetry cpu.packagePowerMaxWatts")
    return Maximum(None, "neither NodeHardware nor telemetry reports a CPU maximum")


def throttle_for(pct: float) -> int:
    """The throttle that stands in for ``pct`` of an unknown maximum: ``100 - pct``."""
    return max(0, min(100, round(100.0 - pct)))


def describe(pct: float, maximum: Maximum) -> tuple[float | None, str]:
    """The cap in watts (None: maximum unknown) and the status note saying how or why not."""
    cap = maximum.resolve(pct)
    if cap is None:
        return None, f"maximum unknown ({maximum.source})"
    note = f"{pct:g}% of max {maximum.watts:g} W ({maximum.source}) = {cap:.1f} W"
    return round(cap, 3), note


class TelemetryMaximum:
    """The CPU maximum a node's telemetry reports, asked until known (it does not change)."""

    def __init__(self, node: str, agent: str = httpclient.DEFAULT_USER_AGENT) -> None:
        self._node = node
        self._agent = agent
        self._watts: float | None = None

    def from_telemetry(self, endpoint: HttpEndpoint | None) -> float | None:
        if self._watts is None and endpoint is not None:
            try:
                self._watts = cpu_http.read_cpu_maximum(endpoint, self._node, self._agent)
            except HttpBackendError as exc:
                log.debug("node %s: no CPU maximum from telemetry: %s", self._node, exc)
        return self._watts
