"""How many workers the pod's memory limit holds, and the owned nodes it leaves without one.

A worker costs the pod a measured amount of memory, and the supervisor, its fork
server and their caches a fixed amount (BENCHMARKS.md, ``cgroup_memory.py``; the
chart's ``resources.limits.memory`` note is the same sum). Starting more workers than
the limit holds ends with the kernel's OOM killer, again and again, in a pod that
never settles. So the supervisor starts at most that many and tells the others'
story instead: once in the log, in each refused node's status, and in the metrics
(``agentpool_memory_limit_workers``, ``agentpool_nodes_refused``). A node is started
as soon as there is room (another leaves, the pod is given more). No limit (none set,
or no memory cgroup): no refusal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from agentpool.results import Backend, Result, TickResult
from agentpool.supervisor.statuses import StatusRouter

log = logging.getLogger(__name__)

MIB = 1 << 20
KIB = 1 << 10
FIXED_BYTES = 96 * MIB
"""The supervisor, its fork server and their caches with no worker: 60 MiB measured, 68 MiB
at the start-up peak (BENCHMARKS.md, ``cgroup_memory.py``). The caches hold the pod's own
nodes' objects only, whatever the size of the cluster (BENCHMARKS.md, ``clustersize.py``),
except in an elastic pool: :data:`PER_CACHED_NODE_BYTES`."""
PER_WORKER_BYTES = 3 * MIB
"""One worker and the supervisor's share for its node: 1.7 to 1.8 MiB measured five
minutes after start (N = 50 to 500), and workers grow by a few tenths of a MiB over the
first twenty minutes (BENCHMARKS.md, current results: 1.83 MiB PSS at N = 1,000). A pod
that watches its nodes' objects by name (:mod:`agentpool.supervisor.nodefamily`) adds
about 0.25 MiB a node for the two watches, still within."""
PER_CACHED_NODE_BYTES = 24 * KIB
"""What an elastic pool pod's caches hold for each managed node, its own or not: it keeps
every managed node's objects (docs/modes.md), cut down to what it reads. Measured: 18 to
21 KiB a node, Node, NodeTwin and NodeHardware of a real cluster's size, 1,000 nodes
(BENCHMARKS.md, ``clustersize.py``, the elastic line); the rest is room."""


def mib(value: int) -> str:
    """``value`` bytes in MiB, to a tenth (``103.5 MiB``, ``1024 MiB``)."""
    return f"{value / MIB:.1f}".rstrip("0").rstrip(".") + " MiB"


@dataclass(frozen=True)
class MemoryBudget:
    """What the limit holds, from the measured costs above."""

    limit_bytes: int | None
    """The pod's memory limit (its cgroup's); None: none."""
    cached_nodes: int = 0
    """Managed nodes whose objects the caches hold beyond the pod's own (an elastic pool's:
    every managed node); each costs :data:`PER_CACHED_NODE_BYTES`."""

    def fixed_bytes(self) -> int:
        return FIXED_BYTES + self.cached_nodes * PER_CACHED_NODE_BYTES

    def workers(self) -> int | None:
        """Workers the limit holds; None without a limit."""
        if self.limit_bytes is None:
            return None
        return max(0, (self.limit_bytes - self.fixed_bytes()) // PER_WORKER_BYTES)

    def describe(self) -> str:
        """The figure, and how it is made, in words."""
        if self.limit_bytes is None:
            return "no memory limit"
        cached = (f" + {PER_CACHED_NODE_BYTES // KIB} KiB for each of the "
                  f"{self.cached_nodes} managed nodes cached" if self.cached_nodes else "")
        return (f"the memory limit of {mib(self.limit_bytes)} holds {self.workers()} workers "
                f"({mib(FIXED_BYTES)} fixed{cached} + {mib(PER_WORKER_BYTES)} per worker)")


@dataclass
class Refusals:
    """The owned nodes left without a worker because the limit holds no more. Not thread
    safe: the supervisor loop's thread only."""

    budget: MemoryBudget
    statuses: StatusRouter
    refused: list[str] = field(default_factory=list)
    """Sorted; the nodes whose status says they were refused."""

    def admit(self, missing: list[str], running: int) -> list[str]:
        """Of the owned nodes without a worker (sorted), those that may start now, where
        ``running`` workers (any state) exist already; the rest are refused."""
        room = self.budget.workers()
        if room is None:
            return missing
        free = max(0, room - running)
        admitted, refused = missing[:free], missing[free:]
        if refused != self.refused:
            self._changed(refused, set(admitted))
        return admitted

    def _changed(self, refused: list[str], admitted: set[str]) -> None:
        before = set(self.refused)
        if refused:
            shown = ", ".join(refused[:5]) + (", ..." if len(refused) > 5 else "")
            log.error("%s: %d owned nodes get none (%s); raise resources.limits.memory or "
                      "add pool shards", self.budget.describe(), len(refused), shown)
        elif before:
            log.info("every owned node has a worker again (%s)", self.budget.describe())
        message = (f"not started: {self.budget.describe()}, and this pod's other nodes use "
                   "them all; raise resources.limits.memory or add pool shards")
        for node in refused:
            if node not in before:
                self.statuses.offer(node, TickResult(Backend.NONE, Result.ERROR, message))
        for node in before - set(refused) - admitted:
            self.statuses.forget(node)  # left this pod's scope meanwhile: not ours to say
        self.refused = refused
