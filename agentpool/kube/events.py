"""Record Events on Node objects (``events.k8s.io/v1``), correlated, from one thread.

The supervisor loop hands over :class:`~agentpool.nodeevents.reasons.NodeEvent`
values with :meth:`EventRecorder.record`, which never blocks; a thread of
its own asks the :class:`~agentpool.nodeevents.correlator.EventCorrelator` what
may be written now and writes it. An Event looks as the kubelet's do for its
node (``regarding`` the Node, with ``uid`` set to the node's name, which is
what ``kubectl describe node`` also searches by), with
``reportingController: agentpool`` and the pod as ``reportingInstance``, in
namespace ``kube-system``: the only one kube-apiserver 1.20 accepts for an
``events.k8s.io`` Event about a cluster-scoped object (later ones take
``default`` too). A repeat is a JSON merge patch of ``series`` (``count``,
``lastObservedTime``), as client-go's recorder sends it. An Event the server
no longer has (they expire after an hour) is created again.

RBAC: ``create`` and ``patch`` on ``events.events.k8s.io`` in ``kube-system``,
nothing else. Events are a courtesy, never a reason to stop controlling: a
refused write (403, as under Joulie's own agent ClusterRole, which grants no
Events) is said once in the log and in :attr:`EventRecorder.refused`
(``/readyz``'s detail), and for :data:`REFUSED_PAUSE_S` after it events are
dropped without a request; then the next one is tried, and if it goes
through, events are recorded again (and the log says so).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from agentpool.backoff import exponential_delay
from agentpool.errors import KubeError, KubeTemporaryError
from agentpool.kube.api import EVENTS_API_VERSION, KubeApi
from agentpool.kube.reachability import level_of
from agentpool.nodeevents.correlator import EventCorrelator, Write
from agentpool.nodeevents.reasons import NodeEvent
from agentpool.proctitle import name_thread

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "agentpool"
NAMESPACE = "kube-system"
"""Where an ``events.k8s.io`` Event about a cluster-scoped object may live: kube-apiserver
1.20 accepts only ``kube-system``, later ones ``default`` too."""
EVENT_TIMEOUT_S = 10.0
COMPLAINT_EVERY_S = 300.0
"""A failing write is logged at most this often (the rest at debug level)."""
REFUSED_PAUSE_S = 300.0
"""After a refused write (403), how long events are dropped without asking the server."""
STOP_FLUSH_S = 5.0
"""How long :meth:`EventRecorder.stop` still writes what is pending and allowed."""
MAX_NAME = 253


def micro_time(at: datetime) -> str:
    """``MicroTime`` as the apiserver writes it."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_name(node: str, nanoseconds: int) -> str:
    """``<node>.<hex nanoseconds>``, as client-go names them; within the 253 allowed."""
    suffix = f".{nanoseconds:x}"
    return node[: MAX_NAME - len(suffix)] + suffix


def event_body(write: Write, instance: str, name: str) -> dict[str, Any]:
    """The ``events.k8s.io/v1`` Event a create sends."""
    event = write.event
    body: dict[str, Any] = {
        "apiVersion": EVENTS_API_VERSION,
        "kind": "Event",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "eventTime": micro_time(write.first),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
        "action": event.action,
        "reason": event.reason.value,
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": event.node, "uid": event.node},
        "note": event.note,
        "type": event.type.value,
    }
    if write.count > 1:
        body["series"] = series(write)
    return body


def series(write: Write) -> dict[str, Any]:
    return {"count": write.count, "lastObservedTime": micro_time(write.last)}


class EventRecorder:
    """Correlates and writes Node events. ``record`` is thread safe and never blocks."""

    def __init__(
        self,
        api: KubeApi,
        instance: str,
        correlator: EventCorrelator | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._api = api
        self.instance = instance[:128]
        """``reportingInstance``: the pod (at most 128 characters, the API's limit)."""
        self._clock = clock
        self._wall = wall
        self._correlator = correlator or EventCorrelator(now=clock())
        self._cond = threading.Condition()
        self._stop = False
        self._busy = False
        self._complained: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self.created = 0
        self.patched = 0
        self.failures = 0
        self._streak = 0
        """Failed writes in a row: the retry delay grows with it."""
        self._last_ns = 0
        self.refused: str | None = None
        """Why Node events are not recorded (RBAC refused the last write); None while they
        are."""
        self._refused_at = -REFUSED_PAUSE_S

    # -- the loop's side ---------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def record(self, event: NodeEvent) -> None:
        with self._cond:
            self._correlator.observe(event, self._clock(), self._wall())
            self._cond.notify()

    def counts(self) -> dict[str, int]:
        """Writes so far and occurrences dropped, for the metrics."""
        with self._cond:
            return {"create": self.created, "patch": self.patched,
                    "dropped": self._correlator.dropped, "failed": self.failures,
                    "pending": self._correlator.pending()}

    def flush(self, timeout: float) -> bool:
        """Wait until nothing is pending or ``timeout``; True when all was written.

        Pending events over budget stay pending: a flush does not break the budget.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                due = self._correlator.next_due(self._clock())
                if (due is None or due > self._clock()) and not self._busy:
                    return self._correlator.pending() == 0
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))

    def stop(self) -> None:
        """Write what is pending and allowed (for :data:`STOP_FLUSH_S` at most), then stop."""
        if self._thread.is_alive():
            self.flush(STOP_FLUSH_S)
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(EVENT_TIMEOUT_S)
        left = self.counts()["pending"]
        if left:
            log.info("%d Node events not recorded at exit (over budget or failing)", left)

    # -- the thread's side -------------------------------------------------------------

    def _next_batch(self) -> list[Write] | None:
        with self._cond:
            while not self._stop:
                now = self._clock()
                writes = self._correlator.writes(now)
                if writes:
                    self._busy = True
                    return writes
                due = self._correlator.next_due(now)
                self._cond.notify_all()  # flush() waits on what is due
                self._cond.wait(None if due is None else max(0.01, min(due - now, 60.0)))
            return None

    def _run(self) -> None:
        name_thread()
        while (batch := self._next_batch()) is not None:
            for write in batch:
                try:
                    self._write(write)
                except Exception:  # a bug: lose this event, never the recorder
                    log.exception("Node event %s of %s not recorded", write.event.reason,
                                  write.event.node)
                    with self._cond:
                        self._correlator.failed(write, self._clock(), None)
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _write(self, write: Write) -> None:
        if self.refused is not None and self._clock() - self._refused_at < REFUSED_PAUSE_S:
            with self._cond:  # refused a moment ago: no request that would be refused too
                self._correlator.failed(write, self._clock(), None)
            return
        try:
            if write.name is not None:
                try:
                    self._patch(write)
                    return
                except KubeError as exc:
                    if exc.status != 404:
                        raise
                    # Expired on the server (the event TTL): record it anew, whole count.
                    with self._cond:
                        self._correlator.failed(write, self._clock(), 0.0, gone=True)
                    return
            name = self._create(write)
        except KubeTemporaryError as exc:
            self._failed(write, exc, retry=True)
            return
        except KubeError as exc:
            self._failed(write, exc, retry=False)
            return
        with self._cond:
            self.created += 1
            self._streak = 0
            self._correlator.written(write, name)
        self._accepted()

    def _accepted(self) -> None:
        if self.refused is not None:
            # Said before it shows in /readyz, so whoever sees the one finds the other.
            log.info("Node events are recorded again: the API server accepted one")
            self.refused = None

    def _patch(self, write: Write) -> None:
        assert write.name is not None
        name = write.name
        self._api.patch_event(NAMESPACE, name, {"series": series(write)}, EVENT_TIMEOUT_S)
        with self._cond:
            self.patched += 1
            self._streak = 0
            self._correlator.written(write, name)
        self._accepted()

    def _create(self, write: Write) -> str:
        # Nanoseconds from the clock, never the same twice here: two Events created back to
        # back must not collide (a float timestamp rounds to about 256 ns).
        self._last_ns = max(time.time_ns(), self._last_ns + 1)
        name = event_name(write.event.node, self._last_ns)
        # A 409 (the name taken, by another pod's Event of the same nanosecond) is
        # temporary: the retry picks another name.
        body = event_body(write, self.instance, name)
        created = self._api.create_event(NAMESPACE, body, EVENT_TIMEOUT_S)
        return str((created.get("metadata") or {}).get("name") or name)

    def _failed(self, write: Write, exc: KubeError, retry: bool) -> None:
        now = self._clock()
        with self._cond:
            self.failures += 1
            self._streak += 1
            delay = None
            if retry and exc.status == 409:
                delay = 0.0
            elif retry and isinstance(exc, KubeTemporaryError) and exc.status == 429:
                delay = exc.delay
            elif retry:
                delay = exponential_delay(self._streak, 1.0, 60.0, 1.0)
            self._correlator.failed(write, now, delay)
        if exc.status == 403:
            self._refused(exc, now)
            return
        what = (
            f"Node event {write.event.reason} of {write.event.node} "
            f"{'to be retried' if retry else 'dropped'}: {exc}"
        )
        key = str(exc.status)
        if level_of(exc) == logging.DEBUG:
            log.debug("%s", what)  # no answer: the outage is told once (kube.reachability)
        elif now - self._complained.get(key, -COMPLAINT_EVERY_S) >= COMPLAINT_EVERY_S:
            self._complained[key] = now
            log.warning("%s", what)
        else:
            log.debug("%s", what)

    def _refused(self, exc: KubeError, now: float) -> None:
        """RBAC refused a write: say so once, and pause (see the module docstring)."""
        self._refused_at = now
        if self.refused is not None:
            log.debug("Node event refused again: %s", exc)
            return
        refused = (
            f"Node events are not recorded: RBAC does not let this agent create and patch "
            f"events.events.k8s.io in {NAMESPACE} ({exc}); nothing else depends on them"
        )
        log.warning("%s; tried again every %gs", refused, REFUSED_PAUSE_S)
        self.refused = refused  # after the log line, as above
