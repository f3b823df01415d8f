"""The elastic pool at run time: lease I/O in a thread, the pure state in the supervisor loop.

Owns the plumbing between :class:`~agentpool.pool.state.PoolState` (pure,
owned by the supervisor loop) and the Kubernetes calls of
:mod:`agentpool.kube.leases` (blocking, so they run in a thread of their
own). The loop calls :meth:`ElasticPool.turn` every iteration: results of
finished I/O are applied, the handoff decides what to start and stop, and
when a renewal is due the loop hands the thread one *cycle*: write this
pod's Lease (renewal plus claims), then read every Lease of the pool. The
thread never renews on its own, so a loop that stops turning stops renewing,
and the pod's lease runs out instead of vouching for a hung supervisor.

A blocked or failing API cannot stall the loop either: fencing (stopping
every worker when the last successful renewal is too old) is decided in the
loop from the clock, whatever the thread is stuck in. And a loop that stalls
cannot keep workers writing: each worker holds the deadlines of
:meth:`ElasticPool.worker_fence` (:mod:`agentpool.pool.fence`), which only a
renewal moves, and stops on its own when they pass.

Only the thread uses the :class:`LeaseClient` (it is not thread safe): the
release on a clean exit is the thread's last request too.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from agentpool.config.settings import ElasticSettings
from agentpool.errors import KubeError
from agentpool.kube.leases import LEASE_REQUEST_S, LeaseClient
from agentpool.pool.fence import KILL_MARGIN_S, FenceTimes
from agentpool.pool.handoff import Actions, NodePhase
from agentpool.pool.membership import LeaseRecord
from agentpool.pool.state import LeaseWrite, PoolNumbers, PoolState
from agentpool.proctitle import name_thread

log = logging.getLogger(__name__)

HANDOFF_CYCLE_S = 0.5
"""Cycle period while nodes wait to be acquired or released (renewals are slower)."""


def takeover_bound_s(elastic: ElasticSettings, grace_s: float) -> float:
    """How long a dead pod's nodes stay uncontrolled at most (docs/modes.md: elastic pool).

    Its lease expires ``duration`` after its last renewal was seen; its claims
    then still block for the grace; the next cycle of a survivor (at most a
    renew period away) notices, and one more handoff cycle starts the node.
    """
    return elastic.lease_duration_s + grace_s + elastic.renew_s + HANDOFF_CYCLE_S


@dataclass(frozen=True)
class _Resumed:
    claims: frozenset[str]


@dataclass(frozen=True)
class _Written:
    sent_at: float
    write: LeaseWrite


@dataclass(frozen=True)
class _Read:
    records: list[LeaseRecord]
    writes_before: int
    """Successful lease writes when the read began: only claims they published count."""


@dataclass(frozen=True)
class _Replicas:
    value: int | None


@dataclass(frozen=True)
class _CycleDone:
    pass


_Result = _Resumed | _Written | _Read | _Replicas | _CycleDone


class ElasticPool:
    """One pod's membership of an elastic pool. ``turn``/``stopped`` from one thread only."""

    def __init__(
        self,
        elastic: ElasticSettings,
        leases: LeaseClient,
        grace_s: float,
        shutdown_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self.elastic = elastic
        self.shutdown_s = max(0.0, grace_s - KILL_MARGIN_S) if shutdown_s is None else shutdown_s
        """SHUTDOWN_TIMEOUT: how long workers restore after their fence's stop (by default
        what the grace implies)."""
        self.release_on_stop = False
        """:meth:`stop` releases the lease (set once every worker stopped cleanly)."""
        self.wake = wake
        """Called from the I/O thread after each result, so the loop turns soon."""
        self.leases = leases
        self.grace_s = grace_s
        self.clock = clock
        self.state: PoolState | None = None
        """None until this pod's previous Lease (if any) was read: nothing runs before."""
        self._replicas: int | None = None
        self._results: queue.SimpleQueue[_Result] = queue.SimpleQueue()
        self._cycles: queue.SimpleQueue[LeaseWrite | None] = queue.SimpleQueue()
        self._busy = False
        self._next_cycle = 0.0
        self._numbers: PoolNumbers | None = None
        self._phases: dict[str, NodePhase] = {}
        self._lock = threading.Lock()
        self._written = 0
        """Successful writes the thread made since the resume (= ``handoff.writes`` once
        their results are applied, which happens in order)."""
        self._release = False
        """Set by :meth:`close` for the thread: release the lease, then stop."""
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pool-leases", daemon=True)

    # -- the loop's side -------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def replicas(self, value: int | None) -> None:
        """The StatefulSet's ``spec.replicas`` changed (from any thread)."""
        self._put(_Replicas(value))

    def _put(self, result: _Result) -> None:
        self._results.put(result)
        self.wake()

    def holds(self, node: str) -> bool:
        """Whether this pod may speak for ``node`` now: it runs or is stopping its worker,
        and its lease renewal is not overdue (another pod may have the node otherwise)."""
        state = self.state
        if state is None or state.handoff.fenced(self.clock()):
            return False
        return state.handoff.phase(node) in (NodePhase.RUNNING, NodePhase.RELEASING)

    @property
    def cycle_in_flight(self) -> bool:
        """Whether a lease cycle was handed to the thread and :meth:`turn` has not yet seen
        it end. A loop that stops turning with none in flight writes the Lease no more."""
        return self._busy

    def worker_fence(self) -> FenceTimes | None:
        """The deadlines this pod's workers hold now (None before the first renewal)."""
        if self.state is None:
            return None
        return self.state.worker_fence(self.shutdown_s)

    def turn(self, nodes: Iterable[str]) -> Actions:
        """One loop turn with the currently selected nodes: what to start and stop now."""
        now = self.clock()
        actions = self._drain(now)
        state = self.state
        if state is None:
            if not self._busy and now >= self._next_cycle:
                self._submit(None, now)
                self._next_cycle = now + min(self.elastic.renew_s, 1.0)
            return actions
        actions = actions | state.turn(nodes, now)
        if not self._busy and now >= self._next_cycle:
            self._submit(state.next_write(), now)
            pending = state.handoff.nodes(NodePhase.CLAIMING, NodePhase.CLAIMED,
                                          NodePhase.RELEASING)
            period = min(self.elastic.renew_s, HANDOFF_CYCLE_S) if pending else self.elastic.renew_s
            self._next_cycle = now + period
        with self._lock:
            self._numbers = state.numbers(now)
            self._phases = {node: phase for node in state.handoff.claims()
                            if (phase := state.handoff.phase(node)) is not None}
        return actions

    def takeovers(self) -> dict[str, str]:
        """Nodes this pod started since the last call that another pod had claimed (the
        pod), for their Node events."""
        if self.state is None:
            return {}
        return self.state.takeovers()

    def stopped(self, node: str) -> None:
        """The worker of ``node`` is gone: its claim may be dropped."""
        if self.state is not None:
            self.state.stopped(node)
            self._next_cycle = 0.0  # publish the release at once

    def _submit(self, write: LeaseWrite | None, now: float) -> None:
        self._busy = True
        self._cycles.put(write)

    def _drain(self, now: float) -> Actions:
        actions = Actions()
        while True:
            try:
                result = self._results.get_nowait()
            except queue.Empty:
                return actions
            actions = actions | self._apply(result, now)

    def _apply(self, result: _Result, now: float) -> Actions:
        state = self.state
        if isinstance(result, _CycleDone):
            self._busy = False
        elif isinstance(result, _Replicas):
            self._replicas = result.value
            if state is not None:
                return state.set_replicas(result.value, now)
        elif isinstance(result, _Resumed):
            self.state = PoolState(
                self.leases.pod, self.elastic.assignment, self.elastic.lease_duration_s,
                self.elastic.renew_s, self.grace_s, result.claims,
            )
            self.state.set_replicas(self._replicas, now)
            if result.claims:
                log.info("resuming %d nodes this pod's lease still claims", len(result.claims))
        elif state is not None and isinstance(result, _Written):
            fence = state.handoff.fence_at()
            if fence is not None and result.sent_at >= fence:
                log.warning("pool lease renewed %.1fs after this pod's fence: acting as a "
                            "newcomer (its claims count again only from this renewal on)",
                            result.sent_at - fence)
            state.written(result.sent_at, result.write)
        elif state is not None and isinstance(result, _Read):
            return state.read(result.writes_before, result.records, now)
        return Actions()

    def stop(self) -> None:
        """Stop the I/O thread; release the lease if :attr:`release_on_stop` says so."""
        self.close(release=self.release_on_stop)

    def close(self, release: bool = True) -> None:
        """Stop the thread; with ``release``, clear this pod's holder and claims.

        Call after every worker stopped: the release tells the others they may
        take the nodes at once instead of after the lease expires. The thread
        sends it, after the request it may be in (:data:`CLOSE_WAIT_S`); if it
        is still busy by then, the lease is left to expire.
        """
        with self._lock:
            self._release = release and self.state is not None
        self._stopping.set()
        self._cycles.put(None)
        if self._thread.ident is None:  # never started: nobody else uses the client
            self._release_now()
            return
        self._thread.join(CLOSE_WAIT_S)
        if self._thread.is_alive():
            with self._lock:
                abandoned, self._release = self._release, False
            if abandoned:
                log.warning("lease %s not released: its request is still in flight after "
                            "%.0fs; it expires on its own", self.leases.pod, CLOSE_WAIT_S)

    def _release_now(self) -> None:
        with self._lock:
            release, self._release = self._release, False
        if not release:
            return
        try:
            self.leases.release()
        except KubeError as exc:
            log.warning("could not release lease %s: %s", self.leases.pod, exc)

    # -- the thread's side -------------------------------------------------------------------

    def _run(self) -> None:
        name_thread()
        resumed = False
        while not self._stopping.is_set():
            try:
                write = self._cycles.get(timeout=0.5)
            except queue.Empty:
                continue
            if self._stopping.is_set():
                break
            try:
                if not resumed:
                    own = self.leases.own()
                    mine = own is not None and own.holder == self.leases.pod
                    self._put(_Resumed(own.claims if own is not None and mine
                                               else frozenset()))
                    resumed = True
                elif write is not None:
                    self._cycle(write)
            except KubeError as exc:
                log.warning("pool lease cycle failed: %s", exc)
            except Exception:  # a bug must not end renewals for good: the next cycle retries
                log.exception("pool lease cycle failed unexpectedly")
            finally:
                self._put(_CycleDone())
        self._release_now()

    def _cycle(self, write: LeaseWrite) -> None:
        sent_at = self.clock()
        self.leases.write(write.claims, write.view)
        self._written += 1
        self._put(_Written(sent_at, write))
        if self._stopping.is_set():
            return  # closing: the release is the next request, not a read
        writes_before = self._written
        self._put(_Read(self.leases.members(), writes_before))

    # -- metrics -----------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """The ``agentpool_pool_*`` series (a prometheus_client collector's ``collect``)."""
        with self._lock:
            numbers, phases = self._numbers, dict(self._phases)
        yield from pool_metrics(numbers, phases, takeover_bound_s(self.elastic, self.grace_s))


CLOSE_WAIT_S = LEASE_REQUEST_S + 1.0
"""How long :meth:`ElasticPool.close` waits for the thread: the request it may be in,
then the release (each one request, unless a conflict makes it two); beyond that the
release is given up rather than sent from a second thread."""


def pool_metrics(
    numbers: PoolNumbers | None, phases: dict[str, NodePhase], bound_s: float
) -> Iterator[Metric]:
    """Gauges of one pod's view of its elastic pool."""
    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, value=value)

    yield gauge("agentpool_pool_takeover_bound_seconds",
                "longest time a dead pod's nodes stay uncontrolled: lease duration + shutdown "
                "grace + renew period + one handoff cycle", bound_s)
    if numbers is None:
        return
    yield gauge("agentpool_pool_members_seen", "pool pods with a live lease, as this pod sees it",
                numbers.members_seen)
    members = GaugeMetricFamily("agentpool_pool_view_member",
                                "1 per pod this pod assigns nodes over", labels=["member"])
    for member in numbers.members:
        members.add_metric([member], 1)
    yield members
    view = GaugeMetricFamily("agentpool_pool_view_info", "digest of this pod's view",
                             labels=["view"])
    view.add_metric([numbers.view], 1)
    yield view
    yield gauge("agentpool_pool_nodes_to_acquire",
                "nodes assigned to this pod, waiting for a release or a read", numbers.to_acquire)
    yield gauge("agentpool_pool_nodes_to_release",
                "nodes this pod is stopping so that another can take them", numbers.to_release)
    yield gauge("agentpool_pool_view_disagreement",
                "live pods whose published view differs from this pod's (alert when > 0 "
                "for longer than a few renew periods)", numbers.disagreeing)
    yield gauge("agentpool_pool_fenced",
                "1 while this pod runs nothing because its lease renewal is overdue",
                1 if numbers.fenced else 0)
    nodes = GaugeMetricFamily("agentpool_pool_node_phase",
                              "1 per node this pod claims, by handoff phase",
                              labels=["node", "phase"])
    for node, phase in sorted(phases.items()):
        nodes.add_metric([node, phase.value], 1)
    yield nodes
