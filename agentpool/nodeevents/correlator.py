"""When an event may be written, and as what: client-go's event correlation, pure.

Three rules, after client-go's ``EventCorrelator`` (``tools/record``):

- **Deduplication**: an event with the same node, reason and note as one
  already written is not a new Event: it raises that Event's
  ``series.count`` and ``series.lastObservedTime`` (one PATCH).
- **Aggregation**: when a node gets more than :data:`SIMILAR_MAX` events
  of one reason with different notes, none of them :data:`SIMILAR_WINDOW_S`
  after the previous one, the following ones are counted on a single Event whose note starts with
  ``(combined from similar events):`` (events.k8s.io notes are immutable, so
  it keeps the note of the first one combined).
- **Budgets**: every write (a create or a patch) takes a token from its
  node's bucket (client-go's spam filter: burst 25, one token per 5
  minutes) and from the pod's (burst :data:`POD_BURST`, one token per
  :data:`POD_REFILL_S`). Where client-go drops an event over budget, this
  keeps it pending and folds later repeats into it, so the count written
  when a token comes is the true count; nothing is lost but time.

What is remembered is bounded: at most ``max_series`` Events (least recently
seen evicted first, as client-go's LRU of 4096; a pending one evicted is
counted in :attr:`EventCorrelator.dropped`), and per node and reason the
notes of one aggregation window. Time is passed in (monotonic seconds for
budgets and windows, wall time for what the Event says), so tests and the
benchmark drive it with a fake clock. Not thread safe: the recorder holds a
lock around it.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime

from agentpool.nodeevents.reasons import NodeEvent, Reason
from agentpool.tokenbucket import Budget, TokenBucket

SIMILAR_MAX = 10
"""client-go's ``maxEvents`` for aggregation: distinct notes before combining."""
SIMILAR_WINDOW_S = 600.0
"""client-go's ``maxIntervalInSeconds``: the window those notes are counted in."""
COMBINED_PREFIX = "(combined from similar events): "
MAX_SERIES = 4096
"""client-go's ``maxLruCacheEntries``."""


NODE_BUDGET = Budget(burst=25, refill_s=300.0)
"""Per node, client-go's spam filter defaults (``defaultSpamBurst``, ``defaultSpamQPS``)."""
POD_BURST = 100
POD_REFILL_S = 1.0
POD_BUDGET = Budget(burst=POD_BURST, refill_s=POD_REFILL_S)
"""Per pod, whatever its node count: at most 100 + 3,600 writes an hour however many
nodes flap (a kubelet, for one node, allows 50 a second)."""

Key = tuple[str, Reason, str]
"""(node, reason, note): what makes two events the same Event."""


@dataclass
class _Series:
    """One Event object, written or to be written."""

    event: NodeEvent
    first: datetime
    last: datetime
    count: int = 1
    """Occurrences seen."""
    name: str | None = None
    """The Event's name once created."""
    sent: int = 0
    """The count the server has."""
    not_before: float = 0.0
    """Monotonic time before which a failed write is not retried."""


@dataclass(frozen=True)
class Write:
    """One request to make: create the Event (``name`` None) or patch its series."""

    key: Key
    event: NodeEvent
    name: str | None
    count: int
    first: datetime
    last: datetime


@dataclass
class _Similar:
    """The distinct notes of one node and reason in the current window."""

    notes: set[str] = field(default_factory=set)
    last: float = 0.0
    """When the last of them was seen."""
    combined: str | None = None
    """The note of the Event the rest of this window is counted on."""


class EventCorrelator:
    """Aggregates, deduplicates and budgets events; hands out the writes allowed now."""

    def __init__(
        self,
        node_budget: Budget = NODE_BUDGET,
        pod_budget: Budget = POD_BUDGET,
        max_series: int = MAX_SERIES,
        now: float = 0.0,
    ) -> None:
        self._node_budget = node_budget
        self._pod = TokenBucket(pod_budget, now)
        self._nodes: dict[str, TokenBucket] = {}
        self._series: OrderedDict[Key, _Series] = OrderedDict()
        self._pending: dict[Key, None] = {}
        """Series with occurrences the server does not have yet, oldest first."""
        self._in_flight: set[Key] = set()
        self._similar: dict[tuple[str, Reason], _Similar] = {}
        self._max_series = max_series
        self.observed = 0
        self.dropped = 0
        """Occurrences never written: a pending series evicted, or a write refused for good."""

    # -- occurrences ------------------------------------------------------------------

    def observe(self, event: NodeEvent, now: float, wall: datetime) -> None:
        """One occurrence of ``event`` at ``now`` (monotonic) / ``wall``."""
        self.observed += 1
        event = self._aggregate(event, now)
        key: Key = (event.node, event.reason, event.note)
        series = self._series.get(key)
        if series is None:
            series = _Series(event, wall, wall)
            self._series[key] = series
            self._evict()
        else:
            series.count += 1
            series.last = wall
            self._series.move_to_end(key)
        self._pending.setdefault(key, None)

    def _aggregate(self, event: NodeEvent, now: float) -> NodeEvent:
        group = (event.node, event.reason)
        similar = self._similar.get(group)
        # As client-go: the window slides, it starts afresh only after a quiet one.
        if similar is None or now - similar.last > SIMILAR_WINDOW_S:
            similar = self._similar[group] = _Similar()
        similar.last = now
        if event.note in similar.notes or len(similar.notes) < SIMILAR_MAX:
            similar.notes.add(event.note)
            return event
        if similar.combined is None:
            similar.combined = COMBINED_PREFIX + event.note
        return NodeEvent(event.node, event.reason, similar.combined)

    def _evict(self) -> None:
        while len(self._series) > self._max_series:
            key = next(iter(self._series))
            if key in self._in_flight:
                if len(self._in_flight) >= len(self._series):
                    return
                self._series.move_to_end(key)  # its write's answer still needs it
                continue
            series = self._series.pop(key)
            if key in self._pending:
                del self._pending[key]
                self.dropped += series.count - series.sent

    def _trim(self, now: float) -> None:
        """Forget what a new node or window would start from anyway, once there is a lot."""
        if len(self._similar) > self._max_series:
            expired = [g for g, s in self._similar.items() if now - s.last > SIMILAR_WINDOW_S]
            for group in expired:
                del self._similar[group]
        if len(self._nodes) > self._max_series:
            for node in [n for n, b in self._nodes.items() if b.full(now)]:
                del self._nodes[node]

    def forget_node(self, node: str) -> None:
        """A node gone for good: its buckets and windows go; pending events stay to be sent."""
        self._nodes.pop(node, None)
        for group in [g for g in self._similar if g[0] == node]:
            del self._similar[group]

    # -- writes -----------------------------------------------------------------------

    def _bucket(self, node: str, now: float) -> TokenBucket:
        bucket = self._nodes.get(node)
        if bucket is None:
            bucket = self._nodes[node] = TokenBucket(self._node_budget, now)
        return bucket

    def writes(self, now: float) -> list[Write]:
        """The writes the budgets allow now, oldest pending first; each is then in flight."""
        out: list[Write] = []
        for key in list(self._pending):
            if not self._pod.ready(now):
                break
            series = self._series[key]
            if key in self._in_flight or series.not_before > now:
                continue
            bucket = self._bucket(key[0], now)
            if not bucket.ready(now):
                continue
            bucket.take()
            self._pod.take()
            del self._pending[key]
            self._in_flight.add(key)
            out.append(Write(key, series.event, series.name, series.count, series.first,
                             series.last))
        self._trim(now)
        return out

    def next_due(self, now: float) -> float | None:
        """When :meth:`writes` may next return something (None: nothing is pending)."""
        if not self._pending:
            return None
        if not self._pod.ready(now):
            # Nothing goes before the pod's next token: no need to look at each event (a
            # storm keeps thousands pending, and the recorder asks after every occurrence).
            return self._pod.next_token(now)
        due: float | None = None
        for key in self._pending:
            if key in self._in_flight:
                continue
            series = self._series[key]
            at = max(series.not_before, self._bucket(key[0], now).next_token(now),
                     self._pod.next_token(now))
            due = at if due is None else min(due, at)
            if due <= now:
                break
        return due

    def pending(self) -> int:
        return len(self._pending) + len(self._in_flight)

    def written(self, write: Write, name: str) -> None:
        """The write succeeded; the Event is called ``name`` (a create may pick a new one)."""
        self._in_flight.discard(write.key)
        series = self._series.get(write.key)
        if series is not None:
            series.name, series.sent = name, write.count

    def failed(self, write: Write, now: float, retry_in: float | None, gone: bool = False) -> None:
        """The write failed: retry after ``retry_in`` seconds, or (None) give it up.

        ``gone``: the Event no longer exists (expired on the server): the next
        write creates it again, with the whole count.
        """
        self._in_flight.discard(write.key)
        series = self._series.get(write.key)
        if series is None:
            return
        if gone:
            series.name = None
        if retry_in is None:
            self.dropped += series.count - series.sent
            series.sent = series.count
            self._pending.pop(write.key, None)
            return
        series.not_before = now + max(0.0, retry_in)
        self._pending.setdefault(write.key, None)

    def stats(self) -> dict[str, float]:
        """For the benchmark and the metrics."""
        return {
            "series": len(self._series), "pending": self.pending(),
            "node_buckets": len(self._nodes), "pod_tokens": math.floor(self._pod.tokens),
        }
