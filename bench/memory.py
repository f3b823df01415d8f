"""Worker memory over time: the PSS trajectory of every worker and the smaps of one.

Runs the real agent (pool mode, one pod) over N simulated nodes at a short
reconcile interval, with HTTP controls at the power simulator or host
controls over per-node sysfs trees, and samples from the outside, as an
operator would: every worker's PSS at each checkpoint (minutes after all
workers run), and a breakdown of one worker's ``/proc/<pid>/smaps`` by where
its pages come from. Growth between the last two checkpoints is the leak
check. Prints a markdown report; nothing here is a pass/fail test.

    .venv/bin/python bench/memory.py --nodes 100 --at 0,1,5,10 --backend http

The agent runs on the interpreter that runs this script: with a Python 3.12
virtualenv the fork server's heap is made immortal (``--baseline`` measures
the same run without it first).
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from measure import MIB, agent_over_nodes, median, memory, percentile, process_tree

from agentpool.sim import memprobe
from agentpool.sim.agentproc import AgentProcess
from agentpool.worker.forking import immortal

_MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")
"""A mapping's header line in smaps; the lines after it are that mapping's counters."""
CATEGORIES = ("heap", "anonymous", "libpython", "python modules", "metrics files", "other")


@dataclass
class Checkpoint:
    minute: float
    workers: int
    pss_median: float
    pss_p95: float
    pss_total: float
    """Every process of the pod: supervisor, fork server, helpers, workers."""
    smaps: dict[str, tuple[float, float]] = field(default_factory=dict)
    """category -> (PSS, private dirty) of one worker, bytes."""


def category(path: str) -> str:
    if path == "[heap]":
        return "heap"
    if not path or path.startswith("[anon") or path == "[stack]":
        return "anonymous"
    if "libpython" in path or Path(path).name.startswith("python3"):
        return "libpython"
    if path.endswith(".db"):
        return "metrics files"
    if "/site-packages/" in path or "/lib/python3" in path:
        return "python modules"
    return "other"


def smaps_breakdown(pid: int) -> dict[str, tuple[float, float]]:
    """category -> (PSS, Private_Dirty) in bytes, from /proc/<pid>/smaps."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    current = "other"
    with open(f"/proc/{pid}/smaps", encoding="utf-8", errors="replace") as f:
        for line in f:
            if _MAPPING.match(line):
                parts = line.split(None, 5)
                current = category(parts[5].strip() if len(parts) > 5 else "")
                continue
            head, _, rest = line.partition(":")
            if head == "Pss":
                totals[current][0] += float(rest.split()[0]) * 1024
            elif head == "Private_Dirty":
                totals[current][1] += float(rest.split()[0]) * 1024
    return {k: (v[0], v[1]) for k, v in totals.items()}


def sample(agent: AgentProcess, minute: float) -> Checkpoint:
    tree = process_tree(agent.pid)
    workers = memory(tree.workers)
    point = Checkpoint(
        minute, len(tree.workers), median(workers.pss), percentile(workers.pss, 95),
        sum(memory(tree.all()).pss),
    )
    if tree.workers:
        # The median worker, so one odd process does not speak for all.
        ranked = sorted(zip(workers.pss, tree.workers, strict=False), key=lambda p: p[0])
        point.smaps = smaps_breakdown(ranked[len(ranked) // 2][1].pid)
    print(f"  t+{minute:g} min: {point.workers} workers, median PSS "
          f"{point.pss_median / MIB:.2f} MiB, p95 {point.pss_p95 / MIB:.2f}, "
          f"pod total {point.pss_total / MIB:.0f} MiB", file=sys.stderr)
    return point


def stage_report(probe_dir: Path) -> str:
    """Median over workers of what each recorded of itself at each stage (KiB -> MiB)."""
    by_stage: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    order: list[str] = []
    for path in probe_dir.iterdir():
        for line in path.read_text().splitlines():
            stage, _, *pairs = line.split()
            if stage not in order:
                order.append(stage)
            for pair in pairs:
                key, _, value = pair.partition("=")
                by_stage[stage][key].append(float(value))
    lines = ["Inside the workers (median over workers; each reads its own smaps_rollup):", "",
             "| stage | workers | PSS (MiB) | USS (MiB) | anonymous (MiB) | modules |",
             "|---|---|---|---|---|---|"]
    for stage in order:
        cols = by_stage[stage]
        lines.append(
            f"| {stage} | {len(cols['pss'])} | {median(cols['pss']) / 1024:.2f} | "
            f"{median(cols['uss']) / 1024:.2f} | {median(cols['anon']) / 1024:.2f} | "
            f"{median(cols['modules']):.0f} |")
    return "\n".join(lines) + "\n"


def run(
    nodes: int, at: list[float], backend: str, interval: str, extra_env: dict[str, str],
    probe: bool = False, api: str = "profiles",
) -> tuple[list[Checkpoint], str]:
    with tempfile.TemporaryDirectory(prefix="agentpool-probe-") as probe_dir:
        env = {"RECONCILE_INTERVAL": interval, **extra_env}
        if probe:
            env.update(memprobe.env(probe_dir))
        with agent_over_nodes(nodes, backend, env, api) as agent:
            started = time.monotonic()
            points = []
            for minute in at:
                time.sleep(max(0.0, started + minute * 60 - time.monotonic()))
                points.append(sample(agent, minute))
        return points, stage_report(Path(probe_dir)) if probe else ""


def report(points: list[Checkpoint], nodes: int, backend: str, interval: str) -> str:
    lines = [
        f"### Worker memory, N = {nodes}, {backend} controls, RECONCILE_INTERVAL={interval}",
        "",
        "| minutes after all workers ran | workers | median PSS (MiB) | p95 PSS (MiB) "
        "| pod total PSS (MiB) |",
        "|---|---|---|---|---|",
    ]
    for p in points:
        lines.append(f"| {p.minute:g} | {p.workers} | {p.pss_median / MIB:.2f} | "
                     f"{p.pss_p95 / MIB:.2f} | {p.pss_total / MIB:.0f} |")
    if len(points) >= 2:
        growth = (points[-1].pss_median - points[-2].pss_median) / MIB
        lines += ["", f"Median growth between the last two checkpoints: {growth:+.2f} MiB."]
    lines += ["", "One (median) worker's smaps, PSS / private dirty in MiB:", "",
              "| category | " + " | ".join(f"t+{p.minute:g}" for p in points) + " |",
              "|---|" + "---|" * len(points)]
    for name in CATEGORIES:
        cells = [
            f"{p.smaps.get(name, (0.0, 0.0))[0] / MIB:.2f} / "
            f"{p.smaps.get(name, (0.0, 0.0))[1] / MIB:.2f}" for p in points
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--at", default="0,1,5,10",
                        help="checkpoints, minutes after all workers run")
    parser.add_argument("--backend", choices=["http", "host"], default="http")
    parser.add_argument("--interval", default="1s", help="RECONCILE_INTERVAL")
    parser.add_argument("--api", choices=["profiles", "nodetwin"], default="profiles",
                        help="NodePowerProfile + TelemetryProfile, or NodeTwin with "
                             "routing by environment")
    parser.add_argument("--probe", action="store_true",
                        help="workers also record their own memory at each stage")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra environment of the agent (allocator settings...)")
    parser.add_argument("--baseline", action="store_true",
                        help="first the same run with AGENTPOOL_IMMORTALIZE=0, then the "
                             "ratio of the two at each checkpoint")
    args = parser.parse_args(argv)
    at = sorted(float(m) for m in args.at.split(","))
    extra = dict(item.split("=", 1) for item in args.env)
    print(f"Python {platform.python_version()} ({sys.executable}); immortal heap "
          f"{'supported' if immortal.supported() else 'not supported'} here\n")
    baseline: list[Checkpoint] = []
    if args.baseline:
        off = {**extra, "AGENTPOOL_IMMORTALIZE": "0"}
        baseline, stages = run(args.nodes, at, args.backend, args.interval, off, args.probe,
                               args.api)
        print("Baseline, AGENTPOOL_IMMORTALIZE=0:\n")
        print(report(baseline, args.nodes, args.backend, args.interval))
        print(stages)
    points, stages = run(args.nodes, at, args.backend, args.interval, extra, args.probe,
                         args.api)
    print(report(points, args.nodes, args.backend, args.interval))
    if args.api != "profiles":
        print(f"API: {args.api}\n")
    if extra:
        print("Extra environment: " + " ".join(args.env) + "\n")
    print(stages)
    if baseline:
        print("| minutes | median PSS, immortal off (MiB) | on (MiB) | on / off |")
        print("|---|---|---|---|")
        for off_point, on_point in zip(baseline, points, strict=True):
            print(f"| {on_point.minute:g} | {off_point.pss_median / MIB:.2f} | "
                  f"{on_point.pss_median / MIB:.2f} | "
                  f"{on_point.pss_median / off_point.pss_median:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
