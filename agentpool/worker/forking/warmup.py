"""Run every tick path of a worker in the fork server, before its heap is frozen.

A worker's first ticks specialise bytecode in place, fill lazily built
caches (``re``, ``json``, ``datetime``, the HTTP wire code, ``logging``,
prometheus_client's multiprocess values) and intern strings; done in each
worker that copies those pages once per worker. Done here, once, the
workers fork with it already done. The paths exercised: RAPL on a writable
sysfs tree, DVFS over cpufreq where RAPL is locked, HTTP telemetry and
control against an in-process canned server (RAPL applied; RAPL
``blocked``, then DVFS; DVFS only), restoring the host, logging a line, pickling a tick
report, writing metrics; then a whole worker's set-up and loop, over HTTP and
host controls (:func:`rehearse_worker`). :func:`environment` is the world a
pass runs in and :func:`run` one pass (the preload runs several: see
:mod:`~agentpool.worker.forking.codepack`); :func:`scout` is what a forked
child runs to show what a new worker writes. Everything is throwaway: a private temporary sysfs
tree (built here from the few files the host backends read: the agent never
imports the simulation kit) and metrics directory, a private metrics
registry, a log handler writing to memory; nothing of it is left in the fork server but the warmed
code and caches. Best effort: the caller ignores any failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import io
import json
import logging
import math
import os
import pickle
import socket
import tempfile
import threading
from collections.abc import Iterator
from multiprocessing.connection import Pipe
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, values

from agentpool.backends import fencing
from agentpool.backends.httpclient import close_connections
from agentpool.config.settings import ControllerSettings, DvfsSettings, WorkerSettings
from agentpool.controller.metrics import NodeMetrics
from agentpool.controller.node import NodeController
from agentpool.pool.fence import FenceTimes
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.results import TickResult
from agentpool.worker import main as worker_main
from agentpool.worker.protocol import Fence, StopWorker, TickReport

TICKS = 12
"""Ticks per path: more than CPython's specialisation warm-up (8 executions)."""


def _answer(request: bytes) -> bytes:
    if request.startswith(b"GET"):
        body = {"packagePowerWatts": 250.0, "cpu": {"packagePowerWatts": 250.0}}
    elif b"-rapl " in request.split(b"\r\n", 1)[0]:  # the node that may use RAPL
        body = {"result": "applied", "message": "ok", "state": {"capWatts": 120}}
    elif b"rapl" in request.split(b"\r\n\r\n", 1)[-1]:
        body = {"result": "blocked", "message": "rapl locked", "state": {"capWatts": 0}}
    else:
        body = {"result": "applied", "message": "ok", "state": {"throttlePct": 10}}
    raw = json.dumps(body).encode()
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw
    )


@contextlib.contextmanager
def canned_server() -> Iterator[str]:
    """An HTTP endpoint on 127.0.0.1 that answers each request with canned JSON."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                if done.is_set():  # the wake-up connection of the exit below
                    return
                conn.settimeout(2.0)
                data = b""
                with contextlib.suppress(OSError):
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(4096) or b"\r\n\r\n"
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = next(
                        (
                            int(line.split(b":")[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length:")
                        ),
                        0,
                    )
                    while len(body) < length:
                        body += conn.recv(4096) or b" " * length
                    conn.sendall(_answer(head + b"\r\n\r\n" + body))

    thread = threading.Thread(target=serve, name="warm-up-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/{{node}}"
    finally:
        done.set()
        # Wake the accept at once rather than wait out its timeout: every pass is on the
        # way to the first fork.
        with contextlib.suppress(OSError):
            socket.create_connection(listener.getsockname(), timeout=1.0).close()
        thread.join(5)
        listener.close()


def node_inputs(node: str, endpoint: str | None, mode: str) -> NodeInputs:
    if endpoint is None:
        routing: dict[str, Any] = {
            "sources": {"cpu": {"type": "host"}},
            "controls": {"cpu": {"type": "host"}},
        }
    else:
        http = {"endpoint": endpoint, "timeoutSeconds": 2}
        routing = {
            "sources": {"cpu": {"type": "http", "http": http}},
            "controls": {"cpu": {"type": "http", "http": {**http, "mode": mode}}},
        }
    power = {
        "apiVersion": "joulie.io/v1alpha1",
        "kind": "NodePowerProfile",
        "metadata": {"name": node},
        "spec": {
            "nodeName": node,
            "profile": "eco",
            "policy": {"name": "warm"},
            "cpu": {"packagePowerCapWatts": 120},
        },
    }
    telemetry = {
        "apiVersion": "joulie.io/v1alpha1",
        "kind": "TelemetryProfile",
        "metadata": {"name": node},
        "spec": {"target": {"scope": "node", "nodeName": node}, **routing},
    }
    return NodeInputs(node, {}, power, telemetry)


def _put(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def host_tree(root: Path, rapl: bool) -> None:
    """A two-package host under ``root``: RAPL package zones (when ``rapl``; without
    them the controller falls back to DVFS) and four cpufreq policies."""
    if rapl:
        for n in (0, 1):
            zone = root / "class" / "powercap" / f"intel-rapl:{n}"
            _put(zone / "name", f"package-{n}")
            _put(zone / "enabled", 1)
            _put(zone / "energy_uj", 0)
            _put(zone / "max_energy_range_uj", 262_143_328_850)
            _put(zone / "constraint_0_name", "long_term")
            _put(zone / "constraint_0_power_limit_uw", 150_000_000)
            _put(zone / "constraint_0_max_power_uw", 200_000_000)
    for n in range(4):
        policy = root / "devices" / "system" / "cpu" / "cpufreq" / f"policy{n}"
        _put(policy / "affected_cpus", n)
        _put(policy / "cpuinfo_min_freq", 800_000)
        _put(policy / "cpuinfo_max_freq", 3_500_000)
        _put(policy / "scaling_min_freq", 800_000)
        _put(policy / "scaling_max_freq", 3_500_000)
        _put(policy / "scaling_cur_freq", 2_000_000)


def _drive(settings: ControllerSettings, node: str, inputs: NodeInputs) -> TickResult:
    controller = NodeController(settings, node, NodeMetrics(node, CollectorRegistry()))
    controller.update(inputs)
    for _ in range(TICKS):
        result = controller.tick()
        pickle.dumps(TickReport(node, result, 0.001))
    controller.restore()
    return result


@dataclasses.dataclass(frozen=True)
class Stage:
    """The throwaway world a warm-up runs in (:func:`environment`)."""

    settings: ControllerSettings
    """Host controls under ``tmp``'s sysfs trees, DVFS without a cool-down."""
    tmp: str


REHEARSED = ("http", "host")
"""The backends :func:`rehearse_worker` runs a whole worker over."""


def rehearse_worker(stage: Stage, endpoint: str, backend: str) -> int:
    """A worker's own code, run here as a worker runs it after its fork: its set-up
    (logging, metrics files, controller; :func:`agentpool.worker.main.set_up`) and its
    loop over a socket pair, fed its inputs, a fence and its inputs again, and told to
    stop after :data:`TICKS` ticks. ``backend``: ``http`` (controls at ``endpoint``) or
    ``host`` (RAPL on the stage's sysfs tree). Returns the reports it sent.

    What it changes in this process is put back: the root logger, the fence horizon
    (:func:`environment` puts back prometheus_client's value class and the environment).
    """
    node = f"warm-worker-{backend}"
    at = endpoint if backend == "http" else None
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    worker_settings = WorkerSettings(reconcile_interval_s=0.0, controller=stage.settings)
    supervisor, conn = Pipe(duplex=True)
    try:
        # The worker's own log handler, on stderr as it finds it: here, memory.
        with contextlib.redirect_stderr(io.StringIO()):
            controller, tick, fence = worker_main.set_up(
                node, worker_settings, os.path.join(stage.tmp, f"{node}.json"),
                node_inputs(node, at, "auto"),
            )
        supervisor.send(Fence(FenceTimes(stop_at=math.inf, write_until=None)))
        ticks = 0

        def counted() -> TickResult:
            nonlocal ticks
            ticks += 1
            if ticks == TICKS // 2:  # as a supervisor would: new inputs, then a fence
                supervisor.send(node_inputs(node, at, "dvfs" if at else "auto"))
                supervisor.send(Fence(FenceTimes(stop_at=math.inf, write_until=None)))
            elif ticks == TICKS:
                supervisor.send(StopWorker())
            return tick()

        worker_main.loop(controller, counted, worker_settings, conn, worker_main.StopFlag(),
                         fence)
        controller.restore()
        reports = 0
        while supervisor.poll(0):
            supervisor.recv_bytes()
            reports += 1
        return reports
    finally:
        supervisor.close()
        conn.close()
        fencing.set_horizon(None)
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        logging.getLogger("urllib3").setLevel(logging.NOTSET)  # set_up's logging set it


def scout(stage: Stage, backend: str) -> None:
    """What a new worker runs, in a forked child of this process: made a worker process
    (:func:`agentpool.worker.main.become_worker`), then :func:`rehearse_worker`."""
    worker_main.become_worker(f"warm-worker-{backend}")
    with canned_server() as endpoint:
        rehearse_worker(stage, endpoint, backend)
    close_connections()


def _close_metrics_files(under: str) -> None:
    """Close the warm-up's mmapped metrics files, or every worker would inherit them.

    prometheus_client keeps them in its value class's closure, which something
    in the library still reaches after the warm-up; they are found by name.
    """
    from prometheus_client.mmap_dict import MmapedDict

    gc.collect()
    for obj in gc.get_objects():
        if isinstance(obj, MmapedDict) and str(getattr(obj, "_fname", "")).startswith(under):
            obj.close()  # type: ignore[no-untyped-call]


@contextlib.contextmanager
def environment() -> Iterator[Stage]:
    """The warm-up's world, and everything put back as it was when it ends: a private
    temporary directory (sysfs trees, metrics files, journals), prometheus_client in
    multiprocess mode writing there, a root log handler writing to memory."""
    saved_env = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    saved_value_class = values.ValueClass
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(  # the shape of a worker's text lines (agentpool.logs)
        logging.Formatter("%(asctime)s %(levelname)-7s w[1] %(name)s: %(message)s")
    )
    root = logging.getLogger()
    saved_level, root.level = root.level, logging.INFO
    root.addHandler(handler)
    try:
        with tempfile.TemporaryDirectory(prefix="agentpool-warm-") as tmp:
            os.makedirs(os.path.join(tmp, "metrics"))
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = os.path.join(tmp, "metrics")
            values.ValueClass = values.MultiProcessValue(  # type: ignore[no-untyped-call]
                process_identifier=lambda: "warm-up"
            )
            template = os.path.join(tmp, "sys", "{node}")
            for node, rapl in (("warm-rapl", True), ("warm-dvfs", False),
                               ("warm-worker-host", True)):
                host_tree(Path(template.replace("{node}", node)), rapl=rapl)
            settings = ControllerSettings(
                sysfs_root=template, dvfs=dataclasses.replace(DvfsSettings(), cooldown_s=0.0)
            )
            try:
                yield Stage(settings, tmp)
            finally:
                _close_metrics_files(tmp)
    finally:
        close_connections()  # no worker may inherit a socket to a canned server
        root.removeHandler(handler)
        root.level = saved_level
        values.ValueClass = saved_value_class
        if saved_env is None:
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        else:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = saved_env


PATHS = {
    "warm-rapl": None,  # host RAPL
    "warm-dvfs": None,  # host DVFS (no powercap)
    "warm-http": "auto",  # HTTP RAPL blocked, then DVFS
    "warm-http-rapl": "auto",  # HTTP RAPL applied
    "warm-http-dvfs": "dvfs",  # HTTP DVFS only
}
"""Node name -> HTTP control mode (None: host controls) of each tick path driven."""


def run(stage: Stage) -> dict[str, TickResult]:
    """One pass: every tick path, then a whole worker over each rehearsed backend; the
    last result of each path, by node, says which path it took."""
    results = {}
    with canned_server() as endpoint:  # a thread only while a pass runs: never at a fork
        for node, mode in PATHS.items():
            inputs = node_inputs(node, endpoint if mode else None, mode or "auto")
            results[node] = _drive(stage.settings, node, inputs)
        for backend in REHEARSED:
            rehearse_worker(stage, endpoint, backend)
    close_connections()
    return results


def warm_up() -> dict[str, TickResult]:
    """One pass of :func:`run` in its own :func:`environment`."""
    with environment() as stage:
        return run(stage)
