"""The supervisor's main loop: watch the cluster, run one worker per owned node.

Threads feed it (informers, signal wake-ups) through queues and a self-pipe;
everything that changes worker state happens here, in one thread, so there
are no locks around the worker table. A turn of the loop waits for something
to do (at most one loop period), then runs these phases in order, each only
when its guard holds:

1. signals (one was recorded): SIGTERM or SIGINT ends the loop;
2. events (an informer event is queued): applied to the :class:`ClusterView`,
   noting whose inputs and whether the scope may have changed;
3. reports (a worker's pipe is readable): tick results, which double as
   heartbeats;
4. deaths (a worker's exit sentinel fired): each settled by the restart
   decision (:mod:`agentpool.supervisor.lifecycle`), or waited for while its
   process still runs (never two processes for a node);
5. elastic (an elastic pool): lease renewals and the handoff's actions;
6. checks (once a loop period): the desired state's freshness;
7. looks (a worker's own moment came: :mod:`agentpool.supervisor.deadlines`):
   hung workers killed (their stack dumped to the log first), overstayed stops
   SIGKILLed, lingering predecessors looked for;
8. scope (the owned nodes may have changed, or the caches are not listed yet):
   workers of nodes no longer owned stopped, workers for new ones queued, a
   batch a turn;
9. follow-ups of 7, once the scope is known: restarts that are due queued,
   fence renewals (:mod:`agentpool.supervisor.fences`);
10. starts (some are queued): restarts and new nodes together, one batch at
    the fork server, so one spawn deadline per turn;
11. inputs (some changed, a pipe drained, or NodeHardware became served or
    not): each worker's latest inputs, the NodeHardware they imply, what waits
    for a pipe;
12. stalled pipes (a pipe began refusing): their heartbeat limit scheduled;
13. housekeeping (once a loop period): orphans reaped (PID 1), status writes
    held while workers start;
14. publish (the table changed and a publish is due): the metrics snapshot,
    at most once a loop period but at once when a worker is gone.

So a turn touches only the workers that have something to say (see
:mod:`agentpool.supervisor.loopio`) and those whose own moment came; the
rest of its work is once a loop period.

The worker table (:mod:`agentpool.supervisor.workers`) carries out what
concerns one worker, and each of its operations returns what it changed; the
loop decides, from the cluster view and the elastic pool, which nodes need
one, and keeps what is still to do between turns.

Nothing in a turn may block or escape: sends to a worker never block (see
:mod:`agentpool.worker.protocol`), a worker that cannot be started backs
off like one that died, and an unexpected exception ends the loop through
the same orderly shutdown as SIGTERM, with a non-zero exit status.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import signal
import time
from collections.abc import Callable
from typing import Any

from agentpool.config.settings import Settings
from agentpool.errors import CapacityError
from agentpool.kube.api import Resource
from agentpool.kube.informer import Relisted
from agentpool.kube.writehold import WriteHold
from agentpool.supervisor.collaborators import Cluster, Reporting, Spawning
from agentpool.supervisor.elastic import ElasticPool
from agentpool.supervisor.handles import WorkerHandle
from agentpool.supervisor.loopio import LoopIO
from agentpool.supervisor.memlimit import Refusals
from agentpool.supervisor.orphans import reap_orphans
from agentpool.supervisor.selfmetrics import Snapshot
from agentpool.supervisor.statuses import StatusRouter
from agentpool.supervisor.workers import KILL_GRACE_S, Changed, WorkerTable

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
        cluster: Cluster,
        spawning: Spawning,
        reporting: Reporting,
        io: LoopIO,
        clock: Callable[[], float] = time.monotonic,
        loop_period_s: float = LOOP_PERIOD_S,
    ) -> None:
        self.settings = settings
        self.cluster = cluster
        self.spawning = spawning
        self.reporting = reporting
        self.io = io
        """The loop's descriptors; its owner closes it after ``run``."""
        self.clock = clock
        self.loop_period_s = loop_period_s
        self.view = cluster.view
        self.feed = cluster.feed
        self.elastic = cluster.elastic
        self.write_hold = reporting.write_hold
        elastic = cluster.elastic
        self.statuses = StatusRouter(cluster.view, reporting.status, reporting.twin_status,
                                     holds=elastic.holds if elastic is not None else None)
        """Offers each node's status to the writer of the object that carries it."""
        self.table = WorkerTable(settings, cluster, spawning, reporting, self.statuses, io,
                                 clock, loop_period_s)
        """Every owned node's worker: starts, reports, deaths, restarts, stops."""
        self.refusals = Refusals(spawning.memory, self.statuses)
        """The owned nodes the pod's memory limit leaves without a worker."""
        self.signals: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._spec_seen = clock()
        self._next_check = 0.0
        """When the loop's own checks (not a pass over the workers) are due next."""
        self._inputs_changed: set[str] = set()
        """Nodes whose inputs may differ from what their worker was last sent."""
        self._hardware_served = False
        """Whether the NodeHardware publisher was enabled at the last turn."""
        self._scope_stale = True
        """Which nodes this pod owns may have changed: reconcile the worker table."""
        self._awaiting_sync = False
        """No worker starts before every cache has listed once."""
        self._stopping = False
        self._unpublished = Changed.WORKERS
        """What changed in the table since the last published snapshot."""
        self._published_synced: bool | None = None
        """``synced`` of the last published snapshot (the rest changes with the table)."""
        self._publish_after = 0.0
        """A change is published at once from then on, until then at the next check."""
        self.loop_heartbeat = clock()

    @property
    def workers(self) -> dict[str, WorkerHandle]:
        return self.table.workers

    # -- inputs from other threads -------------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals.put(signum)  # only record it; the loop acts

    def install_signal_handlers(self) -> None:
        self.io.wake_on_signals()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

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
        """One turn: wait for something to do, then each phase of the module docstring
        whose guard holds."""
        self._wait()
        now = self.clock()
        self.loop_heartbeat = now
        io, table = self.io, self.table
        if not self.signals.empty():  # 1
            self._take_signals()
            if self._stopping:
                return
        if not self.feed.events.empty():  # 2
            self._apply_events()
        if io.readable:  # 3
            self._note(table.read_reports(now))
        if io.exited:  # 4
            self._note(table.reap(now))
        if self.elastic is not None:  # 5
            self._turn_elastic(self.elastic, now)
        check = now >= self._next_check
        if check:  # 6
            self._next_check = now + self.loop_period_s
            self._check_spec_freshness(now)
        looked = table.due(now) if now >= table.next_look_at() else None
        if looked:  # 7
            self._note(table.look(looked, now))
        if self._scope_stale or (check and self._awaiting_sync):  # 8
            self._reconcile_scope(now)
        if looked:  # 9
            table.follow_up(looked, now)
        if table.queued:  # 10
            self._note(table.start_queued(now))
        hardware = self.reporting.hardware
        served = hardware is not None and hardware.enabled
        if self._inputs_changed or io.writable or served != self._hardware_served:  # 11
            self._deliver_inputs(served, now)
        if io.stalled:  # 12
            table.note_stalled(now)
        if check:  # 13
            reap_orphans()
        if self.write_hold is not None and (check or self._scope_stale):
            self._hold_writes(self.write_hold)
        if self._publish_due(now, check):  # 14
            self._publish(now)

    def _wait(self) -> None:
        """Until something is to do: at once with events or a scope to reconcile, else at
        the earliest of the next check, the next worker's moment and one loop period."""
        busy = self._scope_stale or not self.feed.events.empty()
        due = min(self._next_check, self.table.next_look_at())
        self.io.wait(0.0 if busy else max(0.0, min(self.loop_period_s, due - self.clock())))

    def _note(self, changed: Changed) -> None:
        """Keep what a table operation changed until the phase that acts on it."""
        if changed is Changed.NOTHING:
            return
        self._unpublished |= changed
        if Changed.SCOPE in changed:
            self._scope_stale = True

    def _take_signals(self) -> None:
        while True:
            try:
                signum = self.signals.get_nowait()
            except queue.Empty:
                return
            if signum in (signal.SIGTERM, signal.SIGINT):
                log.info("received %s: stopping all workers", signal.Signals(signum).name)
                self._stopping = True

    def _apply_events(self) -> None:
        events = self.feed.events
        while True:
            try:
                event = events.get_nowait()
            except queue.Empty:
                break
            self._inputs_changed |= self.view.apply(event)
            # Scope is the nodes' labels (and the elastic handoff) once every cache has
            # listed: a change to another object changes inputs only. Rescoping visits every
            # node, and each status this agent writes comes back as such a change.
            if isinstance(event, Relisted) or event.resource is Resource.NODES:
                self._scope_stale = True

    def _turn_elastic(self, elastic: ElasticPool, now: float) -> None:
        """Elastic pool: renewals only while this loop turns; the handoff's actions say which
        nodes may run, and each renewal moves every worker's fence."""
        actions = elastic.turn(self.view.selected())
        node_events = self.reporting.node_events
        if node_events is not None:
            for node, previous in elastic.takeovers().items():
                node_events.taken_over(node, previous)
        if actions:
            running = self.view.elastic_running or set()
            self.view.elastic_running = (running - actions.stop) | actions.start
            self._scope_stale = True
        for node in actions.stop - self.workers.keys():
            elastic.stopped(node)  # never started (or already forgotten): nothing to stop
        fence = elastic.worker_fence()
        if fence != self.table.pod_fence:
            self.table.pod_fence = fence
            self.table.refresh_fences(now)

    def _check_spec_freshness(self, now: float) -> None:
        """Mark desired state stale once unconfirmed by the API for SPEC_READ_TIMEOUT."""
        confirmed_at = self.cluster.spec_confirmed_at
        if confirmed_at is None:
            return
        confirmed = confirmed_at(now)
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

    def _reconcile_scope(self, now: float) -> None:
        self._scope_stale = False
        if not self.cluster.synced():
            # Until every cache has listed, a node may be known without its profiles, and
            # its worker would fall back to host controls: rescoped at each scan instead.
            self._awaiting_sync = True
            return
        self._awaiting_sync = False
        owned = self.view.owned()
        max_workers = self.spawning.max_workers
        if max_workers is not None and len(owned) > max_workers:
            raise CapacityError(
                f"this pod owns {len(owned)} nodes but RLIMIT_NOFILE covers "
                f"{max_workers}: raise the limit or add shards"
            )
        if self.elastic is not None:  # it caches every managed node: the limit holds less
            cached = len(self.view.selected())
            if cached != self.refusals.budget.cached_nodes:
                self.refusals.budget = dataclasses.replace(self.refusals.budget,
                                                           cached_nodes=cached)
        self._note(self.table.let_go(owned, now))
        # A node still stopping from an earlier scope loss keeps its handle until the
        # worker is gone; the table then says the scope may have changed, and it starts
        # again here.
        missing = self.refusals.admit(sorted(owned - self.workers.keys()), len(self.workers))
        if len(missing) > MAX_STARTS_PER_TURN:
            self._scope_stale = True  # the rest next turn, so reports keep flowing
        self.table.add(missing[:MAX_STARTS_PER_TURN])

    def _deliver_inputs(self, served: bool, now: float) -> None:
        """The inputs of the workers' nodes that may have changed since the last turn, the
        latest only, when their pipe takes them; what their NodeHardware depends on, to its
        publisher while NodeHardware is ``served`` (once it becomes served, every worker's
        node: their starts were offered to nobody)."""
        changed, self._inputs_changed = self._inputs_changed, set()
        inputs, apis = self.table.changed_inputs(changed)
        self._note(apis)
        if served and not self._hardware_served:
            self.table.offer_all_hardware(but=inputs)
        self._hardware_served = served
        for node, node_inputs in inputs.items():
            self.table.offer_hardware(node, node_inputs)
        self.table.deliver(inputs, now)

    def _hold_writes(self, hold: WriteHold) -> None:
        """Looked at once a loop period (a pass over every worker), and at each batch of a
        mass start (whose first reports would otherwise be written at once)."""
        if self._scope_stale or self.table.starting():
            hold.hold()
        else:
            hold.release()

    def _publish_due(self, now: float, check: bool) -> bool:
        """A snapshot is of every worker: starts are published at most once a loop period,
        or a mass start (a change at nearly every turn) rebuilt it hundreds of times; exits
        at once."""
        unpublished = self._unpublished
        if unpublished is not Changed.NOTHING and (
            check or now >= self._publish_after or Changed.GONE in unpublished
        ):
            return True
        return check and self.cluster.synced() != self._published_synced

    def _publish(self, now: float) -> None:
        self._unpublished = Changed.NOTHING
        self._publish_after = now + self.loop_period_s
        self._published_synced = synced = self.cluster.synced()
        s = self.settings
        self.reporting.collector.publish(
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
        self.table.endings.agent_stopped(self.workers.values())
        for writer in self.statuses.writers():
            left = deadline - self.clock()
            if not writer.flush(timeout=max(FINAL_STATUS_MIN_S, left)):
                log.warning("not every final status was written in time")
        left_over = self.table.running()
        if left_over:
            log.error("%d workers could not be stopped: %s", len(left_over), sorted(left_over))
        log.info("all workers stopped")
        return code
