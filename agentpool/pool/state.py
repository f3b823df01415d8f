"""One pod's whole elastic-pool state: membership, assignment and handoff, pure.

Owns the composition the supervisor drives once per loop turn and once per
lease round trip: the results of lease writes and reads go in, the nodes to
start and stop come out, together with what the pod's next lease write must
say and the numbers the metrics show. The I/O that produces those results is
:mod:`agentpool.supervisor.elastic`'s (a thread with the Kubernetes calls); the rules
are :mod:`agentpool.pool.membership` and :mod:`agentpool.pool.handoff`. Time is always
passed in, so the model-checking tests drive it with a fake clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agentpool.pool.assignment import Assignment
from agentpool.pool.handoff import Actions, Handoff, NodePhase
from agentpool.pool.membership import (
    LeaseRecord,
    MemberTracker,
    assignment_members,
    desired_nodes,
    view_digest,
)


@dataclass(frozen=True)
class LeaseWrite:
    """What the pod's next lease write (creation or renewal) carries."""

    claims: frozenset[str]
    view: str


@dataclass(frozen=True)
class PoolNumbers:
    """What the metrics report about this pod's view."""

    members_seen: int
    members: tuple[str, ...]
    view: str
    to_acquire: int
    """Nodes assigned here but not yet started (claiming, or waiting for a release)."""
    to_release: int
    """Nodes being stopped here so that another pod can take them."""
    disagreeing: int
    """Live members whose published view differs from this pod's."""
    fenced: bool


class PoolState:
    """Membership and handoff of one pool pod. Not thread safe: the supervisor loop owns it."""

    def __init__(
        self,
        me: str,
        assignment: Assignment,
        duration_s: float,
        renew_interval_s: float,
        grace_s: float,
        resumed: Iterable[str] = (),
    ) -> None:
        self.me = me
        self.assignment = assignment
        self.tracker = MemberTracker(grace_s=grace_s)
        self.handoff = Handoff(duration_s, renew_interval_s, resumed)
        self.replicas: int | None = None
        """The StatefulSet's ``spec.replicas`` when known."""
        self.members: list[str] = []
        self._nodes: set[str] = set()
        self._has_view = False

    @property
    def view(self) -> str:
        return view_digest(self.members, self.assignment)

    def next_write(self) -> LeaseWrite:
        return LeaseWrite(self.handoff.claims(), self.view)

    def written(self, sent_at: float, write: LeaseWrite) -> None:
        """A lease write carrying ``write`` succeeded; it was sent at ``sent_at``."""
        self.handoff.published(sent_at, write.claims)

    def read(self, writes_before: int, records: Iterable[LeaseRecord], now: float) -> Actions:
        """A consistent read of the pool's leases, begun when ``handoff.writes`` was that."""
        self.tracker.observe(records, now)
        self._has_view = True
        actions = self._reassign(now)
        blocking = self.tracker.claims_of_others(self.me, now)
        return actions | self.handoff.read(writes_before, blocking, now)

    def set_replicas(self, replicas: int | None, now: float) -> Actions:
        self.replicas = replicas
        return self._reassign(now) if self._has_view else Actions()

    def turn(self, nodes: Iterable[str], now: float) -> Actions:
        """Every loop turn: the selected nodes as they are now; fences if renewals stopped."""
        self._nodes = set(nodes)
        actions = self.handoff.fence(now)
        if self._has_view:
            actions = actions | self._reassign(now)
        return actions

    def stopped(self, node: str) -> None:
        self.handoff.stopped(node)

    def _reassign(self, now: float) -> Actions:
        self.members = assignment_members(self.tracker.live(now), self.replicas)
        desired = desired_nodes(self._nodes, self.members, self.me, self.assignment)
        return self.handoff.want(desired, now)

    def numbers(self, now: float) -> PoolNumbers:
        views = self.tracker.views(now)
        mine = self.view
        return PoolNumbers(
            members_seen=len(self.tracker.live(now)),
            members=tuple(self.members),
            view=mine,
            to_acquire=len(self.handoff.nodes(NodePhase.CLAIMING, NodePhase.CLAIMED)),
            to_release=len(self.handoff.nodes(NodePhase.RELEASING)),
            disagreeing=sum(1 for name, v in views.items() if name != self.me and v != mine),
            fenced=self.handoff.fenced(now),
        )
