"""Per-tick allocations that survive: what one node controller keeps after thousands of ticks.

Drives a real :class:`NodeController` in this process, the way a worker
does, on a throwaway sysfs tree (host controls) or against an in-process
canned HTTP endpoint (HTTP controls, RAPL blocked so DVFS acts every tick),
with metrics in a private multiprocess directory. After a warm-up it
takes a ``tracemalloc`` snapshot, ticks ``--ticks`` more times, collects
garbage, and prints the net growth and its largest sources. A worker's
memory that grows while this shows no growth is copy-on-write of shared
pages or allocator fragmentation, not objects kept per tick.

    .venv/bin/python bench/tick_allocations.py --backend http --ticks 2000
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import sys
import tempfile
import tracemalloc
from pathlib import Path

from prometheus_client import CollectorRegistry, values

from agentpool.config.settings import ControllerSettings, DvfsSettings
from agentpool.controller.metrics import NodeMetrics
from agentpool.controller.node import NodeController
from agentpool.sim.sysfs.trees import build_nodes, intel_2socket
from agentpool.worker.forking.warmup import canned_server, node_inputs


def measure(backend: str, ticks: int, warm: int, top: int) -> str:
    with tempfile.TemporaryDirectory(prefix="agentpool-ticks-") as tmp, \
            canned_server() as endpoint:
        (Path(tmp) / "metrics").mkdir()
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(Path(tmp) / "metrics")
        values.ValueClass = values.MultiProcessValue(  # type: ignore[no-untyped-call]
            process_identifier=lambda: "bench"
        )
        template = str(Path(tmp) / "sys" / "{node}")
        trees = build_nodes(template, ["bench-node"], intel_2socket)
        settings = ControllerSettings(
            sysfs_root=template, dvfs=dataclasses.replace(DvfsSettings(), cooldown_s=0.0)
        )
        node = "bench-node"
        controller = NodeController(settings, node, NodeMetrics(node, CollectorRegistry()))
        controller.update(node_inputs(node, endpoint if backend == "http" else None, "auto"))
        for _ in range(warm):
            controller.tick()
        gc.collect()
        tracemalloc.start(8)
        before = tracemalloc.take_snapshot()
        for _ in range(ticks):
            controller.tick()
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        controller.restore()
        for tree in trees.values():
            tree.close()
    stats = after.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)]).compare_to(
        before.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)]), "lineno"
    )
    net = sum(s.size_diff for s in stats)
    lines = [f"{backend}: net growth over {ticks} ticks (after {warm}): {net} bytes "
             f"({net / ticks:.1f} bytes per tick)", "", "largest sources (bytes, blocks):"]
    for stat in sorted(stats, key=lambda s: -s.size_diff)[:top]:
        where = f"{stat.traceback[0].filename}:{stat.traceback[0].lineno}"
        lines.append(f"  {stat.size_diff:+8d} {stat.count_diff:+5d}  {where}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["http", "host"], default="http")
    parser.add_argument("--ticks", type=int, default=2000)
    parser.add_argument("--warm", type=int, default=200, help="ticks before the first snapshot")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args(argv)
    print(measure(args.backend, args.ticks, args.warm, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
