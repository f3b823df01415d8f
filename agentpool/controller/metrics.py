"""The ``joulie_*`` metrics of one node controller (docs/metrics.md).

Written by worker processes in prometheus_client's multiprocess mode and
merged by the supervisor's ``/metrics``. Gauges use ``livesum``: each node has
exactly one writer, and ``live`` files are deleted when the supervisor marks
the worker dead, so a node that leaves the pod's scope leaves no gauge behind.

A series that stops applying while the worker lives on (the ``policy`` label
after a profile switch, a vanished RAPL zone) cannot be deleted from an mmap
file; it is set to NaN instead, a tombstone that the supervisor's collector
drops (:mod:`agentpool.supervisor.collector`).

Gauges are written through :class:`SeriesCache`: a worker is the only writer
of its node's series, so a value equal to the one it last wrote is already
in the file, and most of a steady tick's gauges are. Skipping those writes
(and the label lookup, lock and pid check of each) is most of what a
steady tick's metrics cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agentpool.results import Backend

TOMBSTONE = math.nan

# Buckets for one reconcile tick: sysfs ticks take ~1 ms, HTTP ones up to their timeout.
RECONCILE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class SeriesCache:
    """Each gauge series this process wrote: its child, and the value last written.

    Only correct while this process is the series' single writer (one worker
    per node); a new worker starts with an empty cache and writes everything
    once. Not thread safe (one worker, one thread).
    """

    def __init__(self) -> None:
        self._cells: dict[tuple[Any, ...], list[Any]] = {}
        """(family, *labels) -> [child, last value written or None]."""

    def put(self, family: Gauge, labels: tuple[str, ...], value: float) -> None:
        key = (family, *labels)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = [family.labels(*labels), None]
        last = cell[1]
        # NaN (a tombstone) equals nothing, itself included: compared as "both NaN".
        if last is not None and (last == value or (last != last and value != value)):
            return
        cell[0].set(value)
        cell[1] = value


class NodeMetrics:
    """The metric families, and the label sets this worker has written (to tombstone them)."""

    def __init__(self, node: str, registry: CollectorRegistry | None = None) -> None:
        self.node = node
        self.registry = registry
        """Where the node's other families (:mod:`~agentpool.controller.gpu_metrics`) register
        too."""

        def gauge(name: str, documentation: str, labels: list[str]) -> Gauge:
            return Gauge(
                name, documentation, labels, registry=registry, multiprocess_mode="livesum"
            )

        self._declare_power(gauge)
        self._declare_dvfs(gauge, registry)
        self.reconcile_errors = Counter(
            "joulie_reconcile_errors",
            "Reconciles of the node that failed",
            ["node"],
            registry=registry,
        )
        self.reconcile_seconds = Histogram(
            "agentpool_reconcile_duration_seconds",
            "Duration of one node reconcile tick",
            registry=registry,
            buckets=RECONCILE_BUCKETS,
        )
        self._policies: set[str] = set()
        self._zones: set[str] = set()
        self.series = SeriesCache()
        """Gauge writes go through it; :mod:`~agentpool.controller.gpu_metrics` shares it."""
        # Touch the counters so the series exist (at 0) from the first scrape.
        self.reconcile_errors.labels(node).inc(0)
        for action in ("throttle_up", "throttle_down"):
            self.dvfs_actions.labels(node, action).inc(0)

    def _declare_power(self, gauge: Callable[[str, str, list[str]], Gauge]) -> None:
        self.backend_mode = gauge(
            "joulie_backend_mode",
            "1 for the active CPU control backend of the node, 0 for the others",
            ["node", "mode"],
        )
        self.policy_cap = gauge(
            "joulie_policy_cap_watts",
            "CPU package power cap being enforced, by the name of its NodeTwin or NodePowerProfile",
            ["node", "policy"],
        )
        self.rapl_energy = gauge(
            "joulie_rapl_energy_uj",
            "Latest raw RAPL energy counter of a package zone",
            ["node", "zone"],
        )
        self.rapl_power = gauge(
            "joulie_rapl_estimated_power_watts",
            "Package zone power estimated from RAPL energy deltas",
            ["node", "zone"],
        )
        self.rapl_total = gauge(
            "joulie_rapl_package_total_power_watts",
            "Sum of the package zones' estimated power",
            ["node"],
        )
        self.cap_pct = gauge(
            "joulie_policy_cap_pct_of_max",
            "CPU cap requested as a percent of the hardware maximum (NodeTwin API)",
            ["node"],
        )
        self.cpu_max = gauge(
            "joulie_cpu_max_power_watts",
            "CPU package maximum a percent cap was resolved against",
            ["node"],
        )
        self.rapl_limit = gauge(
            "joulie_rapl_power_limit_uw",
            "PL1 limit written to a package zone",
            ["node", "zone"],
        )

    def _declare_dvfs(
        self,
        gauge: Callable[[str, str, list[str]], Gauge],
        registry: CollectorRegistry | None,
    ) -> None:
        self.dvfs_observed = gauge(
            "joulie_dvfs_observed_power_watts",
            "Package power the DVFS controller observed",
            ["node"],
        )
        self.dvfs_ema = gauge(
            "joulie_dvfs_ema_power_watts",
            "Exponential moving average of the observed package power",
            ["node"],
        )
        self.dvfs_throttle = gauge(
            "joulie_dvfs_throttle_pct",
            "Current DVFS throttle percentage",
            ["node"],
        )
        self.dvfs_above = gauge(
            "joulie_dvfs_above_trip_count",
            "Consecutive samples above cap + high margin",
            ["node"],
        )
        self.dvfs_below = gauge(
            "joulie_dvfs_below_trip_count",
            "Consecutive samples below cap - low margin",
            ["node"],
        )
        self.dvfs_cap_error = gauge(
            "joulie_dvfs_cap_error_watts",
            "DVFS: filtered package power minus the cap (positive: over the cap)",
            ["node"],
        )
        self.dvfs_actions = Counter(
            "joulie_dvfs_actions",
            "DVFS throttle actions taken",
            ["node", "action"],
            registry=registry,
        )
        self.cpu_cur_freq = gauge(
            "joulie_dvfs_cpu_cur_freq_khz",
            "scaling_cur_freq of a CPU",
            ["node", "cpu"],
        )
        self.cpu_max_freq = gauge(
            "joulie_dvfs_cpu_max_freq_khz",
            "scaling_max_freq of a CPU",
            ["node", "cpu"],
        )

    def set_backend(self, active: Backend) -> None:
        for mode in Backend:
            self.series.put(self.backend_mode, (self.node, mode.value), int(mode is active))

    def set_cap(self, policy: str | None, watts: float | None) -> None:
        """Export the enforced cap under its policy label; None clears every cap series."""
        for old in self._policies - ({policy} if policy and watts is not None else set()):
            self.series.put(self.policy_cap, (self.node, old), TOMBSTONE)
        self._policies = set()
        if policy is not None and watts is not None:
            self.series.put(self.policy_cap, (self.node, policy), watts)
            self._policies = {policy}

    def set_rapl(self, energy_uj: dict[str, int], power_w: dict[str, float]) -> None:
        for zone in self._zones - energy_uj.keys():
            self.series.put(self.rapl_energy, (self.node, zone), TOMBSTONE)
            self.series.put(self.rapl_power, (self.node, zone), TOMBSTONE)
        for zone, value in energy_uj.items():
            self.series.put(self.rapl_energy, (self.node, zone), value)
        for zone, watts in power_w.items():
            self.series.put(self.rapl_power, (self.node, zone), watts)
        self._zones = set(energy_uj)
        if power_w:
            self.series.put(self.rapl_total, (self.node,), sum(power_w.values()))

    def set_dvfs(
        self,
        observed: float | None,
        ema: float | None,
        throttle_pct: int,
        above: int,
        below: int,
    ) -> None:
        if observed is not None:
            self.series.put(self.dvfs_observed, (self.node,), observed)
        if ema is not None:
            self.series.put(self.dvfs_ema, (self.node,), ema)
        self.series.put(self.dvfs_throttle, (self.node,), throttle_pct)
        self.series.put(self.dvfs_above, (self.node,), above)
        self.series.put(self.dvfs_below, (self.node,), below)

    def set_cap_error(self, watts: float | None) -> None:
        """Power minus cap while DVFS enforces a cap; None tombstones it (no stale error)."""
        self.series.put(self.dvfs_cap_error, (self.node,), TOMBSTONE if watts is None else watts)

    def set_percent(self, pct: float | None, maximum_w: float | None) -> None:
        """A percent cap and the maximum it resolved against; None tombstones a series."""
        self.series.put(self.cap_pct, (self.node,), TOMBSTONE if pct is None else pct)
        self.series.put(self.cpu_max, (self.node,), TOMBSTONE if maximum_w is None else maximum_w)

    def set_rapl_limits(self, limits_uw: dict[str, int]) -> None:
        """The PL1 limits written, per zone (what the profile API reports in ``observed``)."""
        for zone, value in limits_uw.items():
            self.series.put(self.rapl_limit, (self.node, zone), value)

    def count_action(self, action: str) -> None:
        self.dvfs_actions.labels(self.node, action).inc()

    def set_cpu_freq(self, cpu: str, cur_khz: int | None, max_khz: int | None) -> None:
        if cur_khz is not None:
            self.series.put(self.cpu_cur_freq, (self.node, cpu), cur_khz)
        if max_khz is not None:
            self.series.put(self.cpu_max_freq, (self.node, cpu), max_khz)

    def count_error(self) -> None:
        self.reconcile_errors.labels(self.node).inc()
