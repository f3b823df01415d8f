"""The demo's script: things it does to the cluster, and how it knows they worked.

Each :class:`Moment` is performed once, when its time has come and the
cluster has settled (every managed node has its cap), then confirmed from
what the demo observes (:mod:`agentpool.demo.observe`), never from what it
did. The :class:`CapWatcher` reports each node's first applied cap. Both only
return lines of text; printing is the view's business.
"""

from __future__ import annotations

import abc
import enum
import os
import signal
from dataclasses import dataclass

import psutil

from agentpool.demo.observe import NodeRow, Snapshot, cap_applied
from agentpool.demo.scenario import NodePlan, Profile
from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.cluster import SimCluster
from agentpool.sim.objects import MANAGED

# When the moments happen, as fractions of --duration; without one, at fixed
# times early in the run (the demo then keeps going until Ctrl-C).
DURATION_FRACTIONS = (0.3, 0.45, 0.6)
OPEN_ENDED_TIMES_S = (8.0, 12.0, 16.0)


@dataclass
class World:
    """What a moment may touch."""

    cluster: SimCluster
    agents: list[AgentProcess]


class Phase(enum.Enum):
    WAITING = enum.auto()
    """Not performed yet."""
    PERFORMED = enum.auto()
    """Done to the cluster; waiting to see the agent react."""
    CONFIRMED = enum.auto()
    """The reaction was observed."""


class Moment(abc.ABC):
    """One scripted action and its expected outcome."""

    def __init__(self, node: str, due_s: float) -> None:
        self.node = node
        self.due_s = due_s
        self.phase = Phase.WAITING
        self.performed_s: float | None = None

    @abc.abstractmethod
    def perform(self, world: World, row: NodeRow) -> str | None:
        """Act on the cluster; returns what was done, or None to try again later."""

    @abc.abstractmethod
    def confirm(self, row: NodeRow, snap: Snapshot) -> str | None:
        """What was observed if the agent has reacted, else None."""

    TITLE = "{node}"
    """Short name for the end-of-run summary; ``{node}`` is filled in."""

    @property
    def title(self) -> str:
        return self.TITLE.format(node=self.node)


class FlipProfile(Moment):
    """eco -> performance: the worker must enforce the new, higher cap."""

    def __init__(self, node: str, due_s: float) -> None:
        super().__init__(node, due_s)
        self.old_cap = Profile.ECO.cap_watts

    TITLE = "profile flip of {node}"

    def perform(self, world: World, row: NodeRow) -> str | None:
        self.old_cap = row.cap or self.old_cap
        new = Profile.PERFORMANCE
        if world.cluster.nodetwin:
            world.cluster.set_cap(self.node, None, profile=new.value, pct=new.pct)
            return (
                f"profile of {self.node} flipped {row.profile} -> {new.value} "
                f"(cap {Profile.ECO.pct:g}% -> {new.pct:g}% of max, "
                f"{self.old_cap:g} -> {new.cap_watts:g} W)"
            )
        world.cluster.set_cap(self.node, new.cap_watts, profile=new.value)
        return (
            f"profile of {self.node} flipped {row.profile} -> {new.value} "
            f"(cap {self.old_cap:g} -> {new.cap_watts:g} W)"
        )

    def confirm(self, row: NodeRow, snap: Snapshot) -> str | None:
        want = Profile.PERFORMANCE.cap_watts
        if not cap_applied(row) or row.cap != want:
            return None
        if row.backend == "rapl" and row.sim_cap != want:
            return None  # the status is ahead of the simulator: not applied yet
        return (
            f"new cap of {self.node} applied: {want:g} W "
            f"({row.profile}, backend {row.backend}, shard {row.shard})"
        )


class KillWorker(Moment):
    """SIGKILL a node's worker: its supervisor must notice and start a new one."""

    def __init__(self, node: str, due_s: float) -> None:
        super().__init__(node, due_s)
        self.old_pid: int | None = None
        self.old_restarts = 0

    TITLE = "kill and restart of {node}'s worker"

    def perform(self, world: World, row: NodeRow) -> str | None:
        if row.pid is None or row.shard is None:
            return None
        # Only ever signal a process of our own agents: the pid comes from a
        # scrape and may be stale, and pids get reused.
        try:
            family = psutil.Process(world.agents[row.shard].pid).children(recursive=True)
        except psutil.Error:
            return None
        if row.pid not in {proc.pid for proc in family}:
            return None
        self.old_pid, self.old_restarts = row.pid, row.restarts or 0
        os.kill(row.pid, signal.SIGKILL)
        return f"killing worker of {self.node} (pid {row.pid}, shard {row.shard}) with SIGKILL"

    def confirm(self, row: NodeRow, snap: Snapshot) -> str | None:
        if row.pid is None or row.pid == self.old_pid:
            return None
        if (row.restarts or 0) <= self.old_restarts or not cap_applied(row):
            return None
        return (
            f"worker of {self.node} back (pid {row.pid}, restarts {row.restarts}), "
            f"cap {row.cap:g} W enforced again"
        )


class RemoveLabel(Moment):
    """Take a node out of scope: its supervisor must stop its worker."""

    TITLE = "label removal from {node}"

    def perform(self, world: World, row: NodeRow) -> str | None:
        world.cluster.set_labels(self.node, {MANAGED: None})
        return f"removed label {MANAGED} from {self.node}"

    def confirm(self, row: NodeRow, snap: Snapshot) -> str | None:
        # Absent from every shard's worker set; a shard that did not answer
        # could still run it, so it must be seen from all of them.
        if not all(shard.up for shard in snap.shards):
            return None
        if row.pid is not None or row.restarts is not None:
            return None
        return f"worker of {self.node} stopped: no shard runs it any more"


def script(plans: list[NodePlan], duration_s: float | None) -> list[Moment]:
    """Pick three different managed nodes and schedule the moments.

    The flip takes an eco node with working RAPL, so the simulator's cap
    confirms it too; the label removal prefers a node nobody else touched.
    """
    managed = [p for p in plans if p.managed]
    times: tuple[float, ...] = OPEN_ENDED_TIMES_S
    if duration_s is not None:
        times = tuple(duration_s * f for f in DURATION_FRACTIONS)
    flip = next(
        (p for p in managed if p.profile is Profile.ECO and not p.rapl_locked), managed[0]
    )
    kill = next(p for p in managed if p is not flip)
    unlabel = next(p for p in reversed(managed) if p not in (flip, kill))
    return [
        FlipProfile(flip.name, times[0]),
        KillWorker(kill.name, times[1]),
        RemoveLabel(unlabel.name, times[2]),
    ]


class CapWatcher:
    """Reports, once per node, when its desired cap is first enforced."""

    def __init__(self, plans: list[NodePlan]) -> None:
        self._pending = [p.name for p in plans if p.managed]
        self.total = len(self._pending)
        self.all_applied = False

    @property
    def pending(self) -> list[str]:
        return list(self._pending)

    def update(self, snap: Snapshot) -> list[str]:
        lines = []
        for node in list(self._pending):
            row = snap.row(node)
            if cap_applied(row):
                self._pending.remove(node)
                assert row.cap is not None
                lines.append(
                    f"cap applied on {node}: {row.cap:g} W ({row.profile}, "
                    f"backend {row.backend}, shard {row.shard}, worker pid {row.pid})"
                )
        if not self._pending and not self.all_applied:
            self.all_applied = True
            lines.append(f"caps applied on all {self.total} managed nodes")
        return lines


def advance(moments: list[Moment], world: World, snap: Snapshot, settled: bool) -> list[str]:
    """Perform due moments and confirm performed ones; returns what happened."""
    lines = []
    for moment in moments:
        row = snap.row(moment.node)
        if moment.phase is Phase.WAITING and settled and snap.at >= moment.due_s:
            done = moment.perform(world, row)
            if done is not None:
                moment.phase, moment.performed_s = Phase.PERFORMED, snap.at
                lines.append(done)
        elif moment.phase is Phase.PERFORMED:
            seen = moment.confirm(row, snap)
            if seen is not None:
                moment.phase = Phase.CONFIRMED
                assert moment.performed_s is not None
                lines.append(f"{seen}; took {snap.at - moment.performed_s:.1f}s")
    return lines
