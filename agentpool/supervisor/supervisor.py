"""The supervisor's main loop: watch the cluster, run one worker per owned node.

Threads feed it (informers, signal wake-ups) through queues and a self-pipe;
everything that changes worker state happens here, in one thread, so there
are no locks around the worker table. Each turn of the loop:

1. act on recorded signals (handlers only record them);
2. apply informer events to the :class:`ClusterView`;
3. read worker reports (tick results double as heartbeats);
4. notice dead workers, decode how they died, schedule restarts with backoff;
5. kill workers that went silent, SIGKILL workers that overstayed a stop;
6. start/stop workers so that exactly the owned nodes have one, and send each
   worker its node's inputs when they changed.

Why an epoll selector that lives as long as the loop: with 1,000 workers
reporting every 10 s the loop wakes ~100 times a second. Building a poll set
of 2,000 descriptors per wake-up and asking every worker's pipe and process
whether it is ready made each turn O(workers) and cost a third of a core.
Each worker's pipe and exit sentinel are registered once, when it starts, and
unregistered before they are closed, so a turn touches only the workers that
have something to say. The scans over every worker (heartbeats, kill
deadlines, due restarts, the metrics snapshot) run once per ``LOOP_PERIOD_S``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import selectors
import signal
import time
from collections.abc import Callable
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

from prometheus_client.multiprocess import mark_process_dead

from agentpool.config import Settings
from agentpool.kube.informer import InformerEvent
from agentpool.kube.status import StatusWriter
from agentpool.model import TickResult
from agentpool.supervisor import statuses
from agentpool.supervisor.orphans import reap_orphans
from agentpool.supervisor.protocol import Stopped, StopWorker, TickReport
from agentpool.supervisor.scope import ClusterView
from agentpool.supervisor.selfmetrics import Snapshot, SupervisorCollector, WorkerView
from agentpool.supervisor.worker import metrics_id
from agentpool.supervisor.workers import (
    StopReason,
    WorkerHandle,
    WorkerState,
    describe_exit,
    spawn,
)

log = logging.getLogger(__name__)

LOOP_PERIOD_S = 0.5
"""Longest sleep of the loop, and the period of the scans over every worker."""
KILL_GRACE_S = 2.0
"""A silent worker gets SIGTERM, then SIGKILL this much later."""
MAX_STARTS_PER_TURN = 64
"""Start workers in batches so reports keep flowing during a mass start."""


def _node_log(level: int, node: str, message: str, *args: object) -> None:
    """Log an event of one node: the node is the message's first argument and, in JSON
    logs, a ``node`` field to filter on."""
    log.log(level, message, node, *args, extra={"node": node})


class Supervisor:
    """Owns the worker table. Only ``run()``'s thread touches it."""

    def __init__(
        self,
        settings: Settings,
        ctx: ForkServerContext,
        view: ClusterView,
        status: StatusWriter | None,
        collector: SupervisorCollector,
        multiproc_dir: str,
        state_dir: str,
        synced: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.ctx = ctx
        self.view = view
        self.status = status
        self.collector = collector
        self.multiproc_dir = multiproc_dir
        self.state_dir = state_dir
        self.synced = synced
        self.clock = clock
        self.workers: dict[str, WorkerHandle] = {}
        self.events: queue.SimpleQueue[InformerEvent] = queue.SimpleQueue()
        self.signals: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._readable: set[str] = set()
        """Nodes whose worker pipe has data or hit EOF since the last read."""
        self._exited: set[str] = set()
        """Nodes whose worker's exit sentinel fired since the last reap."""
        self._next_scan = 0.0
        self._changed = True
        """A worker started, stopped, died or began running: publish a fresh snapshot."""
        self._dirty: set[str] = set()
        self._scope_dirty = True
        self._stopping = False
        self.loop_heartbeat = clock()

    # -- inputs from other threads -------------------------------------------------------------

    def wake(self) -> None:
        # A full pipe means the loop is already due to wake.
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"\0")

    def feed(self, event: InformerEvent) -> None:
        """Informer sink (called from informer threads)."""
        self.events.put(event)
        self.wake()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals.put(signum)  # only record it; the loop acts

    def install_signal_handlers(self) -> None:
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> int:
        while not self._stopping:
            self._turn()
        return self._shutdown()

    def _turn(self) -> None:
        busy = self._scope_dirty or not self.events.empty()
        self._wait(0.0 if busy else max(0.0, min(LOOP_PERIOD_S, self._next_scan - self.clock())))
        now = self.clock()
        self.loop_heartbeat = now
        self._handle_signals()
        if self._stopping:
            return
        self._apply_events()
        self._read_reports(now)
        self._reap(now)
        scan = now >= self._next_scan
        if scan:
            self._next_scan = now + LOOP_PERIOD_S
            self._check_heartbeats(now)
            self._enforce_kill_deadlines(now)
        if self._scope_dirty:
            self._reconcile_scope(now)
        if scan:
            self._restart_due(now)
        self._send_inputs()
        if scan:
            reap_orphans()
        if scan or self._changed:
            self._publish()

    def _wait(self, timeout: float) -> None:
        for key, _ in self._selector.select(timeout):
            if key.data is None:
                self._drain_wake_pipe()
                continue
            node, what = key.data
            (self._readable if what == "conn" else self._exited).add(node)

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    # -- descriptors: registered with the selector while open ------------------------------------

    def _register(self, fd: int, data: tuple[str, str]) -> None:
        try:
            self._selector.register(fd, selectors.EVENT_READ, data)
        except KeyError:  # a stale entry for a reused number: replace it
            self._selector.modify(fd, selectors.EVENT_READ, data)

    def _unregister(self, fd: int) -> None:
        try:
            self._selector.unregister(fd)
        except (KeyError, ValueError, OSError):
            pass  # never registered, or already gone

    def _watch(self, handle: WorkerHandle) -> None:
        """Register a freshly spawned worker's pipe and exit sentinel."""
        if handle.conn is not None:
            self._register(handle.conn.fileno(), (handle.node, "conn"))
        if handle.process is not None:
            self._register(handle.process.sentinel, (handle.node, "exit"))

    def _close_conn(self, handle: WorkerHandle) -> None:
        conn, handle.conn = handle.conn, None
        self._readable.discard(handle.node)
        if conn is None:
            return
        with contextlib.suppress(OSError):
            self._unregister(conn.fileno())
        conn.close()

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
            self._dirty |= self.view.apply(event)
            changed = True
        if changed:
            self._scope_dirty = True

    # -- reports ---------------------------------------------------------------------------------

    def _read_reports(self, now: float) -> None:
        ready, self._readable = self._readable, set()
        for node in ready:
            handle = self.workers.get(node)
            if handle is not None:
                self._read_from(handle, now)

    def _read_from(self, handle: WorkerHandle, now: float) -> None:
        conn = handle.conn
        if conn is None:
            return
        try:
            while conn.poll(0):
                self._on_message(handle, conn.recv(), now)
        except (EOFError, OSError):
            self._close_conn(handle)  # the process sentinel tells us how it ended

    def _on_message(self, handle: WorkerHandle, message: object, now: float) -> None:
        handle.last_seen = now
        if isinstance(message, TickReport):
            if handle.state is WorkerState.STARTING:
                handle.state = WorkerState.RUNNING
                self._changed = True
                _node_log(
                    logging.INFO, handle.node, "worker for node %s running (pid %s)", handle.pid
                )
            previous = handle.last_result
            handle.last_result = message.result
            if previous is None or previous.status_key() != message.result.status_key():
                _node_log(
                    logging.INFO,
                    handle.node,
                    "node %s: %s %s: %s",
                    message.result.backend.value,
                    message.result.result.value,
                    message.result.message,
                )
            self._offer_status(handle.node, message.result)
        elif isinstance(message, Stopped):
            handle.restore_problems = message.problems

    def _offer_status(self, node: str, result: TickResult, force: bool = False) -> None:
        if self.status is None:
            return
        profile = self.view.telemetry_profile_name(node)
        if profile is not None:
            self.status.offer(profile, node, result, force=force)

    # -- deaths, heartbeats, stops ---------------------------------------------------------------

    def _reap(self, now: float) -> None:
        exited, self._exited = self._exited, set()
        for node in exited:
            handle = self.workers.get(node)
            process = handle.process if handle is not None else None
            if handle is None or process is None:
                continue
            if process.exitcode is None:  # not gone after all: wait for the next wake-up
                continue
            self._read_from(handle, now)  # a Stopped message may still be in the pipe
            how = describe_exit(process.exitcode)
            pid = process.pid
            self._unregister(process.sentinel)
            process.close()
            handle.process = None
            self._changed = True
            self._close_conn(handle)
            ident = metrics_id(node)
            mark_process_dead(ident, self.multiproc_dir)  # type: ignore[no-untyped-call]
            reason = handle.stop_reason
            if reason in (StopReason.SCOPE, StopReason.SHUTDOWN):
                _node_log(logging.INFO, node, "worker for node %s (pid %s) stopped: %s", pid, how)
                if reason is StopReason.SCOPE:
                    self._final_scope_status(handle)
                    self._forget(node)
                    self._scope_dirty = True  # it may have come back meanwhile
                continue
            delay = handle.policy.on_death(handle.started_at, now)
            handle.state = WorkerState.BACKOFF
            handle.restart_at = now + delay
            cause = "unresponsive, killed" if reason is StopReason.HEARTBEAT else "died"
            _node_log(
                logging.ERROR,
                node,
                "worker for node %s (pid %s) %s: %s; restart %d in %.1fs",
                pid,
                cause,
                how,
                handle.policy.restarts + 1,
                delay,
            )
            self._offer_status(
                node, statuses.restarting(cause, how, handle.policy.restarts + 1, delay)
            )

    def _final_scope_status(self, handle: WorkerHandle) -> None:
        """Say why a node is no longer controlled, unless another pod now owns it.

        A node that moved to another shard gets its status from its new owner;
        writing ours too would race with it. A node that was deleted or stopped
        matching the selector has no controller any more, and its status must
        not keep claiming a cap is applied.
        """
        if not self.view.matches_selector(handle.node):
            result = statuses.not_controlled(self.settings, handle.restore_problems)
            self._offer_status(handle.node, result, force=True)

    def _forget(self, node: str) -> None:
        """A node left this pod's scope: drop its worker entry and every metrics file."""
        self.workers.pop(node, None)
        self._changed = True
        ident = metrics_id(node)
        for name in os.listdir(self.multiproc_dir):
            if name.endswith(f"_{ident}.db"):
                Path(self.multiproc_dir, name).unlink(missing_ok=True)
        Path(self.state_dir, f"{ident}.json").unlink(missing_ok=True)

    def _check_heartbeats(self, now: float) -> None:
        limit = self.settings.heartbeat_timeout_s
        for handle in self.workers.values():
            if handle.state not in (WorkerState.STARTING, WorkerState.RUNNING):
                continue
            if now - handle.last_seen > limit and handle.process is not None:
                _node_log(
                    logging.ERROR,
                    handle.node,
                    "worker for node %s (pid %s) silent for %.0fs: terminating",
                    handle.pid,
                    now - handle.last_seen,
                )
                self._stop(handle, StopReason.HEARTBEAT, now, KILL_GRACE_S)

    def _stop(self, handle: WorkerHandle, reason: StopReason, now: float, grace: float) -> None:
        handle.state = WorkerState.STOPPING
        self._changed = True
        handle.stop_reason = reason
        handle.kill_at = now + grace
        if handle.conn is not None:
            with contextlib.suppress(OSError, EOFError):
                handle.conn.send(StopWorker())
        if handle.process is not None and handle.process.exitcode is None:
            handle.process.terminate()

    def _enforce_kill_deadlines(self, now: float) -> None:
        for handle in self.workers.values():
            process = handle.process
            if handle.kill_at is None or process is None or process.exitcode is not None:
                continue
            if now >= handle.kill_at:
                _node_log(
                    logging.WARNING,
                    handle.node,
                    "worker for node %s (pid %s) ignored SIGTERM: SIGKILL",
                    handle.pid,
                )
                process.kill()
                handle.kill_at = None

    # -- scope -----------------------------------------------------------------------------------

    def _reconcile_scope(self, now: float) -> None:
        self._scope_dirty = False
        owned = self.view.owned()
        for node, handle in list(self.workers.items()):
            if node in owned or handle.stop_reason is StopReason.SCOPE:
                continue
            if handle.process is None:  # in backoff: nothing runs, just forget it
                _node_log(
                    logging.INFO, node, "node %s left this pod's scope (its worker was in backoff)"
                )
                self._forget(node)
                continue
            _node_log(logging.INFO, node, "node %s left this pod's scope: stopping its worker")
            self._stop(handle, StopReason.SCOPE, now, self.settings.shutdown_timeout_s)
        # A node still stopping from an earlier scope loss keeps its handle until the
        # worker is gone; _reap then marks the scope dirty and it starts again here.
        for count, node in enumerate(sorted(owned - self.workers.keys())):
            if count >= MAX_STARTS_PER_TURN:
                self._scope_dirty = True  # the rest next turn, so reports keep flowing
                break
            handle = WorkerHandle(node)
            self.workers[node] = handle
            self._start(handle, now)

    def _start(self, handle: WorkerHandle, now: float) -> None:
        journal = str(Path(self.state_dir, f"{metrics_id(handle.node)}.json"))
        spawn(self.ctx, handle, self.settings, journal, now, self.view.inputs_for(handle.node))
        self._watch(handle)
        self._changed = True
        self._dirty.add(handle.node)

    def _restart_due(self, now: float) -> None:
        for handle in self.workers.values():
            due = handle.state is WorkerState.BACKOFF and now >= handle.restart_at
            if due and handle.process is None:
                handle.policy.on_restart()
                _node_log(
                    logging.INFO,
                    handle.node,
                    "restarting worker for node %s (restart %d)",
                    handle.policy.restarts,
                )
                self._start(handle, now)

    def _send_inputs(self) -> None:
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, set()
        for node in dirty:
            handle = self.workers.get(node)
            if handle is None or handle.conn is None or handle.state is WorkerState.STOPPING:
                continue
            inputs = self.view.inputs_for(node)
            if inputs == handle.last_sent:
                continue
            try:
                handle.conn.send(inputs)
                handle.last_sent = inputs
            except (OSError, EOFError):
                self._dirty.add(node)  # retried after the restart

    def _publish(self) -> None:
        self._changed = False
        s = self.settings
        self.collector.publish(
            Snapshot(
                workers={
                    node: WorkerView(h.state, h.policy.restarts, h.pid)
                    for node, h in self.workers.items()
                },
                shard_id=s.pool_shard_id,
                shards=max(1, s.pool_shards),
                synced=self.synced(),
            )
        )

    # -- shutdown --------------------------------------------------------------------------------

    def _shutdown(self) -> int:
        now = self.clock()
        deadline = now + self.settings.shutdown_timeout_s
        for handle in self.workers.values():
            if handle.process is not None and handle.process.exitcode is None:
                self._stop(handle, StopReason.SHUTDOWN, now, self.settings.shutdown_timeout_s)
            else:
                handle.stop_reason = StopReason.SHUTDOWN
        while any(h.process is not None for h in self.workers.values()):
            now = self.clock()
            if now >= deadline:
                for handle in self.workers.values():
                    if handle.process is not None and handle.process.exitcode is None:
                        _node_log(
                            logging.ERROR,
                            handle.node,
                            "worker for node %s did not stop in time: SIGKILL",
                        )
                        handle.process.kill()
                        handle.process.join(2)
                    if handle.process is not None:
                        self._exited.add(handle.node)
                self._reap(self.clock())
                break
            self._wait(min(LOOP_PERIOD_S, deadline - now))
            now = self.clock()
            self._read_reports(now)
            self._reap(now)
        for node, handle in self.workers.items():
            result = statuses.agent_stopped(self.settings, handle.restore_problems)
            self._offer_status(node, result, force=True)
        if self.status is not None:
            self.status.flush(timeout=min(5.0, max(1.0, deadline - self.clock())))
        log.info("all workers stopped")
        return 0
