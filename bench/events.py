"""Node events: how many reach the API server in a steady state and while nodes flap.

Three measurements, each next to its baseline (what one write per change
would cost) from the same run:

1. **Steady state, real agent.** N simulated nodes (pool mode, one pod, HTTP
   controls at the power simulator, ``RECONCILE_INTERVAL=1s`` so a minute is
   60 ticks per node); once every cap is applied and every event written, the
   Event writes (creates and patches the emulator serves) over ``--window``
   seconds, as events per node per hour.
2. **Flapping, real agent.** Every node's cap flips between two values as
   fast as the agent applies them, for ``--flap`` seconds: the changes made,
   the Event writes, and the occurrences still pending (counted, waiting
   for budget).
3. **A thousand flapping nodes, correlator only.** The production
   :class:`~agentpool.nodeevents.correlator.EventCorrelator` driven by a fake
   clock through one hour of 1,000 nodes whose caps flip every 20 s tick.

Prints a markdown report; nothing here is a pass/fail test.

    .venv/bin/python bench/events.py                    # 50 nodes, a minute each
    .venv/bin/python bench/events.py --nodes 10 --window 10 --flap 10
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta

from agentpool.nodeevents.correlator import NODE_BUDGET, POD_BUDGET, EventCorrelator
from agentpool.nodeevents.reasons import NodeEvent, Reason
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until

HOUR = 3600.0


def event_writes(cluster: SimCluster) -> int:
    counts = cluster.emulator.request_counts()
    return counts.get(("create", "events"), 0) + counts.get(("patch", "events"), 0)


def controls(cluster: SimCluster) -> int:
    return len(cluster.power.requests(kind="control"))


def real_agent(nodes: int, window: float, flap: float) -> dict[str, float]:
    out: dict[str, float] = {}
    names = [f"node-{i:04d}" for i in range(nodes)]
    with SimCluster() as cluster:
        for name in names:
            cluster.add_node(name)
        agent = cluster.start_agent({"RECONCILE_INTERVAL": "1s"})
        agent.wait_ready(120)
        wait_until(lambda: all(cluster.status(n).get("result") == "applied" for n in names), 300)
        # Every PowerCapApplied written: the writes stop growing.
        wait_until(lambda: event_writes(cluster) >= nodes, 120)
        out["startup_writes"] = event_writes(cluster)
        before, ticks, began = event_writes(cluster), controls(cluster), time.monotonic()
        time.sleep(window)  # the measurement window itself: ticks go on, events should not
        elapsed = time.monotonic() - began
        out["steady_writes"] = event_writes(cluster) - before
        out["steady_ticks"] = controls(cluster) - ticks
        out["steady_hours"] = elapsed / HOUR
        before, began, changes, cap = event_writes(cluster), time.monotonic(), 0, 200.0
        while time.monotonic() - began < flap:
            for name in names:
                cluster.set_cap(name, cap)
            changes += nodes
            wait_until(lambda c=cap: all(  # type: ignore[misc]
                cluster.power.state(n).cap_watts == c for n in names), 60, interval=0.05)
            cap = 320.0 - cap  # 200 <-> 120
        elapsed = time.monotonic() - began
        out["flap_changes"] = changes
        out["flap_writes"] = event_writes(cluster) - before
        out["flap_hours"] = elapsed / HOUR
        metrics = agent.metrics()
        pending = [line for line in metrics.splitlines()
                   if line.startswith("agentpool_events_pending ")]
        out["flap_pending"] = float(pending[0].split()[1]) if pending else float("nan")
        agent.terminate(timeout=60)
    return out


def thousand_flapping(nodes: int = 1000, tick_s: float = 20.0) -> dict[str, float]:
    correlator = EventCorrelator(now=0.0)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    writes = occurrences = 0
    t = 0.0
    while t < HOUR:
        wall = start + timedelta(seconds=t)
        cap = 200 if int(t / tick_s) % 2 == 0 else 120
        was = 320 - cap
        for n in range(nodes):
            note = f"CPU power cap {cap} W via rapl (was CPU power cap {was} W via rapl)"
            correlator.observe(NodeEvent(f"node-{n}", Reason.POWER_CAP_CHANGED, note), t, wall)
            occurrences += 1
        for write in correlator.writes(t):
            correlator.written(write, write.name or f"e{writes}")
            writes += 1
        t += tick_s
    return {"nodes": nodes, "occurrences": occurrences, "writes": writes,
            "pending": correlator.pending(), "dropped": correlator.dropped}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--window", type=float, default=60.0, help="steady-state seconds")
    parser.add_argument("--flap", type=float, default=60.0, help="flapping seconds")
    args = parser.parse_args(argv)
    real = real_agent(args.nodes, args.window, args.flap)
    big = thousand_flapping()
    n = args.nodes
    steady_rate = real["steady_writes"] / n / real["steady_hours"]
    naive_steady = real["steady_ticks"] / n / real["steady_hours"]
    print(f"### Node events (N = {n}, RECONCILE_INTERVAL=1s; budgets: per node burst "
          f"{NODE_BUDGET.burst} then one per {NODE_BUDGET.refill_s:g} s, per pod burst "
          f"{POD_BUDGET.burst} then one per {POD_BUDGET.refill_s:g} s)\n")
    print("| measurement | Event writes | baseline: one write per tick or change |")
    print("|---|---|---|")
    print(f"| start-up: every node's first cap | {real['startup_writes']:.0f} | {n} |")
    print(f"| steady state, {real['steady_hours'] * HOUR:.0f} s "
          f"({real['steady_ticks'] / n:.0f} ticks per node) | {real['steady_writes']:.0f} "
          f"= **{steady_rate:.1f} per node per hour** | {naive_steady:.0f} per node per hour |")
    flap_s = real["flap_hours"] * HOUR
    print(f"| flapping, {flap_s:.0f} s, {real['flap_changes']:.0f} changes "
          f"| {real['flap_writes']:.0f} ({real['flap_writes'] / n:.1f} per node, "
          f"{real['flap_writes'] / flap_s:.1f} per second: the budgets' bursts); "
          f"{real['flap_pending']:.0f} Events pending their budget "
          f"| {real['flap_changes'] / n:.0f} per node |")
    print(f"| 1,000 nodes flipping every 20 s for an hour (correlator, fake clock) "
          f"| {big['writes']:.0f} = {big['writes'] / big['nodes']:.1f} per node per hour; "
          f"{big['pending']:.0f} pending, {big['dropped']:.0f} dropped "
          f"| {big['occurrences']:.0f} |")
    print(f"\nCeiling of a pod: {POD_BUDGET.burst} + {HOUR / POD_BUDGET.refill_s:.0f} writes "
          f"in its first hour, whatever its node count.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
