"""Benchmark helpers: the agent over simulated nodes, its process tree, CPU, memory.

The agent under test is a real ``agentpool`` process: a supervisor whose
children are multiprocessing's fork server and resource tracker, and whose
workers are children of the fork server. Everything here reads that tree
from the outside with psutil, as an operator would.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from agentpool.sim.sysfs.trees import build_nodes, intel_2socket
from agentpool.supervisor.forkclient import SERVER_MODULE

MIB = 1024 * 1024


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


@dataclass(frozen=True)
class Tree:
    """The agent's processes, found by walking down from the supervisor's pid."""

    supervisor: psutil.Process
    fork_server: psutil.Process | None
    helpers: list[psutil.Process]
    """Other direct children (the resource tracker)."""
    workers: list[psutil.Process]

    def all(self) -> list[psutil.Process]:
        extra = [self.fork_server] if self.fork_server is not None else []
        return [self.supervisor, *extra, *self.helpers, *self.workers]


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def process_tree(pid: int) -> Tree:
    supervisor = psutil.Process(pid)
    fork_server: psutil.Process | None = None
    helpers: list[psutil.Process] = []
    for child in supervisor.children():
        if SERVER_MODULE in _cmdline(child):
            fork_server = child
        else:
            helpers.append(child)
    workers: list[psutil.Process] = []
    if fork_server is not None:
        for worker in fork_server.children():
            try:
                if worker.status() != psutil.STATUS_ZOMBIE:
                    workers.append(worker)
            except psutil.Error:
                continue
    return Tree(supervisor, fork_server, helpers, workers)


def cpu_seconds(procs: Iterable[psutil.Process]) -> dict[int, float]:
    """CPU seconds (user + system) by pid; processes that vanished are left out.

    A single-threaded process (a worker, the fork server) is read from
    ``/proc/<pid>/schedstat``: its time on a CPU in nanoseconds. psutil's user +
    system times count clock ticks (10 ms), and a few workers' few milliseconds
    over a short window would read as zero. A process with threads (the
    supervisor) is read from psutil, whose times include threads that ended
    (its HTTP server's, one per scrape); its share is hundreds of milliseconds.
    """
    out: dict[int, float] = {}
    for proc in procs:
        try:
            if len(os.listdir(f"/proc/{proc.pid}/task")) == 1:
                with open(f"/proc/{proc.pid}/schedstat", encoding="ascii") as f:
                    out[proc.pid] = int(f.read().split()[0]) / 1e9
                continue
        except (OSError, ValueError, IndexError):
            pass
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        out[proc.pid] = times.user + times.system
    return out


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two readings by processes present in both."""
    return sum(after[pid] - before[pid] for pid in before.keys() & after.keys())


@dataclass(frozen=True)
class Memory:
    pss: list[float]
    uss: list[float]


def memory(procs: Iterable[psutil.Process]) -> Memory:
    """PSS and USS in bytes (``memory_full_info`` reads /proc/<pid>/smaps_rollup)."""
    pss: list[float] = []
    uss: list[float] = []
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except psutil.Error:
            continue
        pss.append(float(info.pss))
        uss.append(float(info.uss))
    return Memory(pss, uss)


def machine() -> dict[str, str]:
    import platform
    import sys

    total = psutil.virtual_memory().total
    return {
        "cores": str(psutil.cpu_count(logical=True)),
        "memory": f"{total / (1024**3):.1f} GiB",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": _cpu_model(),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


QUIET_PROBE_S = 2.0
QUIET_TIMEOUT_S = 120.0


def wait_for_quiet_api(cluster: SimCluster, nodes: int) -> float:
    """Wait (at most QUIET_TIMEOUT_S) until a QUIET_PROBE_S look sees fewer than N/100 (at
    least 5) API requests: past the start-up's writes. The NodeHardware inventory is written
    within a budget (100 at once, then 50 a second), so at N = 1,000 it lasts ~20 s after
    start. Returns the seconds waited."""
    began = time.monotonic()
    quiet = max(5, nodes // 100)
    while time.monotonic() - began < QUIET_TIMEOUT_S:
        cluster.emulator.reset_counters()
        time.sleep(QUIET_PROBE_S)
        if sum(cluster.emulator.request_counts().values()) < quiet:
            break
    return time.monotonic() - began


@contextlib.contextmanager
def agent_over_nodes(
    nodes: int, backend: str, env: Mapping[str, str], api: str = "profiles",
    wrap: list[str] | None = None, workers: int | None = None,
) -> Iterator[AgentProcess]:
    """The real agent (pool mode, one pod) over ``nodes`` simulated nodes, all workers running.

    ``backend``: ``http`` (controls at the power simulator; with the NodeTwin
    API the routing is the agent's environment) or ``host`` (per-node sysfs
    trees under a throwaway directory). ``wrap`` is a command the agent's command line is
    appended to (``SimCluster.start_agent``); ``workers``: how many to wait for when the
    agent's shard owns fewer than ``nodes``. Stopped, and its trees removed, on exit.
    """
    with tempfile.TemporaryDirectory(prefix="agentpool-bench-") as tmp, \
            SimCluster(workdir=tmp, api=api) as cluster:
        names = [f"node-{i:04d}" for i in range(nodes)]
        full_env = dict(env)
        if api == "nodetwin" and backend == "http":
            full_env.update(cluster.routing_env())
        trees = {}
        if backend == "host":
            template = str(Path(tmp) / "sys" / "{node}")
            trees = build_nodes(template, names, intel_2socket)
            full_env["SYSFS_ROOT"] = template
        for name in names:
            cluster.add_node(name, http=backend == "http")
        agent = cluster.start_agent(full_env, wrap=wrap)
        agent.wait_ready(120)
        expected = nodes if workers is None else workers
        wait_until(lambda: len(process_tree(agent.pid).workers) == expected, 300, interval=0.5)
        try:
            yield agent
        finally:
            agent.terminate(timeout=120)
            del trees  # kept alive until here: locked limit files live as long as their tree
