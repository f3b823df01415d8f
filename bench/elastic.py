"""Elastic pool benchmark: N nodes, the pool scaled 2 -> 3 -> 5 -> 2, then a pod SIGKILLed.

Runs the simulation kit (API emulator + power simulator) with N managed
nodes (HTTP controls at the simulator) and real ``agentpool`` pods in lease
mode (``agentpool.sim.poolwatch.PoolDriver``), and prints, for each change,
how long until every node was controlled by exactly the pod the assignment
names (a live worker there and nowhere else, and a request from it at the
simulator), then how long a SIGKILLed pod's nodes stayed uncontrolled. All
along it samples every pod's ``/metrics`` every 100 ms and afterwards checks
the simulator's request log by User-Agent: both counts of instants with a
node controlled by two pods are printed. Goals (30 s per change, no double
control, takeover within the documented bound) are reported, never asserted.

    python bench/elastic.py                  # 200 nodes, about 2 minutes on 2 cores
    python bench/elastic.py --nodes 40 --assignment modulo
"""

from __future__ import annotations

import argparse
import sys
import time

from agentpool.config.options import Membership
from agentpool.config.settings import ElasticSettings
from agentpool.pool.assignment import Assignment
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from agentpool.sim.poolwatch import MetricsSampler, PoolDriver, Timings, request_overlaps
from agentpool.supervisor.elastic import grace_for, takeover_bound_s

GOAL_S = 30.0


def converge(pool: PoolDriver, replicas: int, since: float, limit: float) -> float | None:
    try:
        wait_until(lambda: pool.converged(pool.members(replicas), since), limit, interval=0.25)
    except TimeoutError:
        return None
    return time.monotonic() - since


def scale_steps(pool: PoolDriver, steps: list[int], limit: float) -> list[tuple[str, float | None]]:
    results: list[tuple[str, float | None]] = []
    current = 0
    for replicas in steps:
        since = time.monotonic()
        pool.scale(replicas)
        for ordinal in range(replicas):
            if f"{pool.name}-{ordinal}" not in pool.pods:
                pool.start(ordinal)
        took = converge(pool, replicas, since, limit)
        results.append((f"{current} -> {replicas} pods" if current else f"start {replicas}",
                        took))
        for name in [n for n in pool.pods if n not in pool.members(replicas)]:
            pool.pods.pop(name).terminate()
        current = replicas
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--assignment", choices=[a.value for a in Assignment],
                        default=Assignment.RENDEZVOUS.value)
    parser.add_argument("--limit", type=float, default=90.0, help="give up a step after this")
    args = parser.parse_args(argv)
    timings = Timings()
    nodes = [f"kwok-node-{i}" for i in range(args.nodes)]
    with SimCluster() as cluster:
        for node in nodes:
            cluster.add_node(node)
        pool = PoolDriver(cluster, nodes, timings, Assignment(args.assignment))
        sampler = MetricsSampler(pool.scrapers).start()
        began = time.monotonic()
        try:
            steps = scale_steps(pool, [2, 3, 5, 2], args.limit)
            victim = pool.pods.pop(f"{pool.name}-1")
            victim.kill()
            killed_at = time.monotonic()
            takeover = converge(pool, 1, killed_at, args.limit)
        finally:
            sampler.stop()
            overlaps = request_overlaps(cluster.power.requests(), timings.interval_s * 1.5,
                                        since=began)
            pool.cleanup()
    elastic = ElasticSettings(Membership.LEASE, lease_duration_s=timings.lease_s,
                              renew_s=timings.renew_s)
    bound = takeover_bound_s(elastic, grace_for(timings.shutdown_s))
    print(f"elastic pool, {args.nodes} nodes, {args.assignment}, lease {timings.lease_s:g}s, "
          f"renew {timings.renew_s:g}s, shutdown {timings.shutdown_s:g}s")
    for label, took in steps:
        shown = f"{took:.1f}s" if took is not None else f"not within {args.limit:g}s"
        print(f"  {label:16} every node on its one owner after {shown} (goal {GOAL_S:g}s)")
    shown = f"{takeover:.1f}s" if takeover is not None else f"not within {args.limit:g}s"
    print(f"  SIGKILL of one pod: its nodes controlled again after {shown} "
          f"(documented bound {bound:g}s)")
    print(f"  /metrics samples: {len(sampler.samples)}, "
          f"node-instants with two controllers: {len(sampler.doubles())}")
    print(f"  request log instants (100 ms) with two controllers: {len(overlaps)}")
    failed = any(t is None for _, t in steps) or takeover is None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
