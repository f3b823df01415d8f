"""What the kernel charges a pod for N workers: the figures behind resources.limits.memory.

Runs the real agent (pool mode, one pod) in a memory cgroup of its own, as a
container runs, over N simulated nodes at a few values of N, with its multiprocess
directory on tmpfs (the chart's in-memory emptyDir, charged to the pod), and reads
the cgroup once every worker has ticked for a while: the usage, the peak since the
start, and what the kernel could not reclaim without killing (the usage less the
file-backed page cache; tmpfs pages stay in). A least-squares line over N gives the
fixed cost and the cost per worker, which ``agentpool/supervisor/memlimit.py`` and
the chart's sizing note take, with a margin. Needs root and a writable cgroup
filesystem; prints a markdown report, asserts nothing.

    .venv-py312/bin/python bench/cgroup_memory.py --nodes 0,50,100,200,200,500 \
        --shards 1,1,1,1,4,1 --interval 1s,1s,1s,1s,1s,20s --output BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from measure import MIB, agent_over_nodes, memory, process_tree
from report import replace_section

from agentpool.pool.assignment import fnv32a
from agentpool.sim.cgroups import MemoryCgroup, available


@dataclass(frozen=True)
class Reading:
    workers: int
    nodes: int
    """Nodes the pod caches (the selector's): its own and, in a sharded pool, the others'."""
    interval: str
    usage: float
    peak: float
    unreclaimable: float
    pss: float
    """Every process of the pod, from smaps (psutil): the same memory seen per process."""


def owned(nodes: int, shards: int) -> int:
    """How many of ``node-0000``... shard 0 of ``shards`` owns (bench/measure.py's names)."""
    return sum(fnv32a(f"node-{i:04d}") % shards == 0 for i in range(nodes)) if shards > 1 \
        else nodes


def measure(nodes: int, backend: str, interval: str, settle_s: float, shards: int) -> Reading:
    metrics = tempfile.mkdtemp(prefix="agentpool-bench-metrics-", dir="/dev/shm")
    env = {"RECONCILE_INTERVAL": interval, "PROMETHEUS_MULTIPROC_DIR": metrics,
           "POOL_SHARDS": str(shards), "POOL_SHARD_ID": "0"}
    workers = owned(nodes, shards)
    try:
        with MemoryCgroup("agentpool-bench") as cgroup, \
                agent_over_nodes(nodes, backend, env, wrap=cgroup.wrap(),
                                 workers=workers) as agent:
            time.sleep(settle_s)
            reading = Reading(workers, nodes, interval, cgroup.usage_bytes(), cgroup.peak_bytes(),
                              cgroup.unreclaimable_bytes(),
                              sum(memory(process_tree(agent.pid).all()).pss))
            agent.terminate(timeout=120)
    finally:
        shutil.rmtree(metrics, ignore_errors=True)
    print(f"  {workers} workers over {nodes} nodes: usage {reading.usage / MIB:.1f} MiB, "
          f"peak {reading.peak / MIB:.1f}, unreclaimable {reading.unreclaimable / MIB:.1f}, "
          f"PSS {reading.pss / MIB:.1f}", file=sys.stderr)
    return reading


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through ``points``."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    return mean_y - slope * mean_x, slope


def _each(text: str, count: int) -> list[str]:
    """A comma-separated option, one value per run (the last one repeated)."""
    values = text.split(",")
    return values + [values[-1]] * (count - len(values))


def report(readings: list[Reading], backend: str, settle_s: float, command: str) -> str:
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    lines = [
        "### Last run",
        "",
        f"    {command}",
        "",
        f"- date: {dt.date.today().isoformat()}; Python {platform.python_version()}; "
        f"{backend} controls; read {settle_s:g} s after every worker ran; load average at "
        f"the end {load} ({os.cpu_count()} CPUs)",
        "",
        "| workers | nodes cached | interval | usage (MiB) | peak (MiB) | unreclaimable (MiB) "
        "| pod PSS (MiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in readings:
        lines.append(f"| {r.workers} | {r.nodes} | {r.interval} | {r.usage / MIB:.1f} | "
                     f"{r.peak / MIB:.1f} | {r.unreclaimable / MIB:.1f} | {r.pss / MIB:.1f} |")
    alone = [r for r in readings if r.workers == r.nodes]
    if len(alone) >= 2:
        lines += ["", "| least squares over the unsharded runs | fixed (MiB) | per worker (MiB) |",
                  "|---|---|---|"]
        columns = {"usage": [r.usage for r in alone], "peak": [r.peak for r in alone],
                   "unreclaimable": [r.unreclaimable for r in alone],
                   "pod PSS": [r.pss for r in alone]}
        for name, values in columns.items():
            fixed, per = fit([(r.nodes, v) for r, v in zip(alone, values, strict=True)])
            lines.append(f"| {name} | {fixed / MIB:.1f} | {per / MIB:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="0,50,100,200", help="N of each run, comma-separated")
    parser.add_argument("--backend", choices=["http", "host"], default="http")
    parser.add_argument("--interval", default="1s",
                        help="RECONCILE_INTERVAL of each run, comma-separated like --nodes")
    parser.add_argument("--shards", default="1",
                        help="POOL_SHARDS of each run, comma-separated like --nodes (the pod is "
                             "shard 0: it caches every node, runs a worker for its own)")
    parser.add_argument("--settle", type=float, default=300.0,
                        help="seconds between every worker running and the reading")
    parser.add_argument("--output", default="-",
                        help="replace this script's section of this file (BENCHMARKS.md); "
                             "- (the default): print only")
    args = parser.parse_args(argv)
    if not available():
        print("needs root and a writable memory cgroup", file=sys.stderr)
        return 2
    nodes = [int(n) for n in args.nodes.split(",")]
    runs = zip(nodes, _each(args.interval, len(nodes)), _each(args.shards, len(nodes)),
               strict=True)
    readings = [measure(n, args.backend, interval, args.settle, int(shards))
                for n, interval, shards in runs]
    command = "python bench/cgroup_memory.py " + " ".join(sys.argv[1:] if argv is None else argv)
    section = report(readings, args.backend, args.settle, command.strip())
    print(section)
    if args.output != "-":
        replace_section(Path(args.output), "cgroup_memory.py", section)
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
