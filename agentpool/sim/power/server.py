"""An HTTP power simulator speaking the Joulie telemetry/control protocol
(:mod:`agentpool.backends.httpclient`) for many nodes at once.

This module owns the HTTP side of the simulated Joulie power endpoints: the
``GET /telemetry/{node}`` and ``POST /control/{node}`` routes, the tell-it API
tests use to steer nodes (load, control answers, faults), and the record of
every request, which ``GET /requests`` also serves (JSON, oldest first; itself
not recorded), so a test reaches a simulator running in a pod. Control takes
the CPU actions (docs/resources.md) and ``gpu.set_power_cap_watts``
(docs/resources.md, "GPU power caps"; GPUs per node: :mod:`agentpool.sim.power.gpu`).
The Joulie simulator is a Go program and real RAPL/DVFS-capable
servers cannot exist on a CI box, so this is their stand-in; the numbers come
from :mod:`agentpool.sim.power.model`.

Threading: the app runs on the private loop of a
:class:`~agentpool.sim.serving.BackgroundServer`; tests call the tell-it API
from their own thread. All shared state sits behind one ``threading.Lock`` that
handlers hold only for a few dictionary operations and never across an
``await``, so the loop never blocks on a test and vice versa. Hung requests
await an ``asyncio.Event`` (per request, loop-only), so one hung node costs a
parked coroutine and nothing else: other nodes keep being served.

Run standalone with ``python -m agentpool.sim.power.server --port 18080``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import datetime as dt
import json
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from agentpool.sim.polling import wait_until
from agentpool.sim.power.gpu import GPU_ACTION
from agentpool.sim.power.model import (
    RAPL_ACTION,
    Behaviour,
    ControlResult,
    Fault,
    FaultKind,
    FaultTarget,
    NodeConfig,
    NodeModel,
    NodeState,
    RecordedRequest,
    RequestKind,
    parse_control,
)
from agentpool.sim.serving import BackgroundServer

T = TypeVar("T")

_HUGE_CHUNK = 64 * 1024


def _rfc3339_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class PowerSim:
    """Simulated telemetry and control endpoints for any number of nodes.

    Nodes are created with ``defaults`` on first contact (an HTTP request or
    any tell-it call naming them), or explicitly with :meth:`add_node`.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        defaults: NodeConfig | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_requests: int = 200_000,
        huge_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self._seed = seed
        self._defaults = defaults or NodeConfig()
        self._huge_bytes = huge_bytes
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeModel] = {}
        # Bounded so a long demo cannot grow without limit; 200k records is
        # over half an hour of 1,000 nodes polled every 10 s.
        self._requests: collections.deque[RecordedRequest] = collections.deque(maxlen=max_requests)
        self._request_count = 0
        # Loop-only: the events hung requests wait on, by node.
        self._hung: dict[str, set[asyncio.Event]] = collections.defaultdict(set)
        self._stopping = False
        self._running = False
        self._server = BackgroundServer(self._make_app, host=host, port=port)

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> PowerSim:
        self._server.start()
        self._running = True
        return self

    def stop(self) -> None:
        self._running = False
        self._server.stop()

    def __enter__(self) -> PowerSim:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return self._server.url

    @property
    def telemetry_endpoint(self) -> str:
        """The endpoint template a TelemetryProfile's cpu source would carry."""
        return f"{self.url}/telemetry/{{node}}"

    @property
    def control_endpoint(self) -> str:
        return f"{self.url}/control/{{node}}"

    # -- tell-it API (any thread) -------------------------------------------

    def add_node(self, name: str, config: NodeConfig | None = None, **overrides: Any) -> NodeState:
        """Create a node; ``overrides`` are NodeConfig fields. Refuses duplicates."""
        cfg = config or self._defaults
        if overrides:
            cfg = dataclasses.replace(cfg, **overrides)
        with self._lock:
            if name in self._nodes:
                raise ValueError(f"node {name!r} already exists")
            model = self._nodes[name] = NodeModel(name, cfg, self._seed)
            return model.snapshot()

    def configure(self, node: str, **changes: Any) -> NodeState:
        """Change NodeConfig fields of a node (idle_watts, max_watts, load, noise_watts...)."""
        with self._lock:
            model = self._node(node)
            model.reconfigure(**changes)
            return model.snapshot()

    def set_load(self, node: str, load: float) -> NodeState:
        return self.configure(node, load=load)

    def set_behaviour(
        self,
        node: str,
        result: ControlResult | str = ControlResult.APPLIED,
        message: str | None = None,
        action: str | None = None,
    ) -> None:
        """Decide what the node's control endpoint answers to well-formed requests.

        ``action`` None sets the answer for every action and drops per-action
        ones; naming an action (``rapl.set_power_cap_watts``) sets only that
        one, e.g. to block RAPL while DVFS still applies.
        """
        behaviour = Behaviour(ControlResult(result), message)
        with self._lock:
            model = self._node(node)
            if action is None:
                model.behaviours = {None: behaviour}
            else:
                model.behaviours[action] = behaviour

    def set_fault(
        self,
        node: str,
        kind: FaultKind | str | None,
        endpoint: FaultTarget | str = FaultTarget.BOTH,
        status: int = 503,
        count: int | None = None,
        hang_seconds: float | None = None,
    ) -> None:
        """Arm a fault on a node (``kind`` None clears it and releases its hung requests).

        ``count`` limits the fault to the next N matching requests. A hang
        lasts until the fault is cleared, ``hang_seconds`` pass, or the
        simulator stops; the request is then answered 504.
        """
        with self._lock:
            model = self._node(node)
            if kind is None:
                model.fault = None
            else:
                model.fault = Fault(
                    FaultKind(kind), FaultTarget(endpoint), status, count, hang_seconds
                )
        if kind is None and self._running:
            self._server.call_soon(lambda: self._release(node))

    def state(self, node: str) -> NodeState:
        with self._lock:
            return self._node(node).snapshot()

    def nodes(self) -> list[str]:
        with self._lock:
            return sorted(self._nodes)

    def requests(
        self, node: str | None = None, kind: RequestKind | str | None = None
    ) -> list[RecordedRequest]:
        """Recorded requests, oldest first, optionally filtered by node and kind."""
        want = RequestKind(kind) if kind is not None else None
        with self._lock:
            snapshot = list(self._requests)
        return [
            r
            for r in snapshot
            if (node is None or r.node == node) and (want is None or r.kind is want)
        ]

    @property
    def request_count(self) -> int:
        """Requests seen since start, including those evicted from the record."""
        with self._lock:
            return self._request_count

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    @staticmethod
    def wait_for(predicate: Callable[[], T], timeout: float = 5.0, interval: float = 0.01) -> T:
        """Poll ``predicate`` until it returns something truthy; return that, or raise."""
        return wait_until(predicate, timeout, interval)

    # -- HTTP side (server loop) ---------------------------------------------

    def _node(self, name: str) -> NodeModel:
        # Caller holds self._lock.
        model = self._nodes.get(name)
        if model is None:
            model = self._nodes[name] = NodeModel(name, self._defaults, self._seed)
        return model

    def _make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _on_shutdown(self, app: web.Application) -> None:
        # Hung handlers must end for the runner's graceful shutdown to be quick.
        self._stopping = True
        for node in list(self._hung):
            self._release(node)

    def _release(self, node: str) -> None:
        for event in self._hung.pop(node, set()):
            event.set()

    @staticmethod
    def _classify(request: web.Request) -> tuple[RequestKind, str | None]:
        parts = request.path.strip("/").split("/")
        if len(parts) == 2 and parts[1]:
            if parts[0] == "telemetry" and request.method == "GET":
                return RequestKind.TELEMETRY, parts[1]
            if parts[0] == "control" and request.method == "POST":
                return RequestKind.CONTROL, parts[1]
        return RequestKind.OTHER, None

    def _record_json(self) -> list[dict[str, Any]]:
        return [
            {
                "node": r.node,
                "method": r.method,
                "kind": r.kind.value,
                "path": r.path,
                "body": r.body,
                "monotonic": r.monotonic,
                "wall": r.wall,
                "fault": r.fault.value if r.fault else None,
                "userAgent": r.user_agent,
            }
            for r in self.requests()
        ]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET" and request.path == "/requests":
            return web.json_response(self._record_json())
        kind, node = self._classify(request)
        body: Any = None
        if request.can_read_body:
            with contextlib.suppress(ValueError):
                body = json.loads(await request.read())
        monotonic, wall = time.monotonic(), time.time()
        fault: Fault | None = None
        status, payload = 404, {"error": f"no route for {request.method} {request.path}"}
        with self._lock:
            self._request_count += 1
            if node is not None:
                model = self._node(node)
                fault = self._take_fault(model, kind)
                if fault is None:
                    status, payload = self._answer(model, kind, body)
            elif request.path == "/healthz":
                status, payload = 200, {"status": "ok"}
            self._requests.append(
                RecordedRequest(
                    node,
                    request.method,
                    kind,
                    request.path,
                    body,
                    monotonic,
                    wall,
                    fault.kind if fault else None,
                    request.headers.get("User-Agent"),
                )
            )
        if fault is not None and node is not None:
            return await self._serve_fault(request, node, fault)
        return web.json_response(payload, status=status)

    @staticmethod
    def _take_fault(model: NodeModel, kind: RequestKind) -> Fault | None:
        fault = model.fault
        if fault is None or not fault.target.covers(kind):
            return None
        if fault.remaining is not None:
            fault.remaining -= 1
            if fault.remaining <= 0:
                model.fault = None
        return fault

    @staticmethod
    def _answer(model: NodeModel, kind: RequestKind, body: Any) -> tuple[int, dict[str, Any]]:
        if kind is RequestKind.TELEMETRY:
            power = round(model.sample_power(), 3)
            gpu = model.gpu.telemetry(model.clock())
            return 200, {
                "node": model.name,
                # Like Joulie's simulator: on a GPU node the top level is CPU + GPU.
                "packagePowerWatts": round(power + gpu.get("powerWattsTotal", 0.0), 3),
                "gpu": gpu,
                "cpu": {
                    "packagePowerWatts": power,
                    "load": model.config.load,
                    "capWatts": model.cap_watts,
                    "throttlePct": model.throttle_pct,
                    "packagePowerMaxWatts": model.config.max_watts,
                },
                "capWatts": model.cap_watts,
                "throttlePct": model.throttle_pct,
                "ts": _rfc3339_now(),
            }
        try:
            action, value = parse_control(model.name, body)
        except ValueError as exc:
            return 400, {"result": "error", "message": str(exc)}
        behaviour = model.behaviour_for(action)
        if action == GPU_ACTION and model.config.gpu.count == 0:
            behaviour = Behaviour(ControlResult.BLOCKED, "no GPU on this node")
        if behaviour.result is ControlResult.APPLIED:
            if action == GPU_ACTION:
                applied = model.gpu.set_cap(value, model.clock())
                default = f"GPU cap set to {applied:g} W per GPU on {model.config.gpu.count} GPU(s)"
            elif action == RAPL_ACTION:
                model.cap_watts = value
                default = f"RAPL cap set to {value:g} W"
            else:
                model.throttle_pct = value
                default = f"DVFS throttle set to {value:g} %"
            model.applied_controls += 1
        else:
            default = f"{action} {behaviour.result.value} by the simulator"
        return 200, {
            "result": behaviour.result.value,
            "message": behaviour.message or default,
            "state": model.snapshot().as_json(),
        }

    async def _serve_fault(
        self, request: web.Request, node: str, fault: Fault
    ) -> web.StreamResponse:
        if fault.kind is FaultKind.HANG:
            if not self._stopping:
                event = asyncio.Event()
                self._hung[node].add(event)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), fault.hang_seconds)
                self._hung.get(node, set()).discard(event)
            return web.json_response({"error": "hung request released"}, status=504)
        if fault.kind is FaultKind.SERVER_ERROR:
            return web.json_response({"error": "injected fault"}, status=fault.status)
        if fault.kind is FaultKind.GARBAGE:
            return web.Response(
                body=b'{"packagePowerWatts": 12\x00\xff garbage', content_type="application/json"
            )
        if fault.kind is FaultKind.HTML:
            return web.Response(
                text="<html><body><h1>502 Bad Gateway</h1></body></html>",
                content_type="text/html",
            )
        return await self._serve_huge(request, node)

    async def _serve_huge(self, request: web.Request, node: str) -> web.StreamResponse:
        # Valid JSON (so only a size limit, not a parser, can refuse it),
        # streamed so the simulator itself never holds megabytes per request.
        head = (json.dumps({"node": node})[:-1] + ', "padding": "').encode()
        tail = b'", "packagePowerWatts": 100.0}'
        pad = max(0, self._huge_bytes - len(head) - len(tail))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = len(head) + pad + len(tail)
        await response.prepare(request)
        chunk = b"x" * _HUGE_CHUNK
        try:
            await response.write(head)
            for offset in range(0, pad, _HUGE_CHUNK):
                await response.write(chunk[: min(_HUGE_CHUNK, pad - offset)])
            await response.write(tail)
            await response.write_eof()
        except ConnectionError:
            pass  # the client gave up reading, which is what a size limit does
        return response


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="HTTP power simulator (Joulie telemetry/control).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", type=float, default=NodeConfig.load)
    parser.add_argument("--noise-watts", type=float, default=1.0)
    args = parser.parse_args(argv)
    defaults = NodeConfig(load=args.load, noise_watts=args.noise_watts)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with PowerSim(seed=args.seed, defaults=defaults, host=args.host, port=args.port) as sim:
        print(f"power simulator on {sim.url} (telemetry {sim.telemetry_endpoint})", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            done.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
