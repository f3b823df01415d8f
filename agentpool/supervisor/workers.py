"""The supervisor's worker table: each owned node's worker, from its start to its end.

Owns the :class:`~agentpool.supervisor.handles.WorkerHandle` of every node
this pod runs: starting a worker (and backing off when that fails), reading
its reports (tick results double as heartbeats), noticing its death and
deciding how it died, scheduling its restart, stopping it and SIGKILLing it
when it overstays, and never starting a node's new process while its
previous one still runs. The loop (:mod:`agentpool.supervisor.loop`) decides
which nodes need a worker; this table carries that out. Only the loop's
thread touches it.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Sequence
from logging import ERROR, INFO, WARNING

from agentpool.config.settings import Settings
from agentpool.errors import PipeProtocolError
from agentpool.pool.fence import FenceTimes
from agentpool.resources.nodeinputs import NodeApi, NodeInputs
from agentpool.results import GpuSeen, TickResult
from agentpool.supervisor import fences
from agentpool.supervisor.clusterview import heartbeat_limit
from agentpool.supervisor.collaborators import Cluster, Reporting, Spawning
from agentpool.supervisor.deadlines import Deadlines, next_check
from agentpool.supervisor.endings import Endings, node_log
from agentpool.supervisor.forkclient import Deferred
from agentpool.supervisor.handles import WorkerHandle, launch_all, pid_running
from agentpool.supervisor.lifecycle import (
    ALIVE,
    LIVE,
    WAITING,
    StopReason,
    Then,
    WorkerState,
    after_exit,
)
from agentpool.supervisor.loopio import LoopIO
from agentpool.supervisor.selfmetrics import WorkerView, worker_view
from agentpool.supervisor.statuses import StatusRouter
from agentpool.supervisor.twinview import hardware_inputs
from agentpool.worker.protocol import (
    DUMP_SIGNAL,
    Stopped,
    StopWorker,
    Ticked,
    TickReport,
    frame,
    receive,
)

log = logging.getLogger(__name__)

FULL_PASS_S = 30.0
"""How often the loop looks at every worker, whatever their deadlines say
(:mod:`agentpool.supervisor.deadlines` has it look at each one when its own moment
comes). A safety net only: it bounds how late a deadline that moved where nobody
rescheduled it is acted on."""

KILL_GRACE_S = 2.0
"""A silent worker gets SIGTERM, then SIGKILL this much later; after the shutdown
deadline, how long the SIGKILLed workers are waited for."""


class Changed(enum.Flag):
    """What a table operation changed that the loop must act on (several may hold)."""

    NOTHING = 0
    WORKERS = enum.auto()
    """A worker started, stopped, died, began running or follows another API: publish a
    fresh snapshot (the loop coalesces these to one a loop period)."""
    GONE = enum.auto()
    """A worker exited or its node was forgotten: publish at once, so that ``/metrics``
    never shows a worker that is no more."""
    SCOPE = enum.auto()
    """A node left the table for good: which nodes this pod owns may have changed."""


EXITED = Changed.WORKERS | Changed.GONE


def _gpu_seen(result: TickResult | None) -> GpuSeen | None:
    """What the worker's GPU backend last showed of the node's GPUs (NodeHardware's)."""
    return result.gpu.seen if result is not None and result.gpu is not None else None


class WorkerTable:
    """Every owned node's worker handle, and what happens to it. Not thread safe.

    Each operation the loop calls returns what it :class:`Changed`; the table keeps no
    flags for the loop."""

    def __init__(
        self,
        settings: Settings,
        cluster: Cluster,
        spawning: Spawning,
        reporting: Reporting,
        statuses: StatusRouter,
        io: LoopIO,
        clock: Callable[[], float] = time.monotonic,
        loop_period_s: float = 0.5,
    ) -> None:
        self.settings = settings
        self.view = cluster.view
        self.elastic = cluster.elastic
        self.launch = spawning.launch
        self.files = spawning.files
        self.deaths = spawning.deaths
        self.statuses = statuses
        self.hardware = reporting.hardware
        self.node_events = reporting.node_events
        self.endings = Endings(settings, cluster.view, statuses, reporting.node_events)
        self.io = io
        self.clock = clock
        self.loop_period_s = loop_period_s
        self.workers: dict[str, WorkerHandle] = {}
        self.apis: dict[str, NodeApi] = {}
        """The API each worker's node follows, as last logged (``agentpool_node_api``)."""
        self.pod_fence: FenceTimes | None = None
        """Elastic pool: the fence every worker holds (the loop sets it at each renewal)."""
        self.deadlines = Deadlines(loop_period_s)
        """When to look at each worker next (:meth:`schedule` whenever one's deadlines
        move earlier)."""
        self._full_pass_at = 0.0
        self.queued: list[WorkerHandle] = []
        """Workers to start at the end of the turn (:meth:`start_queued`), in one batch."""

    # -- when to look at a worker ----------------------------------------------------------------

    def schedule(self, handle: WorkerHandle, now: float) -> None:
        """One of the worker's deadlines may have moved earlier: look at it in time."""
        at = next_check(handle, self.elastic is not None, now, self.loop_period_s,
                        self.settings.reconcile_interval_s)
        self.deadlines.schedule(handle, at)

    def next_look_at(self) -> float:
        """When :meth:`due` has workers to give next."""
        return min(self.deadlines.next_at(), self._full_pass_at)

    def due(self, now: float) -> list[WorkerHandle]:
        """The workers whose moment came (every one, every :data:`FULL_PASS_S`)."""
        due = self.deadlines.due(now)
        if now >= self._full_pass_at:
            self._full_pass_at = now + FULL_PASS_S
            due = list(self.workers.values())
        return [h for h in due if self.workers.get(h.node) is h]

    def look(self, handles: list[WorkerHandle], now: float) -> Changed:
        """Heartbeat limits, kill deadlines, lingering predecessors of the workers
        :meth:`due` gave; their restarts follow in :meth:`follow_up`, once the scope is
        reconciled."""
        changed = Changed.NOTHING
        for handle in handles:
            if (why := handle.hung(now)) is not None:
                changed |= self._kill_hung(handle, why, now)
            self._enforce_kill_deadline(handle, now)
            if handle.state is WorkerState.LINGERING:
                changed |= self._check_lingering(handle, now)
        return changed

    def follow_up(self, handles: list[WorkerHandle], now: float) -> None:
        """The rest of a look: restarts that are due (of nodes still owned) queued, fence
        renewals; then when to look at each again."""
        for handle in handles:
            if self.workers.get(handle.node) is not handle:
                continue  # forgotten meanwhile
            if self._restart_due(handle, now):
                self.queued.append(handle)
            self.send_fence(handle, now)
            self.schedule(handle, now)

    def note_stalled(self, now: float) -> None:
        """Schedule the heartbeat limit of each worker whose pipe began refusing messages."""
        stalled, self.io.stalled = self.io.stalled, set()
        for node in stalled:
            if (handle := self.workers.get(node)) is not None:
                self.schedule(handle, now)

    def note_api(self, node: str) -> bool:
        """Log once, and export, which API the node follows when that changes; whether it
        did."""
        api = self.view.api_of(node)
        if self.apis.get(node) is api:
            return False
        self.apis[node] = api
        node_log(INFO, node, "node %s follows %s", self.view.describe_api(node, api))
        return True

    # -- reports ---------------------------------------------------------------------------------

    def read_reports(self, now: float) -> Changed:
        """What the workers whose pipe is readable said."""
        ready, self.io.readable = self.io.readable, set()
        changed = False
        for node in ready:
            handle = self.workers.get(node)
            if handle is not None and self._read_from(handle, now):
                changed = True
        return Changed.WORKERS if changed else Changed.NOTHING

    def _read_from(self, handle: WorkerHandle, now: float) -> bool:
        """Read what the worker's pipe holds now (never blocking) and act on each message;
        whether the worker began running or was stopped."""
        conn = handle.conn
        if conn is None:
            return False
        try:
            messages, closed = receive(conn.fileno(), handle.inbox)
        except PipeProtocolError as exc:
            what = "worker for node %s (pid %s) sent %s: stopping it"
            node_log(ERROR, handle.node, what, handle.pid, exc)
            self.io.close_conn(handle)
            if handle.state not in LIVE:
                return False
            self.stop(handle, StopReason.PROTOCOL, now, KILL_GRACE_S)
            return True
        except OSError:
            messages, closed = [], True
        began = False
        for message in messages:
            began = self._on_message(handle, message, now) or began
        if closed:
            self.io.close_conn(handle)  # the process sentinel tells us how it ended
        return began

    def _on_message(self, handle: WorkerHandle, message: object, now: float) -> bool:
        """Act on one message; whether it was the worker's first tick."""
        handle.last_seen = now
        if isinstance(message, Ticked):  # most steady ticks: the last result stands
            if handle.last_result is not None:
                self.statuses.offer(handle.node, handle.last_result)
            return False
        began = False
        if isinstance(message, TickReport):
            if handle.state is WorkerState.STARTING:
                handle.transition(WorkerState.RUNNING)
                began = True
                node_log(INFO, handle.node, "worker for node %s running (pid %s)", handle.pid)
            previous, result = handle.last_result, message.result
            handle.last_result = result
            if _gpu_seen(previous) != _gpu_seen(result) and handle.last_sent is not None:
                self.offer_hardware(handle.node, handle.last_sent)
            if previous is None or previous.status_key() != result.status_key():
                what = (result.backend.value, result.result.value, result.message)
                node_log(INFO, handle.node, "node %s: %s %s: %s", *what)
            self.statuses.offer(handle.node, message.result)
            if self.node_events is not None:
                self.node_events.tick(handle.node, result)
        elif isinstance(message, Stopped):
            handle.restore_problems = message.problems
            handle.exit_reason = message.reason
        return began

    # -- deaths ----------------------------------------------------------------------------------

    def reap(self, now: float) -> Changed:
        """The workers whose exit sentinel fired: each is settled, or waited for while its
        process still runs."""
        exited, self.io.exited = self.io.exited, set()
        changed = Changed.NOTHING
        for node in exited:
            handle = self.workers.get(node)
            process = handle.process if handle is not None else None
            if handle is None or process is None:
                continue
            if process.exitcode is None:  # not gone after all: wait for the next wake-up
                continue
            self._read_from(handle, now)  # a Stopped message may still be in the pipe
            how = self.deaths.describe(process.exitcode, expected=handle.stop_reason is not None)
            pid = process.pid
            self.io.unregister(process.sentinel)
            process.close()
            handle.ended(process.exitcode, how)
            changed |= EXITED
            self.io.close_conn(handle)
            if pid is not None and pid_running(pid):
                # Reported dead by a fork server that lost it, yet still restoring the
                # host: one process per node, so nothing starts until it is gone.
                handle.lingers(pid, now + self.settings.shutdown_timeout_s)
                self.schedule(handle, now)
                message = "worker for node %s (pid %s) %s but is still running: waiting for it"
                node_log(WARNING, node, message, pid, handle.exit_how)
                continue
            changed |= self._settle(handle, pid, now)
        return changed

    def _settle(self, handle: WorkerHandle, pid: int | None, now: float) -> Changed:
        """The node's process is gone for sure: do what the restart decision says."""
        reason = handle.stop_reason
        self.files.worker_gone(handle.node)
        decision = after_exit(reason, handle.exit_code)
        if decision.then is Then.START_AGAIN:
            self.endings.fenced_itself(handle, pid)
            handle.wait_until(now)
            self.schedule(handle, now)
            return Changed.WORKERS
        if decision.then is Then.BACK_OFF:
            delay = self._back_off(handle, now, handle.started_at)
            self.endings.failed(handle, pid, decision.cause, handle.exit_how, handle.exit_reason,
                                delay, self.clock())
            return Changed.WORKERS
        assert reason is not None  # FORGET, STAY_STOPPED: the supervisor stopped it
        self.endings.stopped(handle, pid, reason)
        if decision.then is Then.FORGET:
            return self.forget(handle.node) | Changed.SCOPE  # it may have come back meanwhile
        handle.stopped()
        return Changed.NOTHING

    def _back_off(self, handle: WorkerHandle, now: float, started_at: float) -> float:
        delay = handle.back_off(now, started_at)
        self.schedule(handle, now)
        return delay

    def check_lingering(self, now: float) -> Changed:
        changed = Changed.NOTHING
        for handle in list(self.workers.values()):
            changed |= self._check_lingering(handle, now)
        return changed

    def _check_lingering(self, handle: WorkerHandle, now: float) -> Changed:
        pid = handle.lingering
        if handle.state is WorkerState.LINGERING and pid is not None and not pid_running(pid):
            return self._settle(handle, pid, now)
        return Changed.NOTHING

    def offer_hardware(self, node: str, inputs: NodeInputs) -> None:
        """What the node's NodeHardware depends on, to its publisher (while NodeHardware is
        served): at the worker's start, and whenever it may have changed."""
        if self.hardware is None or not self.hardware.enabled:
            return
        handle = self.workers.get(node)
        seen = _gpu_seen(handle.last_result) if handle is not None else None
        self.hardware.offer(hardware_inputs(
            self.settings, node, self.view.node_objects.get(node), inputs.telemetry_profile, seen
        ))

    def offer_all_hardware(self, but: dict[str, NodeInputs]) -> None:
        """Every worker's node but those in ``but`` (NodeHardware just became served: their
        starts were offered to nobody)."""
        for node, handle in self.workers.items():
            if handle.last_sent is not None and node not in but:
                self.offer_hardware(node, handle.last_sent)

    def forget(self, node: str) -> Changed:
        """A node left this pod's scope: drop its worker entry and its files."""
        handle = self.workers.pop(node, None)
        if handle is not None:
            handle.stopped()
        if self.elastic is not None:
            self.elastic.stopped(node)  # its worker is gone: the claim may be released
        self.apis.pop(node, None)
        self.statuses.forget(node)
        self.files.forget(node)
        if self.hardware is not None:
            self.hardware.forget(node)
        if self.node_events is not None:
            self.node_events.forget(node)
        return EXITED

    # -- heartbeats and stops --------------------------------------------------------------------

    def _kill_hung(self, handle: WorkerHandle, why: str, now: float) -> Changed:
        message = ("worker for node %s (pid %s) %s: its stack follows (%s), then SIGTERM, "
                   "and SIGKILL in %gs")
        node_log(ERROR, handle.node, message, handle.pid, why, DUMP_SIGNAL.name, KILL_GRACE_S)
        handle.dump_stack()
        return self.stop(handle, StopReason.HEARTBEAT, now, KILL_GRACE_S)

    def set_heartbeat(self, handle: WorkerHandle, inputs: NodeInputs, now: float) -> None:
        """The worker is being given ``inputs``; its heartbeat limit follows them."""
        handle.heartbeat_s = heartbeat_limit(self.settings, inputs.telemetry_profile)
        self.schedule(handle, now)

    def stop(self, handle: WorkerHandle, reason: StopReason, now: float, grace: float) -> Changed:
        """Ask the node's process to stop for ``reason`` (a stop message, SIGTERM), SIGKILL
        after ``grace``."""
        handle.to_stop(reason, now + grace)
        self.schedule(handle, now)
        handle.unsent = None
        if handle.conn is not None and not handle.outbox:
            handle.outbox += frame(StopWorker())
            self.io.flush(handle, now)
        if handle.process is not None and handle.process.exitcode is None:
            handle.process.terminate()
        return Changed.WORKERS

    def _enforce_kill_deadline(self, handle: WorkerHandle, now: float) -> None:
        """SIGKILL what overstayed a stop: a worker, or a lingering predecessor."""
        if handle.kill_at is None or now < handle.kill_at:
            return
        if handle.kill():
            message = "worker for node %s (pid %s) did not stop in time: SIGKILL"
            node_log(WARNING, handle.node, message, handle.pid or handle.lingering)
        handle.kill_at = None

    # -- scope: which nodes have a worker ------------------------------------------------------

    def let_go(self, owned: set[str] | frozenset[str], now: float) -> Changed:
        """Stop, or forget, the worker of each node not in ``owned`` (once: a worker
        stopping for scope already is left to finish)."""
        changed = Changed.NOTHING
        for node, handle in list(self.workers.items()):
            if node in owned or handle.stop_reason is StopReason.SCOPE:
                continue
            if handle.state is WorkerState.LINGERING:  # settled, and forgotten, once gone
                handle.to_stop(StopReason.SCOPE, handle.kill_at)
            elif handle.state in WAITING:  # nothing runs: just forget it
                node_log(INFO, node, "node %s left this pod's scope (its worker was in backoff)")
                changed |= self.forget(node)
            else:
                node_log(INFO, node, "node %s left this pod's scope: stopping its worker")
                changed |= self.stop(handle, StopReason.SCOPE, now,
                                     self.settings.shutdown_timeout_s)
        return changed

    def add(self, nodes: Sequence[str]) -> None:
        """A worker for each of ``nodes`` (none has one), started with the turn's others."""
        batch = [WorkerHandle(node) for node in nodes]
        self.workers.update((h.node, h) for h in batch)
        self.queued += batch

    def start_queued(self, now: float) -> Changed:
        """Start the turn's workers, restarts and new nodes together: one batch, so one
        deadline at the fork server per turn."""
        queued, self.queued = self.queued, []
        return self.start_many(queued, now)

    def start_many(self, handles: Sequence[WorkerHandle], now: float) -> Changed:
        """Start each handle's worker with its node's current inputs, in one batch."""
        if not handles:
            return Changed.NOTHING
        inputs = [self.view.inputs_for(h.node) for h in handles]
        for handle in handles:
            self.note_api(handle.node)
        try:
            starts = [(h.node, i) for h, i in zip(handles, inputs, strict=True)]
            results = launch_all(self.launch, starts)
        except OSError as exc:  # EMFILE before any fork: each node's failure
            results = [exc] * len(handles)
        for handle, node_inputs, result in zip(handles, inputs, results, strict=True):
            if isinstance(result, Deferred):  # not this node's failure: again next turn
                handle.put_off(now + self.loop_period_s)
                self.schedule(handle, now)
                continue
            if isinstance(result, OSError):  # EMFILE, ENOMEM, an unreachable fork server
                delay = self._back_off(handle, now, now)
                self.endings.failed(handle, None, "not started",
                                    f"{type(result).__name__}: {result}", "", delay,
                                    self.clock())
                continue
            process, conn = result
            handle.started(process, conn, now)
            handle.last_sent = node_inputs
            self.offer_hardware(handle.node, node_inputs)
            self.set_heartbeat(handle, node_inputs, now)
            self.io.add_worker(handle)
            self.send_fence(handle, now)
            self.schedule(handle, now)  # the fence's renewal
        return Changed.WORKERS

    def _restart_due(self, handle: WorkerHandle, now: float) -> bool:
        """Whether the node's worker starts again now: a restart, counted and logged, unless
        its last start was only put off."""
        if handle.state not in WAITING or now < handle.restart_at:
            return False
        if handle.state is WorkerState.BACKOFF:
            handle.policy.on_restart()
            message = "restarting worker for node %s (restart %d)"
            node_log(INFO, handle.node, message, handle.policy.restarts)
        return True

    # -- fences: the deadlines after which workers stop on their own ---------------------------

    def send_fence(self, handle: WorkerHandle, now: float) -> None:
        if handle.conn is None:
            return
        times = fences.due(handle, now, self.elastic is not None, self.pod_fence,
                           self.settings.reconcile_interval_s)
        if times is not None:
            handle.fence_unsent = times
            self.io.flush(handle, now)

    def refresh_fences(self, now: float) -> None:
        """Every worker's, when the pod's lease fence moved (elastic pools). Stopping
        workers too: a restore may take until their write limit."""
        for handle in self.workers.values():
            self.send_fence(handle, now)

    # -- inputs: only the latest, only when the pipe can take it -----------------------------

    def changed_inputs(self, nodes: set[str]) -> tuple[dict[str, NodeInputs], Changed]:
        """Of ``nodes``, whose inputs may have changed, the inputs of those whose worker
        takes inputs; and whether the API a worker's node follows changed."""
        inputs: dict[str, NodeInputs] = {}
        apis = False
        for node in nodes:
            handle = self.workers.get(node)
            if handle is None:
                continue
            apis = self.note_api(node) or apis
            if handle.conn is None or handle.state is WorkerState.STOPPING:
                continue
            inputs[node] = self.view.inputs_for(node)
        return inputs, Changed.WORKERS if apis else Changed.NOTHING

    def deliver(self, inputs: dict[str, NodeInputs], now: float) -> None:
        """Hand each worker its node's new ``inputs`` (the latest only, the heartbeat limit
        following them), and the pipes that can take more what waits for them."""
        for node, node_inputs in inputs.items():
            handle = self.workers[node]
            handle.unsent = None if node_inputs == handle.last_sent else node_inputs
            if handle.unsent is not None:
                self.set_heartbeat(handle, node_inputs, now)
            self.io.flush(handle, now)
        writable, self.io.writable = self.io.writable, set()
        for node in writable - inputs.keys():
            if (pending := self.workers.get(node)) is not None:
                self.io.flush(pending, now)

    # -- the whole table -------------------------------------------------------------------------

    def views(self, now: float) -> dict[str, WorkerView]:
        """Every worker as ``/metrics`` shows it."""
        apis, wall = self.apis, time.time()
        return {node: worker_view(h, apis.get(node), now, wall) for node, h in self.workers.items()}

    def starting(self) -> bool:
        """Whether a worker was started and has not reported its first tick yet."""
        return any(h.state is WorkerState.STARTING for h in self.workers.values())

    def running(self) -> set[str]:
        """The nodes a process of which may still run (their own, or a lingering one)."""
        return {n for n, h in self.workers.items() if h.state in ALIVE}

    def stop_all(self, now: float, grace: float) -> None:
        """The supervisor stops: every process asked to stop, SIGKILL after ``grace``; what
        no longer runs is stopped for good."""
        for handle in self.workers.values():
            process = handle.process
            if process is not None and process.exitcode is None:
                self.stop(handle, StopReason.SHUTDOWN, now, grace)
            elif handle.state in WAITING:
                handle.stopped()
            else:  # exited and not reaped yet, or lingering: nothing left to signal
                handle.to_stop(StopReason.SHUTDOWN, handle.kill_at)

    def await_exits(self, deadline: float) -> None:
        while self.running():
            now = self.clock()
            if now >= deadline:
                return
            self.io.wait(min(self.loop_period_s, deadline - now))
            now = self.clock()
            self.read_reports(now)
            self.reap(now)
            self.check_lingering(now)

    def kill_all(self) -> None:
        running = self.running()
        log.error("%d workers did not stop in time: SIGKILL to all of them", len(running))
        for node in running:
            handle = self.workers[node]
            handle.kill()
            if handle.process is not None:
                self.io.exited.add(node)  # its sentinel fires; reap it even if it already did
