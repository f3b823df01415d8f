"""The ``agentpool_events_*`` series: what the Node event recorder wrote, dropped, holds.

Read from the recorder's counters at scrape time (a prometheus_client
collector), like the rest of the supervisor's own series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric


class EventMetrics:
    """A collector over ``counts()`` (the recorder's :meth:`counts`)."""

    def __init__(self, counts: Callable[[], dict[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        counts = self._counts()
        written = CounterMetricFamily(
            "agentpool_events_written", "Node Events written: created, or their count patched",
            labels=["verb"],
        )
        for verb in ("create", "patch"):
            written.add_metric([verb], counts.get(verb, 0))
        yield written
        yield CounterMetricFamily(
            "agentpool_events_failed",
            "Node Event writes that failed (each spent its budget; retried unless refused)",
            value=counts.get("failed", 0),
        )
        yield CounterMetricFamily(
            "agentpool_events_dropped",
            "Node event occurrences never written (refused by the API, or forgotten)",
            value=counts.get("dropped", 0),
        )
        yield GaugeMetricFamily(
            "agentpool_events_pending",
            "Node events waiting for their budget (or a retry) to be written",
            value=counts.get("pending", 0),
        )
