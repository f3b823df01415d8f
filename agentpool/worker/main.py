"""The body of a worker process: drive one node controller tick by tick.

Runs in a child of the fork server. It never opens an API connection: its
node's inputs arrive over the pipe, each tick's result goes back over it.
It ticks at once when new inputs arrive and otherwise every reconcile
interval, at times every worker of the pod shares (:mod:`agentpool.worker.cadence`).
It exits cleanly (restoring host values) on SIGTERM, on a :class:`StopWorker`
message, when the pipe closes, or when its parent dies (``PR_SET_PDEATHSIG``), so a
SIGKILLed supervisor leaves no worker behind and no host throttled. And it stops
on its own, without waiting for anyone, when its fence passes
(:mod:`agentpool.worker.fence`): then no write of it lands where another pod may
already control the node.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import logging
import math
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import Any

from agentpool.backends.sysfs.files import Originals
from agentpool.config.settings import WorkerSettings
from agentpool.controller.node import NodeController
from agentpool.errors import FencedError, PipeProtocolError, shown
from agentpool.logs import setup_logging
from agentpool.proctitle import set_title, worker_title
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.results import TickResult
from agentpool.worker import cadence
from agentpool.worker.fence import WorkerFence
from agentpool.worker.metricspace import MetricsRoom, room_checked
from agentpool.worker.nodefiles import metrics_id
from agentpool.worker.protocol import (
    DUMP_SIGNAL,
    EXIT_FENCED,
    REFRESH_S,
    TICKED,
    Fence,
    Stopped,
    StopWorker,
    TickReport,
    read_frames,
)

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
EXIT_CRASH = 70
"""An unexpected exception escaped the controller (EX_SOFTWARE)."""
OOM_SCORE_ADJ = b"1000"
"""A worker's ``/proc/self/oom_score_adj``: the kernel's OOM killer, at the pod's memory
limit, takes a worker (restarted with backoff, its node alone affected) before the
supervisor or the fork server, which are larger (they hold what every worker shares)
and whose death stops every node of the pod. Raising it needs no privilege."""


def _find_prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # libc is linked into the interpreter
    except (OSError, AttributeError):
        return None


_PRCTL = _find_prctl()
"""Resolved once at import, i.e. in the fork server (preload), not in every worker."""


def _die_with_parent() -> None:
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _first_for_the_oom_killer() -> None:
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
    except OSError:
        return  # no procfs: nothing to say to the OOM killer
    with contextlib.suppress(OSError):
        os.write(fd, OOM_SCORE_ADJ)
    os.close(fd)


class StopFlag:
    """Set from the signal handler; the loop checks it (handlers only record)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum

    def requested(self) -> bool:
        return self.signum is not None


Tick = Callable[[], TickResult]
WorkerHook = Callable[[str], Callable[[Tick], Tick] | None]
"""The diagnostics option ``AGENTPOOL_WORKER_HOOK``'s seam (loaded once, in the fork
server): a worker calls it with its node first thing, before it sets itself up, and wraps
its tick in what it returns (None: the tick is left as it is). What tests and benchmarks
do to a worker goes through it: faults, memory probes (:mod:`agentpool.sim`)."""


def _use_node_metrics_files(node: str) -> MetricsRoom | None:
    """Put this process's metric values in the node's files, a new one only while they
    have room; the room (None without a multiprocess directory). Must run before the
    first metric value is created in this process."""
    from prometheus_client import values

    ident = metrics_id(node)
    # prometheus_client leaves this factory unannotated.
    in_files = values.MultiProcessValue(  # type: ignore[no-untyped-call]
        process_identifier=lambda: ident
    )
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        values.ValueClass = in_files
        return None
    room = MetricsRoom(directory, node)
    values.ValueClass = room_checked(in_files, room)
    return room


def _settling(
    room: MetricsRoom | None, tick: Callable[[], TickResult]
) -> Callable[[], TickResult]:
    """``tick``, after writing the series that waited for room in the metrics files."""
    if room is None:
        return tick

    def settled_tick() -> TickResult:
        room.settle()
        return tick()

    return settled_tick


def crash_reason(exc: BaseException, inputs: NodeInputs | None) -> str:
    """What made a worker fail, in one line: the exception and the desired state it was
    enforcing, so that a crash an input causes is told with the input that caused it."""
    what = f"{type(exc).__name__}: {shown(str(exc))[1:-1]}"
    if inputs is None:
        return what
    sources = []
    for kind, obj in (("NodeTwin", inputs.node_twin), ("NodePowerProfile", inputs.power_profile),
                      ("TelemetryProfile", inputs.telemetry_profile)):
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if isinstance(meta, dict):
            version = meta.get("resourceVersion")
            at = f" (resourceVersion {shown(version)})" if version is not None else ""
            sources.append(f"{kind} {shown(meta.get('name'))}{at}")
    return f"{what}, with {', '.join(sources)}" if sources else what


def become_worker(node: str) -> StopFlag:
    """Make this process the node's worker: it dies with its parent, is the OOM killer's
    first choice in the pod, is titled for the node, stops on SIGTERM (the flag returned),
    leaves Ctrl-C to the supervisor and dumps its threads on :data:`DUMP_SIGNAL`."""
    _die_with_parent()
    _first_for_the_oom_killer()
    set_title(*worker_title(node))  # ps, top: "agentpool: node <name>"
    stop = StopFlag()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the supervisor
    # Written from the C handler, so it works while the process hangs in a system call.
    faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    return stop


def set_up(
    node: str, settings: WorkerSettings, journal: str | None, inputs: NodeInputs | None
) -> tuple[NodeController, Callable[[], TickResult], WorkerFence]:
    """A worker's set-up after its process is made one (title, signals): its logging,
    metrics files, controller and fence. Also run by the fork server's warm-up."""
    fence = WorkerFence(required=settings.requires_fence)
    setup_logging(settings.log_format, settings.log_level, role=f"worker:{node}", node=node)
    room = _use_node_metrics_files(node)
    from agentpool.controller.metrics import NodeMetrics

    originals = Originals(Path(journal) if journal else None)
    controller = NodeController(settings.controller, node, NodeMetrics(node), originals)
    tick = _settling(room, controller.tick)
    if inputs is not None:
        controller.update(inputs)
    return controller, tick, fence


def run_worker(
    node: str,
    settings: WorkerSettings,
    conn: Connection,
    journal: str | None,
    inputs: NodeInputs | None = None,
    hook: WorkerHook | None = None,
) -> None:
    """Entry point of a worker process; never returns (exits with a status).

    ``inputs`` are the node's inputs at spawn time, so the first tick already
    enforces the profile instead of reporting "nothing to enforce" (and
    costing a status write) while the first pipe message is on its way.
    Whatever fails, from the first line on, ends in :data:`EXIT_CRASH` after
    restoring what could be restored, never in multiprocessing's generic 1.
    ``hook`` is the :data:`WorkerHook` the diagnostics named, if any.
    """
    code = 0
    reason = ""
    controller: NodeController | None = None
    try:
        wrap = hook(node) if hook is not None else None
        stop = become_worker(node)
        controller, tick, fence = set_up(node, settings, journal, inputs)
        if wrap is not None:
            tick = wrap(tick)
        if loop(controller, tick, settings, conn, stop, fence):
            reason = fence.reason(time.monotonic())
            log.error("node %s: %s", node, reason)
            code = EXIT_FENCED
    except BaseException as exc:  # say how we died, exit non-zero; the supervisor restarts us
        crash = crash_reason(exc, controller.inputs if controller is not None else inputs)
        log.error("worker for node %s crashed (%s):\n%s", node, crash, traceback.format_exc())
        reason = f"crashed: {crash}"
        code = EXIT_CRASH
    problems = _restore(controller) if controller is not None else []
    for problem in problems:
        log.error("node %s: could not restore host value: %s", node, problem)
    # If the supervisor is gone the send fails; the host was restored all the same.
    with contextlib.suppress(OSError, EOFError):
        conn.send(Stopped(node, tuple(problems), reason))
    sys.stdout.flush()
    os._exit(code)


def _restore(controller: NodeController) -> list[str]:
    """What a graceful stop restores, as far as the fence lets it (nothing at all once
    another pod may own the node: a restore must never overwrite a new owner)."""
    try:
        return controller.restore()
    except FencedError as exc:
        return [str(exc)]


def _pending(conn: Connection) -> bool:
    try:
        return conn.poll(0)
    except (OSError, EOFError):
        return False


def loop(
    controller: NodeController,
    tick: Callable[[], TickResult],
    settings: WorkerSettings,
    conn: Connection,
    stop: StopFlag,
    fence: WorkerFence,
) -> bool:
    """Tick until asked to stop (False) or until the fence passes (True)."""
    # SIGTERM must end a wait on the pipe at once: its handler only records it, and the
    # wait (retried after a signal, PEP 475) would otherwise go on until the next tick.
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    try:
        return _turns(controller, tick, settings, conn, stop, fence, wake_r)
    finally:
        signal.set_wakeup_fd(-1)
        os.close(wake_r)
        os.close(wake_w)


def _sooner_when_awake(next_tick: float, interval: float) -> float:
    """The tick's time, or now when this wake-up came shortly before it anyway
    (:func:`~agentpool.worker.cadence.early_s`)."""
    now = time.monotonic()
    return now if 0 < next_tick - now <= cadence.early_s(interval) else next_tick


def _turns(
    controller: NodeController,
    tick: Callable[[], TickResult],
    settings: WorkerSettings,
    conn: Connection,
    stop: StopFlag,
    fence: WorkerFence,
    wake_r: int,
) -> bool:
    interval = settings.reconcile_interval_s
    next_tick = time.monotonic()
    inbox = bytearray()  # a message from the supervisor that has not fully arrived yet
    # One poll object for the worker's life: Connection.poll and wait() build a selector
    # per call.
    conn_fd = conn.fileno()
    poller = select.poll()
    poller.register(conn_fd, select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    reported: TickResult | None = None
    reported_at = 0.0
    while not stop.requested():
        now = time.monotonic()
        if fence.passed(now) and not _pending(conn):  # a newer fence may be waiting
            return True
        try:
            timeout = max(0.0, fence.wake_at(next_tick, now) - now)
            ready = {fd for fd, _ in poller.poll(math.ceil(timeout * 1000))}
        except OSError:
            return False
        if stop.requested():
            return False
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)  # another signal: nothing to do but wait on
        if conn_fd in ready:
            try:
                messages, closed = read_frames(conn_fd, inbox)
            except OSError:
                messages, closed = [], True
            for message in messages:
                if isinstance(message, StopWorker):
                    return False
                if isinstance(message, Fence):
                    fence.update(message.times)
                    continue
                if not isinstance(message, NodeInputs):
                    raise PipeProtocolError(f"an unexpected message: {type(message).__name__}")
                controller.update(message)
                next_tick = time.monotonic()  # act on a change at once
            if closed:
                log.info("node %s: supervisor pipe closed, stopping", controller.node)
                return False
            next_tick = _sooner_when_awake(next_tick, interval)
            continue
        if ready:
            next_tick = _sooner_when_awake(next_tick, interval)
            continue  # only another signal woke us: wait on
        now = time.monotonic()
        if now < next_tick or not fence.may_act() or fence.passed(now):
            continue  # woken for the fence, or still waiting for the first one
        started = now
        result = tick()
        finished = time.monotonic()
        # Same status as last reported: say "ticked" in constant bytes. Readings that
        # changed (power, not what was enforced) go with the next full report, REFRESH_S
        # apart.
        same = reported is not None and result.status_key() == reported.status_key()
        try:
            if same and (result == reported or finished - reported_at < REFRESH_S):
                conn.send_bytes(TICKED)
            else:
                conn.send(TickReport(controller.node, result, finished - started))
                reported, reported_at = result, finished
        except (OSError, EOFError):
            return False
        next_tick = cadence.next_tick(started, interval)
    return False
