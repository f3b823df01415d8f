"""The supervisor's main loop: watch the cluster, run one worker per owned node.

Threads feed it (informers, signal wake-ups) through queues and a self-pipe;
everything that changes worker state happens here, in one thread, so there
are no locks around the worker table. Each turn of the loop:

1. act on recorded signals (handlers only record them);
2. apply informer events to the :class:`ClusterView`;
3. read worker reports (tick results double as heartbeats);
4. notice dead workers, decode how they died, schedule restarts with backoff,
   but never start a node's new process while its previous one still runs;
5. kill workers that went silent or stopped reading their pipe (their stack
   dumped to the log first), SIGKILL workers that overstayed a stop;
6. start/stop workers so that exactly the owned nodes have one, and hand each
   worker its node's latest inputs, and its fence (the deadlines after which
   it stops on its own: :mod:`agentpool.supervisor.fences`), when its pipe can
   take them.

The worker table (:mod:`agentpool.supervisor.workers`) carries out what
concerns one worker (steps 3 to 5, starts and stops); the loop decides,
from the cluster view and the elastic pool, which nodes need one.

Nothing in a turn may block or escape: sends to a worker never block (see
:mod:`agentpool.worker.protocol`), a worker that cannot be started backs
off like one that died, and an unexpected exception ends the loop through
the same orderly shutdown as SIGTERM, with a non-zero exit status.

A turn touches only the workers that have something to say (see
:mod:`agentpool.supervisor.loopio`) and those whose own moment came (a
heartbeat limit, a kill deadline, a restart, a fence renewal:
:mod:`agentpool.supervisor.deadlines`); the loop's own checks (the desired
state's freshness, orphans, the first listing) run once per ``loop_period_s``;
the metrics snapshot is rebuilt when the worker table changed.
"""

from __future__ import annotations

import logging
import queue
import signal
import time
from collections.abc import Callable
from typing import Any

from agentpool.config.settings import Settings
from agentpool.errors import CapacityError
from agentpool.kube.api import Resource
from agentpool.kube.informer import InformerEvent, Relisted
from agentpool.kube.nodehardware import HardwarePublisher
from agentpool.kube.writehold import WriteHold
from agentpool.nodeevents.hooks import NodeEvents
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.supervisor.clusterview import ClusterView
from agentpool.supervisor.deaths import Deaths
from agentpool.supervisor.echoes import Echoes
from agentpool.supervisor.elastic import ElasticPool
from agentpool.supervisor.handles import Launch, WorkerHandle
from agentpool.supervisor.loopio import LoopIO
from agentpool.supervisor.memlimit import MemoryBudget, Refusals
from agentpool.supervisor.orphans import reap_orphans
from agentpool.supervisor.selfmetrics import Snapshot, SupervisorCollector
from agentpool.supervisor.statuses import StatusRouter, StatusSink
from agentpool.supervisor.workers import KILL_GRACE_S, WorkerTable
from agentpool.worker.nodefiles import NodeFiles

log = logging.getLogger(__name__)

LOOP_PERIOD_S = 0.5
"""Longest sleep of the loop, the period of its own checks, and the shortest time between
two looks at one worker."""
MAX_STARTS_PER_TURN = 64
"""Start workers in batches so reports keep flowing during a mass start."""
FINAL_STATUS_MIN_S = 5.0
"""The final statuses get at least this long to be written, whatever the deadline left."""
EXIT_FATAL = 1
"""Exit status after the loop failed and stopped everything in order."""


class Supervisor:
    """Owns the worker table. Only ``run()``'s thread touches it."""

    def __init__(
        self,
        settings: Settings,
        launch: Launch,
        view: ClusterView,
        status: StatusSink | None,
        collector: SupervisorCollector,
        files: NodeFiles,
        synced: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
        loop_period_s: float = LOOP_PERIOD_S,
        max_workers: int | None = None,
        twin_status: StatusSink | None = None,
        hardware: HardwarePublisher | None = None,
        spec_confirmed_at: Callable[[float], float | None] | None = None,
        elastic: ElasticPool | None = None,
        node_events: NodeEvents | None = None,
        write_hold: WriteHold | None = None,
        memory: MemoryBudget | None = None,
        deaths: Deaths | None = None,
    ) -> None:
        self.settings = settings
        self.write_hold = write_hold
        """Holds status and NodeHardware writes while workers start (enforce first)."""
        self.node_events = node_events
        """Kubernetes Events on the Nodes (docs/metrics.md: Node events); None with EVENTS=false."""
        self.spec_confirmed_at = spec_confirmed_at
        """Given now, when the API last confirmed the desired state (now while its watches
        work; None: nothing to confirm). SPEC_READ_TIMEOUT counts from there."""
        self._spec_seen = clock()
        self.hardware = hardware
        """Publishes NodeHardware (NodeTwin API, once enabled)."""
        self.twin_status = twin_status
        """Writes NodeTwin ``status.controlStatus`` (NodeTwin API); ``status`` writes
        TelemetryProfile status (profile API)."""
        self.launch = launch
        self.view = view
        self.status = status
        self.statuses = StatusRouter(
            view, status, twin_status, holds=elastic.holds if elastic is not None else None
        )
        """Offers each node's status to the writer of the object that carries it."""
        self.collector = collector
        self.files = files
        self.synced = synced
        self.clock = clock
        self.loop_period_s = loop_period_s
        self.max_workers = max_workers
        """How many workers the descriptor limit allows; owning more nodes is fatal."""
        self.elastic = elastic
        """Elastic pool membership and handoff; None in a static pool or a daemonset."""
        self.events: queue.SimpleQueue[InformerEvent] = queue.SimpleQueue()
        self.echoes = Echoes()
        self.signals: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.io = LoopIO()
        self.table = WorkerTable(
            settings, launch, view, self.statuses, files, self.io, clock, loop_period_s,
            hardware, elastic, node_events, deaths,
        )
        """Every owned node's worker: starts, reports, deaths, restarts, stops."""
        self.refusals = Refusals(memory or MemoryBudget(None), self.statuses)
        """The owned nodes the pod's memory limit leaves without a worker."""
        self._next_check = 0.0
        """When the loop's own checks (not a pass over the workers) are due next."""
        self._inputs_changed: set[str] = set()
        """Nodes whose inputs may differ from what their worker was last sent."""
        self._hardware_enabled = False
        """Whether the NodeHardware publisher was enabled at the last turn."""
        self._scope_stale = True
        """Which nodes this pod owns may have changed: reconcile the worker table."""
        self._awaiting_sync = False
        """No worker starts before every cache has listed once."""
        self._stopping = False
        self._published_synced: bool | None = None
        """``synced`` of the last published snapshot (the rest changes with the table)."""
        self._publish_after = 0.0
        """A change is published at once from then on, until then at the next check."""
        self.loop_heartbeat = clock()

    @property
    def workers(self) -> dict[str, WorkerHandle]:
        return self.table.workers

    # -- inputs from other threads -------------------------------------------------------------

    def feed(self, event: InformerEvent) -> None:
        """Informer sink (called from informer threads): wakes the loop for what may change
        what it knows, not for its own status writes coming back (:mod:`.echoes`)."""
        if not self.echoes.news(event):
            return
        self.events.put(event)
        self.io.wake()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals.put(signum)  # only record it; the loop acts

    def install_signal_handlers(self) -> None:
        self.io.wake_on_signals()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def close(self) -> None:
        """Release the selector and the wake-up pipe (after ``run``)."""
        self.io.close()

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> int:
        """Turn until SIGTERM/SIGINT, then stop every worker; the process's exit status."""
        code = 0
        try:
            while not self._stopping:
                self.turn()
        except CapacityError as exc:
            log.error("%s; stopping every worker", exc)
            code = EXIT_FATAL
        except Exception:
            log.exception("the supervisor's loop failed: stopping every worker")
            code = EXIT_FATAL
        return self._shutdown(code)

    def turn(self) -> None:
        """One turn of the loop: wait for something to do (at most one loop period), do it."""
        busy = self._scope_stale or not self.events.empty()
        due = min(self._next_check, self.table.next_look_at())
        self.io.wait(0.0 if busy else max(0.0, min(self.loop_period_s, due - self.clock())))
        now = self.clock()
        self.loop_heartbeat = now
        self._handle_signals()
        if self._stopping:
            return
        self._apply_events()
        self.table.read_reports(now)
        self.table.reap(now)
        self._turn_elastic(now)
        check = now >= self._next_check
        if check:
            self._next_check = now + self.loop_period_s
            self._check_spec_freshness(now)
        look = now >= self.table.next_look_at()
        if look:
            self.table.look(now)
        if self.table.rescope:
            self.table.rescope, self._scope_stale = False, True
        if self._scope_stale or (check and self._awaiting_sync):
            self._reconcile_scope(now)
        if look:
            self.table.look_after_scope(now)
        self.table.start_queued(now)
        changed, self._inputs_changed = self._inputs_changed, set()
        inputs = self.table.changed_inputs(changed)
        self._offer_hardware(inputs)
        self.table.deliver(inputs, now)
        self.table.note_stalled(now)
        if check:
            reap_orphans()
        if self.write_hold is not None and (check or self._scope_stale):
            # Looked at once a loop period (a pass over every worker), and at each batch
            # of a mass start (whose first reports would otherwise be written at once).
            if self._scope_stale or self.table.starting():
                self.write_hold.hold()
            else:
                self.write_hold.release()
        # A snapshot is of every worker: starts at most one a loop period, or a mass start
        # (a change at nearly every turn) rebuilt it hundreds of times; exits at once.
        due = check or self.table.gone or now >= self._publish_after
        if (self.table.changed and due) or (check and self.synced() != self._published_synced):
            self._publish(now)

    def _turn_elastic(self, now: float) -> None:
        """Elastic pool: renewals only while this loop turns; the handoff's actions say which
        nodes may run, and each renewal moves every worker's fence."""
        if self.elastic is None:
            return
        actions = self.elastic.turn(self.view.selected())
        if self.node_events is not None:
            for node, previous in self.elastic.takeovers().items():
                self.node_events.taken_over(node, previous)
        if actions:
            running = self.view.elastic_running or set()
            self.view.elastic_running = (running - actions.stop) | actions.start
            self._scope_stale = True
        for node in actions.stop - self.workers.keys():
            self.elastic.stopped(node)  # never started (or already forgotten): nothing to stop
        fence = self.elastic.worker_fence()
        if fence != self.table.pod_fence:
            self.table.pod_fence = fence
            self.table.refresh_fences(now)

    def _handle_signals(self) -> None:
        while True:
            try:
                signum = self.signals.get_nowait()
            except queue.Empty:
                return
            if signum in (signal.SIGTERM, signal.SIGINT):
                log.info("received %s: stopping all workers", signal.Signals(signum).name)
                self._stopping = True

    def _apply_events(self) -> None:
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                break
            self._inputs_changed |= self.view.apply(event)
            # Scope is the nodes' labels (and the elastic handoff) once every cache has
            # listed: a change to another object changes inputs only. Rescoping visits every
            # node, and each status this agent writes comes back as such a change.
            if isinstance(event, Relisted) or event.resource is Resource.NODES:
                self._scope_stale = True

    def _check_spec_freshness(self, now: float) -> None:
        """Mark desired state stale once unconfirmed by the API for SPEC_READ_TIMEOUT."""
        if self.spec_confirmed_at is None:
            return
        confirmed = self.spec_confirmed_at(now)
        self._spec_seen = now if confirmed is None else confirmed
        stale = now - self._spec_seen > self.settings.spec_read_timeout_s
        if stale == self.view.spec_stale:
            return
        self.view.spec_stale = stale
        if stale:
            log.error(
                "desired state not confirmed from the API for %.0fs: SPEC_STALE_ACTION=%s",
                now - self._spec_seen,
                self.settings.spec_stale_action.value,
            )
        else:
            log.info("desired state confirmed again: enforcing it")
        self._inputs_changed |= set(self.workers)

    # -- scope and starts ------------------------------------------------------------------------

    def _reconcile_scope(self, now: float) -> None:
        self._scope_stale = False
        if not self.synced():
            # Until every cache has listed, a node may be known without its profiles, and
            # its worker would fall back to host controls: rescoped at each scan instead.
            self._awaiting_sync = True
            return
        self._awaiting_sync = False
        owned = self.view.owned()
        if self.max_workers is not None and len(owned) > self.max_workers:
            raise CapacityError(
                f"this pod owns {len(owned)} nodes but RLIMIT_NOFILE covers "
                f"{self.max_workers}: raise the limit or add shards"
            )
        self.table.let_go(owned, now)
        # A node still stopping from an earlier scope loss keeps its handle until the
        # worker is gone; the table then says the scope may have changed, and it starts
        # again here.
        missing = self.refusals.admit(sorted(owned - self.workers.keys()), len(self.workers))
        if len(missing) > MAX_STARTS_PER_TURN:
            self._scope_stale = True  # the rest next turn, so reports keep flowing
        self.table.add(missing[:MAX_STARTS_PER_TURN])

    # -- sending inputs: only the latest, only when the pipe can take it -------------------------

    def _offer_hardware(self, changed: dict[str, NodeInputs]) -> None:
        """What each changed node's NodeHardware depends on, to its publisher (when it is
        enabled: NodeHardware is served). Once it becomes enabled, every running worker's
        node: their starts were offered to nobody."""
        enabled = self.hardware is not None and self.hardware.enabled
        if enabled and not self._hardware_enabled:
            for node, handle in self.workers.items():
                if handle.last_sent is not None and node not in changed:
                    self.table.offer_hardware(node, handle.last_sent)
        self._hardware_enabled = enabled
        for node, inputs in changed.items():
            self.table.offer_hardware(node, inputs)

    def _publish(self, now: float) -> None:
        self.table.changed = self.table.gone = False
        self._publish_after = now + self.loop_period_s
        self._published_synced = synced = self.synced()
        s = self.settings
        self.collector.publish(
            Snapshot(
                workers=self.table.views(now),
                shard_id=s.pool_shard_id,
                shards=max(1, s.pool_shards),
                synced=synced,
                memory_limit=self.refusals.budget.limit_bytes,
                memory_workers=self.refusals.budget.workers(),
                refused=len(self.refusals.refused),
            )
        )

    # -- shutdown --------------------------------------------------------------------------------

    def _shutdown(self, code: int) -> int:
        """Stop every worker at once, SIGKILL all that overstay together, write final statuses."""
        now = self.clock()
        deadline = now + self.settings.shutdown_timeout_s
        self.table.stop_all(now, self.settings.shutdown_timeout_s)
        self.table.await_exits(deadline)
        if self.table.running():
            self.table.kill_all()
            self.table.await_exits(self.clock() + KILL_GRACE_S)
        self.table.offer_final_statuses()
        for writer in self.statuses.writers():
            left = deadline - self.clock()
            if not writer.flush(timeout=max(FINAL_STATUS_MIN_S, left)):
                log.warning("not every final status was written in time")
        left_over = self.table.running()
        if left_over:
            log.error("%d workers could not be stopped: %s", len(left_over), sorted(left_over))
        log.info("all workers stopped")
        return code

