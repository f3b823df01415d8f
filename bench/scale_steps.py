"""The measurement steps of bench/scale.py: start one agent over N nodes, measure it.

Each ``step_*`` takes the running cluster and agent and records its numbers in
:class:`Run.values` under the keys the report's rows read (bench/scale_report.py).
The method is described in bench/scale.py's docstring.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import signal
import sys
import tempfile
import time
import traceback
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from measure import (
    MIB,
    cpu_delta,
    cpu_seconds,
    median,
    memory,
    percentile,
    process_tree,
    wait_for_quiet_api,
)
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from agentpool.sim.agentproc import AgentProcess, worker_pids
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from agentpool.supervisor.collector import FastMultiProcessCollector

RESOURCES = ("nodes", "nodepowerprofiles", "telemetryprofiles")
_RUNNING = re.compile(r'^agentpool_workers\{state="running"\} (\S+)$', re.M)
_RESTARTS = re.compile(r"^agentpool_worker_restarts_total\{[^}]*\} (\S+)$", re.M)


@dataclass(frozen=True)
class Options:
    nodes: list[int]
    interval_s: float
    steady_intervals: int
    changes: int
    hung_fraction: float
    scrapes: int
    restarts: int
    startup_timeout_s: float
    output: Path | None


@dataclass
class Run:
    """What one N measured; ``values`` are keyed by the table's row ids."""

    nodes: int
    values: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- reading the agent ---------------------------------------------------------------------------


def scrape(agent: AgentProcess, timeout: float = 30.0) -> tuple[str, float]:
    started = time.monotonic()
    with urllib.request.urlopen(agent.metrics_url, timeout=timeout) as response:
        body: bytes = response.read()
    return body.decode(), time.monotonic() - started


def running_workers(text: str) -> int:
    match = _RUNNING.search(text)
    return int(float(match.group(1))) if match else 0


def total_restarts(text: str) -> int:
    return int(sum(float(v) for v in _RESTARTS.findall(text)))


def first_controls(
    cluster: SimCluster, since: float, want: Callable[[str, dict[str, object]], bool] | None = None
) -> dict[str, float]:
    """node -> arrival time of its first control request after ``since`` (matching ``want``)."""
    first: dict[str, float] = {}
    for request in cluster.power.requests(kind="control"):
        node = request.node
        if node is None or request.monotonic < since or node in first:
            continue
        body = request.body if isinstance(request.body, dict) else {}
        if want is None or want(node, body):
            first[node] = request.monotonic
    return first


# -- the steps -----------------------------------------------------------------------------------


def step_startup(
    cluster: SimCluster, agent: AgentProcess, run: Run, opts: Options, t0: float
) -> None:
    n = run.nodes

    def caps_applied() -> dict[str, float]:
        if agent.process.poll() is not None:
            raise RuntimeError(f"agent exited with {agent.process.returncode}")
        first = first_controls(cluster, t0)
        return first if len(first) >= n else {}

    first: dict[str, float] = wait_until(caps_applied, opts.startup_timeout_s, interval=0.1)
    caps_s = max(first.values()) - t0

    def all_running() -> float:
        count = running_workers(scrape(agent)[0])
        return time.monotonic() if count >= n else 0.0

    running_at: float = wait_until(all_running, opts.startup_timeout_s, interval=0.1)
    run.values["startup_caps_s"] = caps_s
    run.values["startup_running_s"] = running_at - t0
    run.values["startup_s"] = max(caps_s, running_at - t0)
    log(f"N={n}: caps applied after {caps_s:.1f}s, all running after {running_at - t0:.1f}s")


def step_steady(cluster: SimCluster, agent: AgentProcess, run: Run, opts: Options) -> None:
    n, interval = run.nodes, opts.interval_s
    time.sleep(interval)  # every worker is past its start-up ticks and in its rhythm
    # And the pod past its start-up writes (the NodeHardware inventory, budget-paced).
    run.values["steady_settle_s"] = wait_for_quiet_api(cluster, n)
    run.notes.append(f"N={n}: the steady window began {run.values['steady_settle_s']:.0f} s "
                     "after the first interval, once the start-up's API writes were done")
    tree = process_tree(agent.pid)
    if len(tree.workers) != n:
        run.notes.append(f"N={n}: {len(tree.workers)} worker processes found, expected {n}")
    procs = tree.all()
    cluster.emulator.reset_counters()
    window = opts.steady_intervals * interval
    started = time.monotonic()
    cpu0 = cpu_seconds(procs)
    time.sleep(window)
    cpu1 = cpu_seconds(procs)
    elapsed = time.monotonic() - started
    requests = sum(cluster.emulator.request_counts().values())
    ticks = n * elapsed / interval
    run.values["api_per_node_tick"] = requests / ticks
    run.values["api_per_node_minute"] = requests / n / (elapsed / 60)
    run.values["api_requests"] = requests
    run.values["watches_max"] = max(cluster.emulator.open_watches(r) for r in RESOURCES)
    run.values["watches_total"] = cluster.emulator.open_watches()
    controls = [
        r
        for r in cluster.power.requests(kind="control")
        if started <= r.monotonic <= started + elapsed
    ]
    run.values["ticks_per_node_interval"] = len(controls) / ticks
    sup = cpu_delta({tree.supervisor.pid: cpu0.get(tree.supervisor.pid, 0.0)}, cpu1)
    total = cpu_delta(cpu0, cpu1)
    run.values["cpu_pct"] = 100.0 * total / elapsed
    run.values["cpu_sup_pct"] = 100.0 * sup / elapsed
    run.values["cpu_workers_pct"] = 100.0 * (total - sup) / elapsed
    run.values["steady_window_s"] = elapsed
    workers = memory(tree.workers)
    everything = memory(procs)
    run.values["pss_median_mib"] = median(workers.pss) / MIB
    run.values["pss_p95_mib"] = percentile(workers.pss, 95) / MIB
    run.values["uss_median_mib"] = median(workers.uss) / MIB
    run.values["uss_p95_mib"] = percentile(workers.uss, 95) / MIB
    run.values["pss_total_mib"] = sum(everything.pss) / MIB
    run.values["pss_supervisor_mib"] = memory([tree.supervisor]).pss[0] / MIB
    log(
        f"N={n}: {requests} API requests in {elapsed:.0f}s, CPU {run.values['cpu_pct']:.1f}% "
        f"(supervisor {run.values['cpu_sup_pct']:.1f}%), median PSS "
        f"{run.values['pss_median_mib']:.2f} MiB"
    )


def step_changes(cluster: SimCluster, run: Run, opts: Options) -> None:
    n = run.nodes
    count = max(1, min(opts.changes, n))
    stride = n // count
    targets = {f"node-{i * stride:04d}": 100.0 + (i % 7) for i in range(count)}
    changed_at: dict[str, float] = {}
    for node, cap in targets.items():
        changed_at[node] = time.monotonic()
        cluster.api.patch(
            "nodepowerprofiles", node, {"spec": {"cpu": {"packagePowerCapWatts": cap}}}
        )
    since = min(changed_at.values())

    def arrived() -> dict[str, float]:
        first = first_controls(
            cluster,
            since,
            lambda node, body: (
                node in targets
                and body.get("capWatts") == targets[node]
                and body.get("action") == "rapl.set_power_cap_watts"
            ),
        )
        return first if len(first) >= count else {}

    first: dict[str, float] = wait_until(arrived, max(30.0, 3 * opts.interval_s), interval=0.05)
    latencies = [first[node] - changed_at[node] for node in targets]
    run.values["change_count"] = count
    run.values["change_p50_s"] = percentile(latencies, 50)
    run.values["change_p99_s"] = percentile(latencies, 99)
    log(f"N={n}: {count} profile changes, p50 {percentile(latencies, 50) * 1000:.0f} ms")


def step_hung(cluster: SimCluster, run: Run, opts: Options) -> None:
    n, interval = run.nodes, opts.interval_s
    hung_count = max(1, round(n * opts.hung_fraction))
    stride = n / hung_count
    hung = {f"node-{int(i * stride):04d}" for i in range(hung_count)}
    for node in hung:
        cluster.power.set_fault(node, "hang", endpoint="control")
    try:
        time.sleep(interval)  # every hung node is stuck in (or past) a hung tick
        started = time.monotonic()
        time.sleep(opts.steady_intervals * interval + 0.5)
        ended = time.monotonic()
    finally:
        for node in hung:
            cluster.power.set_fault(node, None)
    arrivals: dict[str, list[float]] = defaultdict(list)
    for request in cluster.power.requests(kind="control"):
        if request.node and started <= request.monotonic <= ended:
            arrivals[request.node].append(request.monotonic)
    intervals: list[float] = []
    hung_ticks = 0
    for node, times in arrivals.items():
        if node in hung:
            hung_ticks += len(times)
            continue
        intervals.extend(b - a for a, b in itertools.pairwise(times))
    if not intervals:
        raise RuntimeError("no healthy node ticked twice during the hung-endpoint window")
    run.values["hung_nodes"] = len(hung)
    run.values["slip_mean_pct"] = 100.0 * (sum(intervals) / len(intervals) / interval - 1.0)
    run.values["slip_p99_pct"] = 100.0 * (percentile(intervals, 99) / interval - 1.0)
    run.values["hung_ticks_per_interval"] = hung_ticks / len(hung) / ((ended - started) / interval)
    log(
        f"N={n}: {len(hung)} hung, healthy tick period slip mean "
        f"{run.values['slip_mean_pct']:+.2f}%, p99 {run.values['slip_p99_pct']:+.2f}%"
    )


def step_scrapes(agent: AgentProcess, run: Run, opts: Options, metrics_dir: str) -> None:
    stock = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(stock, path=metrics_dir)  # type: ignore[no-untyped-call]
    fast = FastMultiProcessCollector(metrics_dir)
    ours: list[float] = []
    theirs: list[float] = []
    in_process: list[float] = []
    for _ in range(opts.scrapes):
        ours.append(scrape(agent)[1])
        started = time.monotonic()
        generate_latest(stock)
        theirs.append(time.monotonic() - started)
        started = time.monotonic()
        fast.render()
        in_process.append(time.monotonic() - started)
    # The agent must serve the same worker series as the stock collector (values move
    # between the two reads, so the series are compared, not the values).
    agent_series = _series_keys(scrape(agent)[0])
    stock_series = _series_keys(generate_latest(stock).decode())
    run.values["series_mismatch"] = len(agent_series ^ stock_series)
    if agent_series != stock_series:
        run.notes.append(
            f"N={run.nodes}: /metrics and the stock collector differ in "
            f"{len(agent_series ^ stock_series)} joulie_* series"
        )
    fast.close()
    run.values["scrape_p50_s"] = percentile(ours, 50)
    run.values["scrape_p99_s"] = percentile(ours, 99)
    run.values["stock_p50_s"] = percentile(theirs, 50)
    run.values["stock_p99_s"] = percentile(theirs, 99)
    run.values["fast_p50_s"] = percentile(in_process, 50)
    run.values["scrape_speedup"] = percentile(theirs, 50) / percentile(ours, 50)
    run.values["scrapes"] = opts.scrapes
    log(
        f"N={run.nodes}: /metrics p50 {percentile(ours, 50) * 1000:.0f} ms, stock "
        f"{percentile(theirs, 50) * 1000:.0f} ms"
    )


def _series_keys(text: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    # A NaN gauge is a tombstone (agentpool.controller.metrics): the agent leaves it out, the stock
    # collector prints it as NaN; neither is a series a user sees.
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        if family.name.startswith("joulie_")
        for sample in family.samples
        if not math.isnan(sample.value)
    }


def _db_files(metrics_dir: str) -> list[str]:
    return [name for name in os.listdir(metrics_dir) if name.endswith(".db")]


def step_restarts(agent: AgentProcess, run: Run, opts: Options, metrics_dir: str) -> None:
    n = run.nodes
    before = _db_files(metrics_dir)
    killed: set[int] = set()
    kills: dict[str, int] = defaultdict(int)
    deadline = time.monotonic() + max(120.0, opts.restarts * 2.0)
    while len(killed) < opts.restarts:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(killed)} of {opts.restarts} workers killed in time")
        pids = worker_pids(scrape(agent)[0])
        live = [(node, pid) for node, pid in pids.items() if pid not in killed]
        # Spread the kills evenly over the nodes (fewest kills first), at most a tenth of the
        # pool per round, so each node's restart backoff stays short.
        live.sort(key=lambda item: kills[item[0]])
        for node, pid in live[: min(opts.restarts - len(killed), max(1, n // 10))]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.add(pid)
            kills[node] += 1
        time.sleep(0.2)

    def recovered() -> bool:
        text = scrape(agent)[0]
        return running_workers(text) >= n and total_restarts(text) >= len(killed)

    wait_until(recovered, 180.0, interval=0.5)
    after = _db_files(metrics_dir)
    # One set of files per node: which of them would a pid-named stock setup keep per dead pid?
    per_set = len(after) / n
    kept_per_dead_pid = sum(1 for name in after if not name.startswith("gauge_live")) / n
    run.values["killed"] = len(killed)
    run.values["kills_per_node_max"] = max(kills.values(), default=0)
    run.values["files_before"] = len(before)
    run.values["files_after"] = len(after)
    run.values["files_per_set"] = per_set
    run.values["stock_files"] = per_set * n + kept_per_dead_pid * len(killed)
    log(f"N={n}: {len(killed)} workers killed; multiprocess files {len(before)} -> {len(after)}")


# -- one N ---------------------------------------------------------------------------------------


def run_one(n: int, opts: Options) -> Run:
    run = Run(n)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"agentpool-bench-{n}-") as tmp:
        metrics_dir = str(Path(tmp, "multiproc"))
        try:
            with SimCluster(workdir=tmp) as cluster:
                for i in range(n):
                    cluster.add_node(f"node-{i:04d}")
                log(f"N={n}: seeded {n} nodes, profiles and telemetry profiles")
                t0 = time.monotonic()
                agent = cluster.start_agent(
                    env={
                        "RECONCILE_INTERVAL": f"{opts.interval_s:g}s",
                        "PROMETHEUS_MULTIPROC_DIR": metrics_dir,
                    }
                )
                try:
                    step_startup(cluster, agent, run, opts, t0)
                    step_steady(cluster, agent, run, opts)
                    step_changes(cluster, run, opts)
                    step_hung(cluster, run, opts)
                    step_scrapes(agent, run, opts, metrics_dir)
                    step_restarts(agent, run, opts, metrics_dir)
                finally:
                    code = agent.terminate(timeout=60)
                    if code != 0 and run.error is None:
                        run.notes.append(f"N={n}: agent exited with {code} on SIGTERM")
        except Exception as exc:
            run.error = f"{type(exc).__name__}: {exc}"
            log(f"N={n}: FAILED: {run.error}\n{traceback.format_exc()}")
            log_files = sorted(Path(tmp).glob("agent-*.log"))
            if log_files:
                tail = log_files[-1].read_text(errors="replace").splitlines()[-30:]
                log("agent log tail:\n" + "\n".join(tail))
    run.seconds = time.monotonic() - began
    return run

