"""Cluster size: what one agent pod costs as the cluster around it grows (issue 46).

On a real etcd + kube-apiserver (envtest, ``KUBEBUILDER_ASSETS``) with the
chart's CRDs, the cluster grows through the sizes given (100, 2,000, 5,000
nodes by default): each node as real clusters have it (about 14 KB of JSON:
40 images, 5 conditions, about 25 labels, a quarter of them GPU nodes), its
NodeTwin as Joulie's operator writes it and its NodeHardware as an agent
publishes it (about 2 KB each; ``bench/clusterobjects.py``). At each size one
agent pod runs in each mode, HTTP control at the power simulator, the chart's
20 s interval:

- ``daemonset``: ``NODE_NAME`` the first node (one owned node);
- ``pool``: ``POOL_SHARDS`` = N / ``--per-shard`` (50), shard 0 (about 50 owned nodes);
  from 16 shards (800 nodes) such a pod watches its nodes' objects by name, below it
  watches the kinds whole (docs/modes.md), so the pool's RSS slope is also given from
  the first size that watches by name.

For each it measures: ready (spawn to ``/readyz`` 200); the supervisor's RSS
(median of 1 s samples over the idle and churn windows, and its peak, VmHWM);
the pod's PSS (every process of the tree, at the end); its CPU idle; and its
CPU while other nodes' NodeTwin and NodeHardware statuses are rewritten at
N/60 + N/300 per second (the operator's updates and agents' heartbeats; at
most ``--churn-cap``, 100/s), from which the CPU of one such write. The
chart's memory advice (``charts/joulie/values.yaml``: 96 MiB + 3 MiB per
owned node, +10% in a pool) is set beside the pod's PSS.

    .venv/bin/python bench/clustersize.py                      # about 25 minutes
    .venv/bin/python bench/clustersize.py --sizes 50,200 --idle 5 --churn 5 --output -

Goals (issue 46) are printed beside the figures, never asserted: the exit
status is 1 only when the run itself failed. It replaces its section of
BENCHMARKS.md (``--output -``: none).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
from clusterobjects import Churn, Connections, churn_rates, others, seed
from measure import cpu_delta, cpu_seconds, machine, memory, process_tree
from report import replace_section

from agentpool.pool.assignment import owns
from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import ADMIN, EnvtestServer
from agentpool.sim.polling import wait_until
from agentpool.supervisor.narrowing import BY_NAME_MIN_SHARDS

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
CHART_FIXED_MIB = 96
CHART_PER_NODE_MIB = 3
MIN_RATE = 10.0
"""Writes per second below which the CPU of one is not told (the window's noise)."""


@dataclass(frozen=True)
class Options:
    sizes: list[int]
    modes: list[str]
    per_shard: int
    interval: str
    settle_s: float
    idle_s: float
    churn_s: float
    churn_cap: float
    output: str


@dataclass(frozen=True)
class Row:
    nodes: int
    mode: str
    owned: int
    ready_s: float
    rss_mib: float
    rss_peak_mib: float
    pss_mib: float
    cpu_idle_ms: float
    cpu_churn_ms: float
    churn_rate: float
    per_write_us: float

    @property
    def advice_mib(self) -> float:
        """The chart's memory advice for this pod (values.yaml's resources note)."""
        nodes = self.owned if self.mode == "daemonset" else math.ceil(self.owned * 1.1)
        return CHART_FIXED_MIB + CHART_PER_NODE_MIB * nodes


def _rss(pid: int) -> tuple[float, float]:
    """The process's RSS and peak RSS (VmHWM), bytes."""
    rss = peak = 0.0
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = float(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                peak = float(line.split()[1]) * 1024
    return rss, peak


class Sampler:
    """The supervisor's RSS each second and the tree's CPU over a window."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss: list[float] = []

    def window(self, seconds: float) -> float:
        """Sample for ``seconds``; the tree's CPU in ms per second over it."""
        procs = process_tree(self.pid).all()
        before, start = cpu_seconds(procs), time.monotonic()
        deadline = start + seconds
        while (now := time.monotonic()) < deadline:
            self.rss.append(_rss(self.pid)[0])
            time.sleep(min(1.0, deadline - now))
        after, elapsed = cpu_seconds(procs), time.monotonic() - start
        return 1000.0 * cpu_delta(before, after) / elapsed


def run_pod(cluster: SimCluster, conns: Connections, names: list[str], mode: str,
            opts: Options, log: Callable[[str], None]) -> Row:
    n = len(names)
    env = {"RECONCILE_INTERVAL": opts.interval, **cluster.routing_env()}
    if mode == "daemonset":
        env.update({"AGENT_MODE": "daemonset", "NODE_NAME": names[0]})

        def mine(node: str) -> bool:
            return node == names[0]
    else:
        shards = max(1, n // opts.per_shard)
        env.update({"AGENT_MODE": "pool", "POOL_SHARDS": str(shards), "POOL_SHARD_ID": "0"})

        def mine(node: str) -> bool:
            return owns(node, shards, 0)
    owned = {x for x in names if mine(x)}
    started = time.monotonic()
    agent = cluster.start_agent(env, name=f"{mode}-{n}")
    try:
        agent.wait_ready(120)
        ready_s = time.monotonic() - started
        seen: set[str] = set()

        def all_controlled() -> bool:
            seen.update(cluster.controlled_nodes(since=started))
            return owned <= seen

        wait_until(all_controlled, 300, interval=0.5)
        log(f"  {mode}: ready in {ready_s:.2f}s, {len(owned)} nodes controlled; settling")
        time.sleep(opts.settle_s)
        sampler = Sampler(agent.pid)
        idle = sampler.window(opts.idle_s)
        twins, hardware = churn_rates(n, opts.churn_cap)
        rate = twins + hardware
        with Churn(conns, others(names, mine), rate, hardware / rate) as churn:
            busy = sampler.window(opts.churn_s)
        achieved = churn.writes / opts.churn_s
        if churn.failures:
            raise RuntimeError(f"{churn.failures} churn writes failed")
        pss = sum(memory(process_tree(agent.pid).all()).pss)
        peak = _rss(agent.pid)[1]
    finally:
        code = agent.terminate(timeout=60)
    if code != 0:
        raise RuntimeError(f"the agent exited with {code}:\n{agent.logs()[-4000:]}")
    return Row(n, mode, len(owned), ready_s, statistics.median(sampler.rss) / MIB, peak / MIB,
               pss / MIB, idle, busy, achieved, 1000.0 * max(0.0, busy - idle) / achieved)


GOALS = (
    "Goals (issue 46). daemonset: supervisor RSS at 5,000 within 5 MiB of 100; CPU while "
    "other nodes' objects are written at 100/s at most 2 ms/s; ready at 5,000 in at most "
    "1.5 s. pool (50 owned): at most 2 KiB per unowned managed node (RSS slope 100 -> "
    "5,000); at most 50 us of CPU per write about an unowned node; ready at 5,000 in at "
    "most 3 s. The chart's memory advice holds at 5,000 in both modes."
)


def slopes(rows: list[Row], per_shard: int) -> list[str]:
    """The supervisor's RSS per cluster node, smallest to largest size, per mode; for the
    pool also from the first size whose pod watches its nodes' objects by name (16 or more
    shards: a pod of fewer watches the kinds whole, a different cost)."""
    lines = []
    for mode in sorted({r.mode for r in rows}):
        mine = sorted((r for r in rows if r.mode == mode), key=lambda r: r.nodes)
        named = [r for r in mine if r.nodes // per_shard >= BY_NAME_MIN_SHARDS]
        spans = [("", mine)]
        if mode == "pool" and 2 <= len(named) < len(mine):
            spans.append((f" (by name, {BY_NAME_MIN_SHARDS}+ shards)", named))
        for what, span in spans:
            if len(span) >= 2 and span[-1].nodes > span[0].nodes:
                low, high = span[0], span[-1]
                per_node = (high.rss_mib - low.rss_mib) * 1024 / (high.nodes - low.nodes)
                lines.append(f"- {mode}{what}: supervisor RSS {low.rss_mib:.1f} MiB at "
                             f"{low.nodes:,} ({low.owned} owned) -> {high.rss_mib:.1f} MiB at "
                             f"{high.nodes:,} ({high.owned} owned): {per_node:+.2f} KiB per "
                             f"cluster node")
    return lines


def api_floor(server: EnvtestServer, conns: Connections, names: list[str],
              opts: Options) -> dict[str, float]:
    """``bench/apifloor.py`` on this server: a pool pod's lists answered, and a watch
    event received, by a client that does nothing else."""
    script = Path(__file__).with_name("apifloor.py")
    base = [sys.executable, str(script), "--url", server.url, "--token",
            server.users[ADMIN].token, "--ca", str(server.ca_file)]
    floor: dict[str, float] = json.loads(subprocess.run(
        [*base[:2], "list", *base[2:]], capture_output=True, text=True, check=True,
        timeout=900).stdout)
    twins, hardware = churn_rates(len(names) + 1, opts.churn_cap)
    reader = subprocess.Popen([*base[:2], "watch", *base[2:], "--seconds", str(opts.churn_s)],
                              stdout=subprocess.PIPE, text=True)
    assert reader.stdout is not None
    if reader.stdout.readline().strip() != "listed":
        raise RuntimeError("bench/apifloor.py watch failed")
    with Churn(conns, names, twins + hardware, hardware / (twins + hardware)):
        out, _ = reader.communicate(timeout=opts.churn_s + 120)
    floor.update(json.loads(out))
    return floor


def floor_lines(floors: dict[int, dict[str, float]]) -> str:
    lines = ["", "Floors in the same run (`bench/apifloor.py`: a client that only reads, no "
             "agent code):"]
    for size, floor in sorted(floors.items()):
        per_event = 1e6 * floor["cpu_s"] / max(1.0, floor["events"])
        lines.append(f"- {size:,} nodes: the API server answers a pool pod's lists (its "
                     f"selector's Nodes, every NodeTwin and NodeHardware, in parallel, in "
                     f"pages) in {floor['lists_s']:.2f} s, the Nodes alone in "
                     f"{floor['nodes_s']:.2f} s, their names alone (a Table) in "
                     f"{floor['names_s']:.2f} s; receiving one NodeTwin or "
                     f"NodeHardware watch event costs {per_event:.0f} us of CPU "
                     f"({floor['events']:.0f} events)")
    return "\n".join(lines) + "\n"


def cache_cost(cluster: SimCluster) -> dict[str, float]:
    """``bench/cachecost.py`` over this cluster: the supervisor's caches kept whole."""
    script = Path(__file__).with_name("cachecost.py")
    done = subprocess.run([sys.executable, str(script), "--kubeconfig", str(cluster.kubeconfig)],
                          capture_output=True, text=True, check=True, timeout=900)
    result: dict[str, float] = json.loads(done.stdout)
    return result


def elastic_line(caches: dict[int, dict[str, float]]) -> str:
    """The elastic pool's caches per managed node, smallest to largest size."""
    if len(caches) < 2:
        return ""
    low, high = min(caches), max(caches)
    per_node = (caches[high]["rss"] - caches[low]["rss"]) / 1024 / (high - low)
    return (f"\nAn elastic pool pod keeps every managed node's objects (`bench/cachecost.py`: "
            f"the supervisor's informers and cluster view alone): RSS "
            f"{caches[low]['rss'] / MIB:.1f} MiB at {low:,} nodes, "
            f"{caches[high]['rss'] / MIB:.1f} MiB at {high:,}: {per_node:.1f} KiB per managed "
            f"node; synced in {caches[high]['synced_s']:.1f} s at {high:,}.\n")


def per_write(row: Row) -> str:
    """The CPU of one write; below 10 writes a second the difference is the window's noise."""
    return f"{row.per_write_us:.1f} us" if row.churn_rate >= MIN_RATE else "-"


def markdown(rows: list[Row], opts: Options, started: str, commit: str) -> str:
    head = ("| N | mode (owned) | ready | supervisor RSS (peak) | pod PSS | chart advice | "
            "CPU idle | CPU under churn | per write |\n|---|---|---|---|---|---|---|---|---|")
    lines = [
        "### Cluster size (`bench/clustersize.py`)", "",
        f"Run {started} on {machine()['cpu']}, commit `{commit}`: interval {opts.interval}, "
        f"settle {opts.settle_s:.0f} s, idle window {opts.idle_s:.0f} s, churn window "
        f"{opts.churn_s:.0f} s (RSS sampled each second over both).", "", head,
    ]
    for r in rows:
        holds = "holds" if r.pss_mib <= r.advice_mib else "**fails**"
        lines.append(
            f"| {r.nodes:,} | {r.mode} ({r.owned}) | {r.ready_s:.2f} s | {r.rss_mib:.1f} MiB "
            f"({r.rss_peak_mib:.1f}) | {r.pss_mib:.1f} MiB | {r.advice_mib:.0f} MiB: {holds} | "
            f"{r.cpu_idle_ms:.2f} ms/s | {r.cpu_churn_ms:.2f} ms/s at {r.churn_rate:.0f}/s | "
            f"{per_write(r)} |")
    lines += ["", *slopes(rows, opts.per_shard), "", GOALS]
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None) -> Options:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--sizes", default="100,2000,5000", help="cluster sizes, ascending")
    p.add_argument("--modes", default="daemonset,pool", help="daemonset,pool")
    p.add_argument("--per-shard", type=int, default=50, help="pool: nodes per shard (50)")
    p.add_argument("--interval", default="20s", help="RECONCILE_INTERVAL (20s)")
    p.add_argument("--settle", type=float, default=20.0, help="seconds after start-up (20)")
    p.add_argument("--idle", type=float, default=60.0, help="idle window, seconds (60)")
    p.add_argument("--churn", type=float, default=60.0, help="churn window, seconds (60)")
    p.add_argument("--churn-cap", type=float, default=100.0, help="writes per second (100)")
    p.add_argument("--output", default=str(ROOT / "BENCHMARKS.md"), help="'-' for none")
    a = p.parse_args(argv)
    sizes = sorted(int(s) for s in a.sizes.split(","))
    return Options(sizes, a.modes.split(","), a.per_shard, a.interval, a.settle, a.idle,
                   a.churn, a.churn_cap, a.output)


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    rows: list[Row] = []
    caches: dict[int, dict[str, float]] = {}
    floors: dict[int, dict[str, float]] = {}
    names = [f"worker-{i:05d}.dc1.example.com" for i in range(opts.sizes[-1])]
    with tempfile.TemporaryDirectory(prefix="agentpool-clustersize-") as tmp, \
            EnvtestServer(workdir=Path(tmp) / "envtest") as server, \
            SimCluster(workdir=Path(tmp) / "sim", server=server, api="nodetwin") as cluster:
        conns = Connections(server.url, server.users[ADMIN].token, server.ssl_context())
        seeded = 0
        for size in opts.sizes:
            t0 = time.monotonic()
            seed(conns, names[seeded:size])
            log(f"N = {size:,}: seeded {size - seeded} nodes in {time.monotonic() - t0:.0f}s")
            seeded = size
            for mode in opts.modes:
                rows.append(run_pod(cluster, conns, names[:size], mode, opts, log))
                log(f"  {rows[-1]}")
            floors[size] = api_floor(server, conns, names[1:size], opts)
            log(f"  floors: {floors[size]}")
            caches[size] = cache_cost(cluster)
            log(f"  elastic pool caches: {caches[size]}")
    text = markdown(rows, opts, started, _commit()) + floor_lines(floors) + elastic_line(caches)
    print(text)
    if opts.output != "-":
        replace_section(Path(opts.output), "clustersize.py", text)
    return 0


if __name__ == "__main__":
    psutil.Process().nice(0)
    sys.exit(main())
