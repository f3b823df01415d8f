"""The supervisor's main loop: watch the cluster, run one worker per owned node.

Threads feed it (informers, signal wake-ups) through queues and a self-pipe;
everything that changes worker state happens here, in one thread, so there
are no locks around the worker table. Each turn of the loop:

1. act on recorded signals (handlers only record them);
2. apply informer events to the :class:`ClusterView`;
3. read worker reports (tick results double as heartbeats);
4. notice dead workers, decode how they died, schedule restarts with backoff,
   but never start a node's new process while its previous one still runs;
5. kill workers that went silent or stopped reading their pipe, SIGKILL
   workers that overstayed a stop;
6. start/stop workers so that exactly the owned nodes have one, and hand each
   worker its node's latest inputs when its pipe can take them.

Nothing in a turn may block or escape: sends to a worker never block (see
:mod:`agentpool.worker.protocol`), a worker that cannot be started backs
off like one that died, and an unexpected exception ends the loop through
the same orderly shutdown as SIGTERM, with a non-zero exit status.

A turn touches only the workers that have something to say (see
:mod:`agentpool.supervisor.loopio`); the scans over every worker (heartbeats,
kill deadlines, due restarts, the metrics snapshot) run once per
``loop_period_s``.
"""

from __future__ import annotations

import logging
import queue
import signal
import time
from collections.abc import Callable
from logging import ERROR, INFO, WARNING
from typing import Any

from agentpool.config.settings import Settings
from agentpool.errors import CapacityError
from agentpool.kube.api import Resource
from agentpool.kube.informer import InformerEvent
from agentpool.kube.nodehardware import HardwarePublisher
from agentpool.spec.values import NodeApi, NodeInputs, TickResult
from agentpool.supervisor import statuses
from agentpool.supervisor.elastic import ElasticPool
from agentpool.supervisor.handles import (
    Launch,
    StopReason,
    WorkerHandle,
    WorkerState,
    describe_exit,
    pid_running,
)
from agentpool.supervisor.loopio import LoopIO
from agentpool.supervisor.orphans import reap_orphans
from agentpool.supervisor.scope import ClusterView, heartbeat_limit
from agentpool.supervisor.selfmetrics import Snapshot, SupervisorCollector, WorkerView
from agentpool.supervisor.statuses import StatusSink
from agentpool.supervisor.twinview import hardware_inputs
from agentpool.worker.nodefiles import NodeFiles
from agentpool.worker.protocol import (
    ProtocolError,
    Stopped,
    StopWorker,
    TickReport,
    frame,
    receive,
)

log = logging.getLogger(__name__)

LOOP_PERIOD_S = 0.5
"""Longest sleep of the loop, and the period of the scans over every worker."""
KILL_GRACE_S = 2.0
"""A silent worker gets SIGTERM, then SIGKILL this much later; after the shutdown
deadline, how long the SIGKILLed workers are waited for."""
MAX_STARTS_PER_TURN = 64
"""Start workers in batches so reports keep flowing during a mass start."""
FINAL_STATUS_MIN_S = 5.0
"""The final statuses get at least this long to be written, whatever the deadline left."""
EXIT_FATAL = 1
"""Exit status after the loop failed and stopped everything in order."""


def _node_log(level: int, node: str, message: str, *args: object) -> None:
    """Log an event of one node: the node is the message's first argument and, in JSON
    logs, a ``node`` field to filter on."""
    log.log(level, message, node, *args, extra={"node": node})


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
        spec_confirmed: Callable[[], bool] | None = None,
        elastic: ElasticPool | None = None,
    ) -> None:
        self.settings = settings
        self.spec_confirmed = spec_confirmed
        """True while the desired-state watch works (SPEC_READ_TIMEOUT counts from the last)."""
        self._spec_seen = clock()
        self.hardware = hardware
        """Publishes NodeHardware (NodeTwin API, once enabled)."""
        self.twin_status = twin_status
        """Writes NodeTwin ``status.controlStatus`` (NodeTwin API); ``status`` writes
        TelemetryProfile status (profile API)."""
        self.launch = launch
        self.view = view
        self.status = status
        self.collector = collector
        self.files = files
        self.synced = synced
        self.clock = clock
        self.loop_period_s = loop_period_s
        self.max_workers = max_workers
        """How many workers the descriptor limit allows; owning more nodes is fatal."""
        self.elastic = elastic
        """Elastic pool membership and handoff; None in a static pool or a daemonset."""
        self.workers: dict[str, WorkerHandle] = {}
        self.events: queue.SimpleQueue[InformerEvent] = queue.SimpleQueue()
        self.signals: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.io = LoopIO()
        self._next_scan = 0.0
        self._table_changed = True
        """A worker started, stopped, died or began running: publish a fresh snapshot."""
        self._inputs_changed: set[str] = set()
        """Nodes whose inputs may differ from what their worker was last sent."""
        self._scope_stale = True
        """Which nodes this pod owns may have changed: reconcile the worker table."""
        self._awaiting_sync = False
        """No worker starts before every cache has listed once."""
        self._stopping = False
        self.loop_heartbeat = clock()
        self._apis: dict[str, NodeApi] = {}
        """The API each worker's node follows, as last logged (``agentpool_node_api``)."""
        self._status_homes: dict[str, tuple[Resource, str]] = {}
        """Where each node's status was last offered: the other API's object gets a last
        word when the node moves (:meth:`_hand_over`)."""

    # -- inputs from other threads -------------------------------------------------------------

    def feed(self, event: InformerEvent) -> None:
        """Informer sink (called from informer threads)."""
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
        until_scan = max(0.0, min(self.loop_period_s, self._next_scan - self.clock()))
        self.io.wait(0.0 if busy else until_scan)
        now = self.clock()
        self.loop_heartbeat = now
        self._handle_signals()
        if self._stopping:
            return
        self._apply_events()
        self._read_reports(now)
        self._reap(now)
        self._turn_elastic()
        scan = now >= self._next_scan
        if scan:
            self._next_scan = now + self.loop_period_s
            self._check_heartbeats(now)
            self._enforce_kill_deadlines(now)
            self._check_lingering(now)
            self._check_spec_freshness(now)
        if self._scope_stale or (scan and self._awaiting_sync):
            self._reconcile_scope(now)
        if scan:
            self._restart_due(now)
        self._deliver_inputs(now)
        if scan:
            reap_orphans()
        if scan or self._table_changed:
            self._publish()

    def _turn_elastic(self) -> None:
        """Elastic pool: renewals only while this loop turns; the handoff says what may run."""
        if self.elastic is None:
            return
        self.elastic.turn(self.view.selected())
        for node in self.elastic.releasing() - self.workers.keys():
            self.elastic.stopped(node)  # never started (or already forgotten): nothing to stop
        running = self.elastic.running()
        if running != self.view.elastic_running:
            self.view.elastic_running = running
            self._scope_stale = True

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
        changed = False
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                break
            self._inputs_changed |= self.view.apply(event)
            changed = True
        if changed:
            self._scope_stale = True

    # -- reports ---------------------------------------------------------------------------------

    def _read_reports(self, now: float) -> None:
        ready, self.io.readable = self.io.readable, set()
        for node in ready:
            handle = self.workers.get(node)
            if handle is not None:
                self._read_from(handle, now)

    def _read_from(self, handle: WorkerHandle, now: float) -> None:
        conn = handle.conn
        if conn is None:
            return
        try:
            messages, closed = receive(conn.fileno(), handle.inbox)
        except ProtocolError as exc:
            what = "worker for node %s (pid %s) sent %s: stopping it"
            _node_log(ERROR, handle.node, what, handle.pid, exc)
            self.io.close_conn(handle)
            if handle.state in (WorkerState.STARTING, WorkerState.RUNNING):
                self._stop(handle, StopReason.PROTOCOL, now, KILL_GRACE_S)
            return
        except OSError:
            messages, closed = [], True
        for message in messages:
            self._on_message(handle, message, now)
        if closed:
            self.io.close_conn(handle)  # the process sentinel tells us how it ended

    def _on_message(self, handle: WorkerHandle, message: object, now: float) -> None:
        handle.last_seen = now
        if isinstance(message, TickReport):
            if handle.state is WorkerState.STARTING:
                handle.state = WorkerState.RUNNING
                self._table_changed = True
                _node_log(INFO, handle.node, "worker for node %s running (pid %s)", handle.pid)
            previous, result = handle.last_result, message.result
            handle.last_result = result
            if previous is None or previous.status_key() != result.status_key():
                what = (result.backend.value, result.result.value, result.message)
                _node_log(INFO, handle.node, "node %s: %s %s: %s", *what)
            self._offer_status(handle.node, message.result)
        elif isinstance(message, Stopped):
            handle.restore_problems = message.problems
            handle.crash = message.crash

    def _writer(self, resource: Resource) -> StatusSink | None:
        return self.twin_status if resource is Resource.NODE_TWINS else self.status

    def _offer_status(self, node: str, result: TickResult, force: bool = False) -> None:
        target = self.view.status_target(node)
        previous = self._status_homes.get(node)
        if previous is not None and previous != target:
            self._hand_over(node, previous, target, result)
        if target is None:
            self._status_homes.pop(node, None)
            return
        self._status_homes[node] = target
        resource, name = target
        writer = self._writer(resource)
        if writer is not None:
            writer.offer(name, node, result, force=force)

    def _hand_over(
        self,
        node: str,
        previous: tuple[Resource, str],
        target: tuple[Resource, str] | None,
        last: TickResult,
    ) -> None:
        """The node's status moved to another object (it follows the other API now): the one
        it leaves says so, rather than go on claiming what it last said. Not written to an
        object that is gone or that now targets another node (that node writes it)."""
        resource, name = previous
        writer = self._writer(resource)
        if writer is None or not self.view.targets(resource, name, node):
            return
        writer.offer(name, node, statuses.with_gpu(statuses.moved(target), last), force=True)

    def _note_api(self, node: str) -> None:
        """Log once, and export, which API the node follows when that changes."""
        api = self.view.api_of(node)
        if self._apis.get(node) is api:
            return
        self._apis[node] = api
        self._table_changed = True
        _node_log(INFO, node, "node %s follows %s", self.view.describe_api(node, api))

    # -- deaths ----------------------------------------------------------------------------------

    def _reap(self, now: float) -> None:
        exited, self.io.exited = self.io.exited, set()
        for node in exited:
            handle = self.workers.get(node)
            process = handle.process if handle is not None else None
            if handle is None or process is None:
                continue
            if process.exitcode is None:  # not gone after all: wait for the next wake-up
                continue
            self._read_from(handle, now)  # a Stopped message may still be in the pipe
            handle.exit_how = describe_exit(process.exitcode)
            pid = process.pid
            self.io.unregister(process.sentinel)
            process.close()
            handle.process = None
            self._table_changed = True
            self.io.close_conn(handle)
            if pid is not None and pid_running(pid):
                # Reported dead by a fork server that lost it, yet still restoring the
                # host: one process per node, so nothing starts until it is gone.
                handle.lingering, handle.state = pid, WorkerState.STOPPING
                handle.kill_at = now + self.settings.shutdown_timeout_s
                message = "worker for node %s (pid %s) %s but is still running: waiting for it"
                _node_log(WARNING, node, message, pid, handle.exit_how)
                continue
            self._settle(handle, pid, now)

    def _settle(self, handle: WorkerHandle, pid: int | None, now: float) -> None:
        """The node's process is gone for sure: forget it, or schedule its restart."""
        node, how, reason = handle.node, handle.exit_how, handle.stop_reason
        self.files.worker_gone(node)
        if reason in (StopReason.SCOPE, StopReason.SHUTDOWN):
            _node_log(INFO, node, "worker for node %s (pid %s) stopped: %s", pid, how)
            if reason is StopReason.SCOPE:
                self._final_scope_status(handle)
                self._forget(node)
                self._scope_stale = True  # it may have come back meanwhile
            return
        cause = "died"
        if reason is StopReason.HEARTBEAT:
            cause = "unresponsive, killed"
        elif reason is StopReason.PROTOCOL:
            cause = "sent a corrupt message, stopped"
        delay = self._back_off(handle, now, handle.started_at)
        restart = handle.policy.restarts + 1
        crash = f" ({handle.crash})" if handle.crash else ""
        message = "worker for node %s (pid %s) %s: %s%s; restart %d in %.1fs"
        _node_log(ERROR, node, message, pid, cause, how, crash, restart, delay)
        restarting = statuses.restarting(cause, how, restart, delay)
        self._offer_status(node, statuses.with_gpu(restarting, handle.last_result))

    def _back_off(self, handle: WorkerHandle, now: float, started_at: float) -> float:
        self._table_changed = True
        return handle.back_off(now, started_at)

    def _check_lingering(self, now: float) -> None:
        for handle in list(self.workers.values()):
            if handle.lingering is not None and not pid_running(handle.lingering):
                pid, handle.lingering = handle.lingering, None
                self._settle(handle, pid, now)

    def _final_scope_status(self, handle: WorkerHandle) -> None:
        """Say why a node is no longer controlled, unless another pod now owns it.

        A node that moved to another shard gets its status from its new owner;
        writing ours too would race with it. A node that was deleted or stopped
        matching the selector has no controller any more, and its status must
        not keep claiming a cap is applied.
        """
        if not self.view.matches_selector(handle.node):
            result = statuses.not_controlled(self.settings, handle.restore_problems)
            result = statuses.with_gpu(result, handle.last_result)
            self._offer_status(handle.node, result, force=True)

    def _forget(self, node: str) -> None:
        """A node left this pod's scope: drop its worker entry and its files."""
        self.workers.pop(node, None)
        if self.elastic is not None:
            self.elastic.stopped(node)  # its worker is gone: the claim may be released
        self._table_changed = True
        self._apis.pop(node, None)
        self._status_homes.pop(node, None)
        self.files.forget(node)
        if self.hardware is not None:
            self.hardware.forget(node)

    # -- heartbeats and stops --------------------------------------------------------------------

    def _check_heartbeats(self, now: float) -> None:
        for handle in self.workers.values():
            if (why := handle.hung(now)) is None:
                continue
            message = "worker for node %s (pid %s) %s: terminating"
            _node_log(ERROR, handle.node, message, handle.pid, why)
            self._stop(handle, StopReason.HEARTBEAT, now, KILL_GRACE_S)

    def _set_heartbeat(self, handle: WorkerHandle, inputs: NodeInputs) -> None:
        """The worker is being given ``inputs``; its heartbeat limit follows them."""
        handle.heartbeat_s = heartbeat_limit(self.settings, inputs.telemetry_profile)

    def _check_spec_freshness(self, now: float) -> None:
        """Mark desired state stale after SPEC_READ_TIMEOUT without a working watch."""
        if self.spec_confirmed is None:
            return
        if self.spec_confirmed():
            self._spec_seen = now
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

    def _stop(self, handle: WorkerHandle, reason: StopReason, now: float, grace: float) -> None:
        handle.state = WorkerState.STOPPING
        self._table_changed = True
        handle.stop_reason = reason
        handle.kill_at = now + grace
        handle.unsent = None
        if handle.conn is not None and not handle.outbox:
            handle.outbox += frame(StopWorker())
            self.io.flush(handle, now)
        if handle.process is not None and handle.process.exitcode is None:
            handle.process.terminate()

    def _enforce_kill_deadlines(self, now: float) -> None:
        """SIGKILL what overstayed a stop: a worker, or a lingering predecessor."""
        for handle in self.workers.values():
            if handle.kill_at is not None and now >= handle.kill_at and handle.kill():
                message = "worker for node %s (pid %s) did not stop in time: SIGKILL"
                _node_log(WARNING, handle.node, message, handle.pid or handle.lingering)
            if handle.kill_at is not None and now >= handle.kill_at:
                handle.kill_at = None

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
        for node, handle in list(self.workers.items()):
            if node in owned or handle.stop_reason is StopReason.SCOPE:
                continue
            if handle.lingering is not None:  # settled, and forgotten, once it is gone
                handle.stop_reason = StopReason.SCOPE
            elif handle.process is None:  # in backoff: nothing runs, just forget it
                _node_log(INFO, node, "node %s left this pod's scope (its worker was in backoff)")
                self._forget(node)
            else:
                _node_log(INFO, node, "node %s left this pod's scope: stopping its worker")
                self._stop(handle, StopReason.SCOPE, now, self.settings.shutdown_timeout_s)
        # A node still stopping from an earlier scope loss keeps its handle until the
        # worker is gone; _settle then marks the scope stale and it starts again here.
        for count, node in enumerate(sorted(owned - self.workers.keys())):
            if count >= MAX_STARTS_PER_TURN:
                self._scope_stale = True  # the rest next turn, so reports keep flowing
                break
            handle = WorkerHandle(node)
            self.workers[node] = handle
            self._start(handle, now)

    def _start(self, handle: WorkerHandle, now: float) -> None:
        inputs = self.view.inputs_for(handle.node)
        self._note_api(handle.node)
        try:
            process, conn = self.launch(handle.node, inputs)
        except (OSError, EOFError) as exc:  # EMFILE, ENOMEM, an unreachable fork server
            delay = self._back_off(handle, now, now)
            how = f"{type(exc).__name__}: {exc}"
            message = "worker for node %s could not be started: %s; retry in %.1fs"
            _node_log(ERROR, handle.node, message, how, delay)
            status = statuses.restarting("not started", how, handle.policy.restarts + 1, delay)
            self._offer_status(handle.node, status)
            return
        handle.started(process, conn, now)
        handle.last_sent = inputs
        self._set_heartbeat(handle, inputs)
        self.io.add_worker(handle)
        self._table_changed = True

    def _restart_due(self, now: float) -> None:
        for handle in self.workers.values():
            due = handle.state is WorkerState.BACKOFF and now >= handle.restart_at
            if due and handle.process is None and handle.lingering is None:
                handle.policy.on_restart()
                message = "restarting worker for node %s (restart %d)"
                _node_log(INFO, handle.node, message, handle.policy.restarts)
                self._start(handle, now)

    # -- sending inputs: only the latest, only when the pipe can take it -------------------------

    def _deliver_inputs(self, now: float) -> None:
        changed, self._inputs_changed = self._inputs_changed, set()
        for node in changed:
            handle = self.workers.get(node)
            if handle is None:
                continue
            self._note_api(node)
            if handle.conn is None or handle.state is WorkerState.STOPPING:
                continue
            inputs = self.view.inputs_for(node)
            if self.hardware is not None and self.hardware.enabled:
                self.hardware.offer(
                    hardware_inputs(
                        self.settings,
                        node,
                        self.view.node_objects.get(node),
                        inputs.telemetry_profile,
                    )
                )
            handle.unsent = None if inputs == handle.last_sent else inputs
            if handle.unsent is not None:
                self._set_heartbeat(handle, inputs)
            self.io.flush(handle, now)
        writable, self.io.writable = self.io.writable, set()
        for node in writable - changed:
            handle = self.workers.get(node)
            if handle is not None:
                self.io.flush(handle, now)

    def _publish(self) -> None:
        self._table_changed = False
        s = self.settings
        self.collector.publish(
            Snapshot(
                workers={
                    node: WorkerView(h.state, h.policy.restarts, h.pid, self._apis.get(node))
                    for node, h in self.workers.items()
                },
                shard_id=s.pool_shard_id,
                shards=max(1, s.pool_shards),
                synced=self.synced(),
            )
        )

    # -- shutdown --------------------------------------------------------------------------------

    def _shutdown(self, code: int) -> int:
        """Stop every worker at once, SIGKILL all that overstay together, write final statuses."""
        now = self.clock()
        deadline = now + self.settings.shutdown_timeout_s
        for handle in self.workers.values():
            if handle.process is not None and handle.process.exitcode is None:
                self._stop(handle, StopReason.SHUTDOWN, now, self.settings.shutdown_timeout_s)
            else:
                handle.stop_reason = StopReason.SHUTDOWN
        self._await_exits(deadline)
        if self._running():
            self._kill_all()
            self._await_exits(self.clock() + KILL_GRACE_S)
        for node, handle in self.workers.items():
            result = statuses.agent_stopped(self.settings, handle.restore_problems)
            result = statuses.with_gpu(result, handle.last_result)
            self._offer_status(node, result, force=True)
        for writer in (self.status, self.twin_status):
            if writer is None:
                continue
            left = deadline - self.clock()
            if not writer.flush(timeout=max(FINAL_STATUS_MIN_S, left)):
                log.warning("not every final status was written in time")
        left_over = self._running()
        if left_over:
            log.error("%d workers could not be stopped: %s", len(left_over), sorted(left_over))
        log.info("all workers stopped")
        return code

    def _running(self) -> set[str]:
        return {n for n, h in self.workers.items() if h.process is not None or h.lingering}

    def _await_exits(self, deadline: float) -> None:
        while self._running():
            now = self.clock()
            if now >= deadline:
                return
            self.io.wait(min(self.loop_period_s, deadline - now))
            now = self.clock()
            self._read_reports(now)
            self._reap(now)
            self._check_lingering(now)

    def _kill_all(self) -> None:
        running = self._running()
        log.error("%d workers did not stop in time: SIGKILL to all of them", len(running))
        for node in running:
            handle = self.workers[node]
            handle.kill()
            if handle.process is not None:
                self.io.exited.add(node)  # its sentinel fires; reap it even if it already did
