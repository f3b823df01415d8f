"""When the supervisor loop must next look at each worker: one deadline per worker, in a heap.

A worker needs the loop's attention only at a few moments, all known in
advance: when it would count as hung if it stays silent (its last report plus
its heartbeat limit, or the moment its pipe began refusing messages plus the
same), when a stop it was given runs out (SIGKILL), when its backoff ends
(restart), and when its silence fence is due for renewal (at the tick time
before half of it is spent: :mod:`agentpool.supervisor.fences`). Its
predecessor still running after a lost fork server has no sentinel to wait
on and is looked at every loop period. :func:`next_check` is the earliest of
those; :class:`Deadlines` keeps one entry per worker for it, so a turn visits
only the workers whose moment came, not every worker twice a second.

The heap is lazy: an entry whose time is no longer the worker's
(:attr:`WorkerHandle.check_at`) is skipped when it comes up; a moment can
only be moved earlier by pushing a new entry, so whoever changes a worker's
deadlines calls :meth:`Deadlines.schedule`. A worker looked at has its next
moment computed anew from its state, whatever moved it.
"""

from __future__ import annotations

import heapq
import itertools
import math

from agentpool.supervisor import fences
from agentpool.supervisor.handles import WorkerHandle
from agentpool.supervisor.lifecycle import LIVE, WAITING, WorkerState


def next_check(
    handle: WorkerHandle, elastic: bool, now: float, loop_period_s: float, interval_s: float = 0.0
) -> float:
    """The earliest moment something of this worker falls due (inf: nothing will);
    ``interval_s``, the reconcile interval, aligns fence renewals to the ticks' grid."""
    at = math.inf
    state = handle.state
    if state in LIVE:
        at = handle.last_seen + handle.heartbeat_s
        if handle.outbox_since is not None:
            at = min(at, handle.outbox_since + handle.heartbeat_s)
    if handle.kill_at is not None:
        at = min(at, handle.kill_at)
    if state is WorkerState.LINGERING:
        at = min(at, now + loop_period_s)  # no sentinel: look again
    elif state in WAITING:
        at = min(at, handle.restart_at)
    renewal = fences.renewal_at(handle, elastic, interval_s)
    if renewal is not None:
        at = min(at, renewal)
    return at


class Deadlines:
    """Each worker's next moment, earliest first. Not thread safe: the loop's thread only."""

    def __init__(self, loop_period_s: float) -> None:
        self.loop_period_s = loop_period_s
        self._heap: list[tuple[float, int, WorkerHandle]] = []
        self._order = itertools.count()
        """Ties go first in, first out (and handles are never compared)."""
        self._floor = 0.0
        """No moment before this (one loop period after the last look): a deadline that
        is due at its very instant, but acted on only once it has passed, must not make
        the loop spin."""

    def schedule(self, handle: WorkerHandle, at: float) -> None:
        """Look at ``handle`` at ``at`` at the latest (never before the floor)."""
        at = max(at, self._floor)
        if at < handle.check_at:
            handle.check_at = at
            heapq.heappush(self._heap, (at, next(self._order), handle))

    def next_at(self) -> float:
        """When the earliest worker is due (inf: none is)."""
        heap = self._heap
        while heap and heap[0][0] != heap[0][2].check_at:
            heapq.heappop(heap)  # stale: the worker was rescheduled earlier, or looked at
        return heap[0][0] if heap else math.inf

    def due(self, now: float) -> list[WorkerHandle]:
        """The workers whose moment has come, each once; each is then unscheduled until it
        is scheduled again."""
        self._floor = now + self.loop_period_s
        found: list[WorkerHandle] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, _, handle = heapq.heappop(heap)
            if at == handle.check_at:
                handle.check_at = math.inf
                found.append(handle)
        return found

    def __len__(self) -> int:
        """Entries held, stale ones included (bounded by the reschedulings since the last
        time each came up)."""
        return len(self._heap)
