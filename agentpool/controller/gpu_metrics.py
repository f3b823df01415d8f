"""The ``joulie_gpu_*`` metrics of one node controller, per node and device.

Written by worker processes in prometheus_client's multiprocess mode, like
:mod:`agentpool.controller.metrics` (``livesum`` gauges, so a node that leaves the
pod's scope leaves no series behind). A device that leaves while the worker
lives on (a lost GPU, a cap removed) has its series set to the NaN
tombstone, which the supervisor's collector drops.

``device`` is the device index on host backends; over HTTP the endpoint
reports the node's GPUs together, so the series carry ``device="all"``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from agentpool.controller.metrics import TOMBSTONE, SeriesCache
from agentpool.results import GpuBackend

ALL_DEVICES = "all"


class GpuMetrics:
    """The GPU families of one node, and the devices written (to tombstone them)."""

    def __init__(
        self,
        node: str,
        registry: CollectorRegistry | None = None,
        series: SeriesCache | None = None,
    ) -> None:
        self.node = node
        self.series = series or SeriesCache()
        """Where gauge writes go (the node's :class:`NodeMetrics` passes its own)."""

        def gauge(name: str, documentation: str, labels: list[str]) -> Gauge:
            return Gauge(
                name, documentation, labels, registry=registry, multiprocess_mode="livesum"
            )

        self.cap = gauge(
            "joulie_gpu_power_cap_watts",
            "GPU power cap being enforced on a device (watts, read back)",
            ["node", "device"],
        )
        self.power = gauge(
            "joulie_gpu_power_watts",
            "GPU power reading of a device (watts)",
            ["node", "device"],
        )
        self.backend = gauge(
            "joulie_gpu_backend_mode",
            "1 for the active GPU control backend of the node, 0 for the others",
            ["node", "backend"],
        )
        self._devices: set[str] = set()
        self._backend_set = False

    def set_backend(self, active: GpuBackend | None) -> None:
        """Export the active backend; None removes the family (no GPU cap on the node)."""
        if active is None:
            if self._backend_set:
                for mode in GpuBackend:
                    self.series.put(self.backend, (self.node, mode.value), TOMBSTONE)
                self._backend_set = False
            return
        for mode in GpuBackend:
            self.series.put(self.backend, (self.node, mode.value), 1 if mode is active else 0)
        self._backend_set = True

    def set_devices(self, readings: dict[str, tuple[float | None, float | None]]) -> None:
        """(cap, power) per device; devices not named any more are tombstoned."""
        for device in self._devices - readings.keys():
            self.series.put(self.cap, (self.node, device), TOMBSTONE)
            self.series.put(self.power, (self.node, device), TOMBSTONE)
        for device, (cap, power) in readings.items():
            self.series.put(self.cap, (self.node, device), TOMBSTONE if cap is None else cap)
            self.series.put(self.power, (self.node, device), TOMBSTONE if power is None else power)
        self._devices = set(readings)
