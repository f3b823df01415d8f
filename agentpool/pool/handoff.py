"""Release-before-acquire handoff of nodes between pool pods: a pure state machine.

Owns the rules that keep a node from ever being controlled by two pods
(docs/modes.md: elastic pool, handoff), for one pod, with time passed in (tests
drive it with a fake clock; the coordinator with ``time.monotonic``):

1. A pod publishes a claim on a node (an annotation on its own Lease)
   *before* it starts the node, and starts it only after a consistent read
   of all leases, begun after that publish succeeded, shows no other pod
   still claiming it. Two pods racing for one node each publish then read:
   the later reader sees the earlier writer's claim, so at most one starts.
2. A pod losing a node stops its worker (host values restored), and only
   once the stop is confirmed drops the claim from what it publishes.
3. A pod that has not renewed its lease for ``duration - renew_interval``
   (by its own clock, from when it *sent* the last successful renewal)
   stops every worker: it cannot tell a partition from an outage. Other
   pods ignore its claims only after they saw its lease expire plus the
   shutdown grace, by which time its workers are gone.
4. A pod restarted under the same name resumes the claims its lease still
   carries: they count as published, so after its first renewal and one
   read it starts them again without waiting for anyone's release.
5. A pod whose renewal came after its fence (its loop stalled, its lease may
   have expired and its nodes been taken) acts as a newcomer: a claim counts
   as published only from that renewal on, so nothing starts before a read
   begun after it; its workers have stopped on their own meanwhile
   (:mod:`agentpool.pool.fence`).

Nothing here does I/O or reads a clock; the caller reports what happened.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


class NodePhase(enum.StrEnum):
    CLAIMING = "claiming"
    """Wanted; the claim is not yet in a successful lease write."""
    CLAIMED = "claimed"
    """Claim published; waiting for a read, begun after that, showing nobody else claims it."""
    RUNNING = "running"
    """The worker was started; the claim stays published."""
    RELEASING = "releasing"
    """The worker is being stopped; the claim stays published until the stop is confirmed."""


@dataclass(frozen=True)
class Actions:
    """What the caller must do now."""

    start: frozenset[str] = frozenset()
    stop: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.start or self.stop)

    def __or__(self, other: Actions) -> Actions:
        """Both sets of actions (one turn collects them from several steps)."""
        return Actions(start=self.start | other.start, stop=self.stop | other.stop)


class Handoff:
    """The handoff state of one pod's nodes. Not thread safe: one owner drives it."""

    def __init__(
        self,
        duration_s: float,
        renew_interval_s: float,
        resumed: Iterable[str] = (),
    ) -> None:
        if duration_s <= renew_interval_s:
            raise ValueError("the lease duration must exceed the renew interval")
        self.duration_s = duration_s
        self.renew_interval_s = renew_interval_s
        self._phase: dict[str, NodePhase] = {}
        self._published_in: dict[str, int] = {}
        """Per claimed node, the number of the write that published its claim."""
        self._writes = 0
        """Successful lease writes so far."""
        self._renewed_at: float | None = None
        for node in resumed:
            # Already on the lease, but the lease may have expired meanwhile: trust them
            # only after a read that follows this incarnation's first renewal.
            self._phase[node] = NodePhase.CLAIMED
            self._published_in[node] = 1

    # -- questions ---------------------------------------------------------------------

    def phase(self, node: str) -> NodePhase | None:
        return self._phase.get(node)

    def nodes(self, *phases: NodePhase) -> set[str]:
        return {node for node, phase in self._phase.items() if phase in phases}

    def claims(self) -> frozenset[str]:
        """What the next lease write must publish: every node in any phase."""
        return frozenset(self._phase)

    @property
    def writes(self) -> int:
        """Successful lease writes so far; pass it to :meth:`read` for a read begun now."""
        return self._writes

    @property
    def renewed_at(self) -> float | None:
        """When the last successful renewal was sent (None before the first one)."""
        return self._renewed_at

    def fence_at(self) -> float | None:
        """When workers must stop for want of a renewal; None before the first one."""
        if self._renewed_at is None:
            return None
        return self._renewed_at + self.duration_s - self.renew_interval_s

    def fenced(self, now: float) -> bool:
        """True when nothing may run: no renewal yet, or the last one is too old."""
        fence = self.fence_at()
        return fence is None or now >= fence

    def fence(self, now: float) -> Actions:
        """Stop every running worker if the lease went unrenewed too long (call every turn)."""
        if not self.fenced(now):
            return Actions()
        stop = self.nodes(NodePhase.RUNNING)
        for node in stop:
            self._phase[node] = NodePhase.RELEASING
        return Actions(stop=frozenset(stop))

    # -- events ------------------------------------------------------------------------

    def want(self, desired: Iterable[str], now: float) -> Actions:
        """The nodes this pod should control under its current view.

        New ones are claimed; lost ones are dropped if never started, or
        stopped (and kept claimed until :meth:`stopped`). A fenced pod stops
        everything it runs but keeps its claims: they start again after a
        renewal and a read. Call it only with a view from a read (before the
        first one the pod is nobody's member, and resumed claims would go).
        """
        wanted = set(desired)
        fenced = self.fenced(now)
        stop: set[str] = set()
        for node, phase in list(self._phase.items()):
            if phase is NodePhase.RUNNING and (fenced or node not in wanted):
                self._phase[node] = NodePhase.RELEASING
                stop.add(node)
            elif phase in (NodePhase.CLAIMING, NodePhase.CLAIMED) and node not in wanted:
                self._forget(node)
        for node in wanted - set(self._phase):
            self._phase[node] = NodePhase.CLAIMING
        return Actions(stop=frozenset(stop))

    def published(self, sent_at: float, claims: Iterable[str]) -> None:
        """A lease write (renewal) carrying ``claims`` succeeded; it was sent at ``sent_at``."""
        self._writes += 1
        fence = self.fence_at()
        if fence is not None and sent_at >= fence:
            # A lapse (rule 5): what earlier writes published may have expired meanwhile.
            for node in self.nodes(NodePhase.CLAIMED):
                self._phase[node] = NodePhase.CLAIMING
                del self._published_in[node]
        if self._renewed_at is None or sent_at > self._renewed_at:
            self._renewed_at = sent_at
        for node in claims:
            if self._phase.get(node) is NodePhase.CLAIMING:
                self._phase[node] = NodePhase.CLAIMED
                self._published_in[node] = self._writes

    def read(
        self, writes_before: int, blocking: Mapping[str, Iterable[str] | None], now: float
    ) -> Actions:
        """A consistent read of every lease, begun when :attr:`writes` was ``writes_before``.

        ``blocking``: other pods' claims that still count (live, or expired
        within the grace); None for a pod whose claims are unknown, which blocks
        every node. Claimed nodes published before the read began and claimed
        by nobody else start now.
        """
        if self.fenced(now):
            return Actions()
        taken: set[str] = set()
        for claims in blocking.values():
            if claims is None:
                return Actions()
            taken.update(claims)
        start = {
            node for node in self.nodes(NodePhase.CLAIMED)
            if self._published_in[node] <= writes_before and node not in taken
        }
        for node in start:
            self._phase[node] = NodePhase.RUNNING
            del self._published_in[node]
        return Actions(start=frozenset(start))

    def stopped(self, node: str) -> None:
        """The worker of ``node`` is gone (host values restored): its claim can be dropped."""
        if self._phase.get(node) is NodePhase.RELEASING:
            self._forget(node)

    def _forget(self, node: str) -> None:
        self._phase.pop(node, None)
        self._published_in.pop(node, None)
