"""The body of a worker process: drive one node controller tick by tick.

Runs in a child of the fork server. It never opens an API connection: its
node's inputs arrive over the pipe, each tick's result goes back over it.
It ticks at once when new inputs arrive and otherwise every reconcile
interval. It exits cleanly (restoring host values) on SIGTERM, on a
:class:`StopWorker` message, when the pipe closes, or when its parent dies
(``PR_SET_PDEATHSIG``), so a SIGKILLed supervisor leaves no worker behind and
no host throttled.
"""

from __future__ import annotations

import contextlib
import ctypes
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
from agentpool.logs import setup_logging
from agentpool.spec.values import NodeInputs, TickResult
from agentpool.worker.faults import faults_for, tick_with_faults
from agentpool.worker.nodefiles import metrics_id, presize_metrics_files
from agentpool.worker.protocol import REFRESH_S, TICKED, Stopped, StopWorker, TickReport

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
EXIT_CRASH = 70
"""An unexpected exception escaped the controller (EX_SOFTWARE)."""


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


class _StopFlag:
    """Set from the signal handler; the loop checks it (handlers only record)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum

    def requested(self) -> bool:
        return self.signum is not None


_PROBE_DIR = os.environ.get("AGENTPOOL_MEMORY_PROBE") or None
"""Benchmarks only (bench/memory.py): a directory where each worker appends its own
``/proc/self/smaps_rollup`` at its life's stages. Unset in production, where no tick
pays anything for it (the tick function is only wrapped when it is set)."""
PROBE_TICKS = (1, 2, 10, 60, 300, 600)
"""Ticks after which a probed worker records its memory."""


def probe(node: str, stage: str) -> None:
    if _PROBE_DIR is None:
        return
    fields = {}
    with open("/proc/self/smaps_rollup", encoding="ascii") as f:
        for line in f:
            head, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                fields[head] = int(rest.split()[0])
    uss = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    with open(os.path.join(_PROBE_DIR, metrics_id(node)), "a", encoding="ascii") as f:
        f.write(
            f"{stage} {time.monotonic():.3f} pss={fields.get('Pss', 0)} uss={uss} "
            f"anon={fields.get('Anonymous', 0)} modules={len(sys.modules)}\n"
        )


def _probed(node: str, tick: Callable[[], TickResult]) -> Callable[[], TickResult]:
    count = 0

    def probed_tick() -> TickResult:
        nonlocal count
        result = tick()
        count += 1
        if count in PROBE_TICKS:
            probe(node, f"tick{count}")
        return result

    return probed_tick


def _idle() -> None:
    """The ``idle`` fault (benchmarks): sleep until SIGTERM or the parent's death, exit 0."""
    _die_with_parent()
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
    while True:
        signal.pause()


def _use_node_metrics_files(node: str) -> None:
    # Must run before the first metric value is created in this process.
    from prometheus_client import values

    ident = metrics_id(node)
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        presize_metrics_files(directory, node)
    # prometheus_client leaves this factory unannotated.
    values.ValueClass = values.MultiProcessValue(  # type: ignore[no-untyped-call]
        process_identifier=lambda: ident
    )


def run_worker(
    node: str,
    settings: WorkerSettings,
    conn: Connection,
    journal: str | None,
    inputs: NodeInputs | None = None,
) -> None:
    """Entry point of a worker process; never returns (exits with a status).

    ``inputs`` are the node's inputs at spawn time, so the first tick already
    enforces the profile instead of reporting "nothing to enforce" (and
    costing a status write) while the first pipe message is on its way.
    Whatever fails, from the first line on, ends in :data:`EXIT_CRASH` after
    restoring what could be restored, never in multiprocessing's generic 1.
    """
    code = 0
    controller: NodeController | None = None
    try:
        if "idle" in faults_for(node):
            _idle()
        probe(node, "bootstrap")
        _die_with_parent()
        stop = _StopFlag()
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the supervisor
        setup_logging(settings.log_format, settings.log_level, role=f"worker:{node}", node=node)
        _use_node_metrics_files(node)
        from agentpool.controller.metrics import NodeMetrics

        originals = Originals(Path(journal) if journal else None)
        controller = NodeController(settings.controller, node, NodeMetrics(node), originals)
        tick = tick_with_faults(node, controller.tick)
        if inputs is not None:
            controller.update(inputs)
        if _PROBE_DIR is not None:
            probe(node, "setup")
            tick = _probed(node, tick)
        _loop(controller, tick, settings, conn, stop)
    except BaseException:  # report how we died, then exit non-zero; the supervisor restarts us
        log.error("worker for node %s crashed:\n%s", node, traceback.format_exc())
        code = EXIT_CRASH
    problems = controller.restore() if controller is not None else []
    for problem in problems:
        log.error("node %s: could not restore host value: %s", node, problem)
    # If the supervisor is gone the send fails; the host was restored all the same.
    with contextlib.suppress(OSError, EOFError):
        conn.send(Stopped(node, tuple(problems)))
    sys.stdout.flush()
    os._exit(code)


def _loop(
    controller: NodeController,
    tick: Callable[[], TickResult],
    settings: WorkerSettings,
    conn: Connection,
    stop: _StopFlag,
) -> None:
    interval = settings.reconcile_interval_s
    next_tick = time.monotonic()
    # One poll object for the worker's life: Connection.poll builds a selector per call.
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    reported: TickResult | None = None
    reported_at = 0.0
    while not stop.requested():
        wait = max(0.0, next_tick - time.monotonic())
        try:
            ready = poller.poll(math.ceil(wait * 1000))
        except OSError:
            return
        if stop.requested():
            return
        if ready:
            try:
                message = conn.recv()
            except (OSError, EOFError):
                log.info("node %s: supervisor pipe closed, stopping", controller.node)
                return
            if isinstance(message, StopWorker):
                return
            if isinstance(message, NodeInputs):
                controller.update(message)
                next_tick = time.monotonic()  # act on a change at once
            continue
        started = time.monotonic()
        result = tick()
        finished = time.monotonic()
        # Same status as last reported: say "ticked" in constant bytes. Readings that
        # changed (``observed``) are reported with the next full report, REFRESH_S apart.
        same = reported is not None and result.status_key() == reported.status_key()
        try:
            if same and (result == reported or finished - reported_at < REFRESH_S):
                conn.send_bytes(TICKED)
            else:
                conn.send(TickReport(controller.node, result, finished - started))
                reported, reported_at = result, finished
        except (OSError, EOFError):
            return
        next_tick += interval
        if next_tick <= time.monotonic():  # fell behind (a slow endpoint): do not burst
            next_tick = time.monotonic() + interval
