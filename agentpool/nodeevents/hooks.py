"""What the supervisor loop calls: node facts in, events out to a writer.

The loop tells :class:`NodeEvents` what it learns (a worker's tick result, a
restart, a stop, a takeover); the tracker keeps only changes, and each event
goes to an :class:`EventWriter` (the Kubernetes recorder, or a list in
tests). Every call is cheap and never blocks: the writer queues.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from agentpool.nodeevents.reasons import NodeEvent
from agentpool.nodeevents.tracker import NodeEventTracker
from agentpool.results import TickResult


class EventWriter(Protocol):
    """Takes events; must never block the caller."""

    def record(self, event: NodeEvent) -> None: ...


class NodeEvents:
    """The supervisor's hooks. Not thread safe: the loop's thread only."""

    def __init__(self, writer: EventWriter, restores: bool) -> None:
        self.writer = writer
        self.restores = restores
        """RESTORE_ON_EXIT and not simulate-only: a stop puts the host values back."""
        self.tracker = NodeEventTracker()

    def _send(self, events: Iterable[NodeEvent]) -> None:
        for event in events:
            self.writer.record(event)

    def tick(self, node: str, result: TickResult) -> None:
        self._send(self.tracker.tick(node, result))

    def restarting(self, node: str, cause: str, how: str) -> None:
        self._send(self.tracker.restarting(node, cause, how))

    def stopped(self, node: str, why: str, problems: tuple[str, ...] | None) -> None:
        self._send(self.tracker.stopped(node, why, problems, self.restores))

    def taken_over(self, node: str, previous: str) -> None:
        self._send(self.tracker.taken_over(node, previous))

    def forget(self, node: str) -> None:
        self.tracker.forget(node)
