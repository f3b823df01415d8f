"""Scale benchmark: one ``agentpool`` pod carrying N logical nodes, measured end to end.

For each N (default 100 and 1,000) it starts the simulation kit (API
emulator + power simulator), seeds N managed nodes with their
NodePowerProfiles and TelemetryProfiles (HTTP controls at the simulator),
runs the real ``python -m agentpool`` in pool mode (1 shard) and measures:

1. start-up: until every node's first control request reached the simulator
   (its cap is applied) and ``agentpool_workers{state="running"}`` is N;
2. steady state over >= 3 reconcile intervals: API requests per node per
   tick (counted by the emulator), open watches, CPU of the supervisor and
   every worker (psutil over the agent's process tree), worker PSS/USS;
3. 100 NodePowerProfile changes at once: latency from each change to the
   control request with the new cap arriving at the simulator;
4. 10% of control endpoints hanging: tick-period slip of the other nodes,
   from the intervals between their control requests at the simulator;
5. /metrics: 20 scrapes of the agent, each next to a scrape of the same
   multiprocess directory by the stock ``MultiProcessCollector``;
6. 500 worker SIGKILLs, then the number of files in the multiprocess dir.

It prints one table and replaces its section of BENCHMARKS.md. Goals are reported, never
asserted: the exit status is 1 only when the run itself failed.

    python bench/scale.py                      # N = 100 and 1,000, ~6 minutes
    python bench/scale.py --nodes 20 --interval 2 --scrapes 3 --restarts 20 --output -

This file is the command line; the steps are in bench/scale_steps.py and the
report (rows, goals, BENCHMARKS.md) in bench/scale_report.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psutil
from report import replace_section
from scale_report import markdown, table
from scale_steps import Options, run_one

ROOT = Path(__file__).resolve().parents[1]


def parse(argv: list[str] | None) -> Options:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--nodes", default="100,1000", help="comma-separated N values (100,1000)")
    p.add_argument("--interval", type=float, default=10.0, help="RECONCILE_INTERVAL, seconds (10)")
    p.add_argument("--steady-intervals", type=int, default=3, help="steady-state window (3)")
    p.add_argument("--changes", type=int, default=100, help="profiles changed at once (100)")
    p.add_argument("--hung-fraction", type=float, default=0.10, help="share of hung controls (0.1)")
    p.add_argument("--scrapes", type=int, default=20, help="/metrics scrapes (20)")
    p.add_argument("--restarts", type=int, default=500, help="worker SIGKILLs (500)")
    p.add_argument("--startup-timeout", type=float, default=180.0, help="seconds (180)")
    p.add_argument(
        "--output",
        default=str(ROOT / "BENCHMARKS.md"),
        help="markdown report path, '-' for none (default BENCHMARKS.md at the repo root)",
    )
    a = p.parse_args(argv)
    nodes = [int(x) for x in str(a.nodes).split(",") if x.strip()]
    if not nodes or min(nodes) < 1:
        p.error("--nodes needs positive integers")
    if a.steady_intervals < 3:
        p.error("--steady-intervals must be at least 3")
    return Options(
        nodes=nodes,
        interval_s=a.interval,
        steady_intervals=a.steady_intervals,
        changes=a.changes,
        hung_fraction=a.hung_fraction,
        scrapes=max(1, a.scrapes),
        restarts=max(0, a.restarts),
        startup_timeout_s=a.startup_timeout,
        output=None if a.output == "-" else Path(a.output),
    )


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    began = time.monotonic()
    runs = [run_one(n, opts) for n in opts.nodes]
    wall = time.monotonic() - began
    command = "python bench/scale.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(table(runs, opts))
    print(f"\n{len(runs)} runs in {wall:.0f}s on {psutil.cpu_count()} cores")
    if opts.output is not None:
        replace_section(opts.output, "scale.py", markdown(runs, opts, command.strip(), wall))
        print(f"wrote {opts.output}")
    return 1 if any(r.error for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
