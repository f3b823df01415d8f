"""When a worker ticks: on a grid that every worker of the pod shares.

A node ticks once per reconcile interval, at whole multiples of the interval
on the host's monotonic clock, which is the same clock in every process of the
pod. So a pod's workers tick together, one after another, rather than each at
the moment its process happened to start. That is cheaper. Every worker runs the
same interpreter code on the same shared pages (the fork server's heap), so a
tick that runs right after another worker's finds them in the CPU's caches,
while a tick that wakes an idle CPU fetches them again. Measured on the 2-core
VM of BENCHMARKS.md (docs/history/benchmarks-rounds.md, "Fourth round"): one
controller in one process took 0.33 ms of CPU per tick back to back and 0.93 ms
after sleeping 20 ms; at N = 1,000, CPU per node-tick (supervisor included,
``bench/floor.py``) went from 1.37 to 0.83 ms at a 20 s interval and from 0.68
to 0.56 ms at 1 s, the supervisor's share too, as it reads the workers' reports
in bursts.

The price is a burst of requests once per interval, one per node, towards the
control endpoints, and a ``/metrics`` scrape that lands in the burst is slower.
Each worker still has a node of its own, so a slow endpoint only delays its own
node.

New inputs still make a worker tick at once. The next tick after that one, or
after a tick that started late (a slow endpoint, a busy machine), is the first
grid time at least half an interval later, so ticks stay between half and one
and a half intervals apart and a late worker never catches up in a burst.
"""

from __future__ import annotations

import math

EARLY_MAX_S = 1.0
"""The most a worker that is woken anyway (a fence renewal, a signal) ticks before its time."""


def next_tick(started: float, interval: float) -> float:
    """When to tick next after a tick that started at ``started`` (monotonic seconds): the
    first multiple of ``interval`` more than half an interval after it. An interval of 0
    (the fork server's warm-up rehearsal) ticks again at once."""
    if interval <= 0:
        return started
    return (math.floor((started + interval / 2) / interval) + 1) * interval


def early_s(interval: float) -> float:
    """How long before its tick a worker woken for something else ticks at once instead of
    sleeping again: the tick is due anyway, and a second wake-up costs CPU of its own
    (BENCHMARKS.md). At most a quarter of an interval,
    so the tick after it is still the next grid time (:func:`next_tick`). The supervisor
    sends silence-fence renewals this long before a grid time, so that they wake a worker
    for its tick rather than for themselves (:mod:`agentpool.supervisor.fences`)."""
    return min(EARLY_MAX_S, max(0.0, interval) / 4)
