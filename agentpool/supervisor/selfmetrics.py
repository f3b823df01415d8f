"""The supervisor's own ``agentpool_*`` series, built from its state at scrape time.

They are not written to the multiprocess files: per-node series such as
restarts must disappear with the node, which mmap files cannot do, and the
supervisor already holds the numbers in memory. The main loop publishes a
:class:`Snapshot` under a lock; the scrape thread reads the latest one.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import psutil
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from agentpool.backoff import CRASH_LOOP_FAILURES
from agentpool.proctitle import name_thread
from agentpool.resources.nodeinputs import NodeApi
from agentpool.supervisor.handles import WorkerHandle
from agentpool.supervisor.lifecycle import REPORTED_STATES, WAITING, WorkerState


@dataclass(frozen=True)
class WorkerView:
    state: WorkerState
    restarts: int
    pid: int | None
    api: NodeApi | None = None
    """The Joulie API the node follows (None: not decided yet)."""
    failures: int = 0
    """Deaths in a row (:attr:`~agentpool.backoff.RestartPolicy.failures`)."""
    crash_looping: bool = False
    next_restart_at: float | None = None
    """Unix time of the next start of a worker in backoff."""
    last_failure: str = ""
    """How its last failure went (died, killed as hung, not started; and why)."""


def worker_view(h: WorkerHandle, api: NodeApi | None, now: float, wall: float) -> WorkerView:
    """How ``/metrics`` shows a worker at ``now`` on the loop's clock, ``wall`` in Unix time."""
    backoff = h.state in WAITING
    # A worker that ticks again is not failing, whatever its count of deaths in a row
    # (reset only after ten healthy minutes, by the restart policy).
    failing = h.state is not WorkerState.RUNNING and h.policy.failures > 0
    return WorkerView(
        h.state, h.policy.restarts, h.pid, api,
        failures=h.policy.failures, crash_looping=failing and h.policy.crash_looping,
        next_restart_at=wall + max(0.0, h.restart_at - now) if backoff else None,
        last_failure=h.last_failure if failing else "",
    )


@dataclass(frozen=True)
class Snapshot:
    workers: dict[str, WorkerView] = field(default_factory=dict)
    shard_id: int = 0
    shards: int = 1
    synced: bool = False
    memory_limit: int | None = None
    """The pod's memory limit in bytes (None: none)."""
    memory_workers: int | None = None
    """Workers that limit holds (:mod:`agentpool.supervisor.memlimit`)."""
    refused: int = 0
    """Owned nodes left without a worker: the limit holds no more."""


class ApiCounters:
    """Thread-safe counts of API requests and watch restarts (hooks of the kube layer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str, str]] = Counter()
        self.watch_restarts: Counter[tuple[str, str]] = Counter()

    def on_request(self, verb: str, resource: str, code: int) -> None:
        with self._lock:
            self.requests[(verb, resource, str(code) if code else "none")] += 1

    def on_watch_restart(self, resource: str, reason: str) -> None:
        with self._lock:
            self.watch_restarts[(resource, reason)] += 1

    def copy(self) -> tuple[dict[tuple[str, str, str], int], dict[tuple[str, str], int]]:
        with self._lock:
            return dict(self.requests), dict(self.watch_restarts)


SAMPLED_PER_S = 20.0
"""Worker processes the sampler reads per second, at most (on average over a period):
at 1,000 workers a worker's RSS and CPU are read every 50 s (a Prometheus scrape
interval or two). Each reading costs ~27 us of CPU on the 2-vCPU VM of BENCHMARKS.md;
at 50 a second that was 0.027 ms per node-tick at a 20 s interval, 5 % of the agent."""


class SupervisorCollector(Collector):
    """Collector for the supervisor's series.

    Worker RSS and CPU come from psutil, read by a sampler thread every
    ``sample_every_s``: a reading visits every worker process, and that time
    must not land on a scrape (or on the main loop). With many workers the
    period grows so that at most :data:`SAMPLED_PER_S` processes are read a
    second: at 1,000 workers and a 20 s reconcile interval, a reading every
    5 s would cost as much CPU as a third of the workers' ticks.
    """

    def __init__(self, api: ApiCounters, sample_every_s: float = 5.0) -> None:
        self._api = api
        self._lock = threading.Lock()
        self._snapshot = Snapshot()
        self._procs: dict[int, psutil.Process] = {}
        self._sample_every_s = sample_every_s
        self._usage: dict[str, tuple[float, float]] = {}
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_loop, name="psutil", daemon=True)
        self.last_scrape_s = 0.0

    def start(self) -> None:
        self._sampler.start()

    def stop(self) -> None:
        self._stop.set()
        if self._sampler.is_alive():
            self._sampler.join(2)

    def _sample_loop(self) -> None:
        name_thread()
        period = self._sample_every_s
        while not self._stop.wait(period):
            with self._lock:
                snap = self._snapshot
            usage = self._worker_usage(snap)
            with self._lock:
                self._usage = usage
            period = max(self._sample_every_s, len(usage) / SAMPLED_PER_S)

    def publish(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._snapshot = snapshot

    def _worker_usage(self, snap: Snapshot) -> dict[str, tuple[float, float]]:
        usage: dict[str, tuple[float, float]] = {}
        live: set[int] = set()
        for node, view in snap.workers.items():
            if view.pid is None or view.state in WAITING:
                continue
            live.add(view.pid)
            try:
                proc = self._procs.get(view.pid) or psutil.Process(view.pid)
                self._procs[view.pid] = proc
                # Two reads (statm, stat) without oneshot(): its caching is for many values
                # of one file, and for two it costs more than it saves.
                rss = float(proc.memory_info().rss)
                times = proc.cpu_times()
                usage[node] = (rss, times.user + times.system)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        for pid in set(self._procs) - live:
            del self._procs[pid]
        return usage

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            snap, usage = self._snapshot, self._usage
        requests, watch_restarts = self._api.copy()
        scrape = GaugeMetricFamily(
            "agentpool_metrics_scrape_duration_seconds", "Duration of the previous /metrics scrape"
        )
        scrape.add_metric([], self.last_scrape_s)
        return [
            *_worker_families(snap),
            *_pool_families(snap),
            *_api_families(requests, watch_restarts),
            *_usage_families(usage),
            scrape,
        ]


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation)
    family.add_metric([], value)
    return family


def _worker_families(snap: Snapshot) -> list[Metric]:
    owned = _gauge("agentpool_owned_nodes", "Nodes this pod controls", len(snap.workers))
    by_state = GaugeMetricFamily(
        "agentpool_workers", "Worker processes by state", labels=["state"]
    )
    counts = Counter(view.state.reported for view in snap.workers.values())
    for state in REPORTED_STATES:
        by_state.add_metric([state], counts.get(state, 0))
    restarts = CounterMetricFamily(
        "agentpool_worker_restarts", "Restarts of a node's worker", labels=["node"]
    )
    # The pid lets an operator (and the demo) find a node's worker process;
    # a worker in backoff has no live process, so it has no series.
    pids = GaugeMetricFamily(
        "agentpool_worker_pid", "Process id of a node's live worker", labels=["node"]
    )
    # Info-style: one series per node, its label the API; count by (api) for the mix.
    apis = GaugeMetricFamily(
        "agentpool_node_api", "1, labelled with the Joulie API a node follows",
        labels=["node", "api"],
    )
    looping = GaugeMetricFamily(
        "agentpool_worker_crash_looping",
        f"1 while a node's worker has died {CRASH_LOOP_FAILURES} or more times in a row",
        labels=["node"],
    )
    failures = GaugeMetricFamily(
        "agentpool_worker_consecutive_failures",
        "Deaths in a row of a node's worker (0 after a healthy stretch)", labels=["node"],
    )
    next_restart = GaugeMetricFamily(
        "agentpool_worker_next_restart_timestamp_seconds",
        "When a node's worker in backoff starts again (Unix time)", labels=["node"],
    )
    # Info-style, only while the node is failing: its label says how (bounded text).
    failure = GaugeMetricFamily(
        "agentpool_worker_last_failure_info",
        "1, labelled with how a failing node's worker last failed", labels=["node", "reason"],
    )
    for node, view in sorted(snap.workers.items()):
        restarts.add_metric([node], view.restarts)
        if view.pid is not None and view.state not in WAITING:
            pids.add_metric([node], view.pid)
        if view.api is not None:
            apis.add_metric([node, view.api.value], 1)
        looping.add_metric([node], 1 if view.crash_looping else 0)
        failures.add_metric([node], view.failures)
        if view.next_restart_at is not None:
            next_restart.add_metric([node], view.next_restart_at)
        if view.failures and view.last_failure:
            failure.add_metric([node, view.last_failure[:200]], 1)
    return [owned, by_state, restarts, pids, apis, looping, failures, next_restart, failure]


def _pool_families(snap: Snapshot) -> list[Metric]:
    families: list[Metric] = [
        _gauge("agentpool_shard_id", "This pod's shard", snap.shard_id),
        _gauge("agentpool_shards", "Total number of shards", snap.shards),
        _gauge("agentpool_cache_synced", "1 once every informer has listed", int(snap.synced)),
        _gauge("agentpool_nodes_refused",
               "Owned nodes without a worker: the pod's memory limit holds no more",
               snap.refused),
    ]
    if snap.memory_limit is not None and snap.memory_workers is not None:
        families += [
            _gauge("agentpool_memory_limit_bytes", "The pod's memory limit (its cgroup's)",
                   snap.memory_limit),
            _gauge("agentpool_memory_limit_workers", "Workers the pod's memory limit holds",
                   snap.memory_workers),
        ]
    return families


def _api_families(
    requests: dict[tuple[str, str, str], int], watch_restarts: dict[tuple[str, str], int]
) -> list[Metric]:
    api = CounterMetricFamily(
        "agentpool_api_requests",
        "Kubernetes API requests by verb, resource and HTTP code",
        labels=["verb", "resource", "code"],
    )
    for (verb, resource, code), count in sorted(requests.items()):
        api.add_metric([verb, resource, code], count)
    watches = CounterMetricFamily(
        "agentpool_watch_restarts",
        "Watch streams restarted, by resource and reason",
        labels=["resource", "reason"],
    )
    for (resource, reason), count in sorted(watch_restarts.items()):
        watches.add_metric([resource, reason], count)
    return [api, watches]


def _usage_families(usage: dict[str, tuple[float, float]]) -> list[Metric]:
    rss = GaugeMetricFamily(
        "agentpool_worker_rss_bytes", "Resident memory of a node's worker", labels=["node"]
    )
    cpu = CounterMetricFamily(
        "agentpool_worker_cpu_seconds", "CPU time of a node's worker", labels=["node"]
    )
    for node, (rss_bytes, cpu_s) in sorted(usage.items()):
        rss.add_metric([node], rss_bytes)
        cpu.add_metric([node], cpu_s)
    return [rss, cpu]
