"""A node's status follows what was enforced, in the tick that enforced it, on both APIs.

The control endpoint here answers the same words, ``"ok"``, to every request,
as gateways do: the status cannot follow the endpoint's message, only what
the agent enforced. A cap changed 120 -> 140 W (and a GPU cap 250 -> 300 W per
GPU) must show in the TelemetryProfile's ``status.control`` (``observed`` and
the message) and in the NodeTwin's ``status.controlStatus`` (whose four keys
leave only the message to carry a cap) with the write that followed the tick
that posted it, and a steady node's status is not rewritten tick after tick.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agentpool.sim.cluster import SimCluster
from agentpool.sim.objects import power_profile, twin_name
from agentpool.sim.polling import wait_until

INTERVAL_S = 2.0
"""The agent's reconcile interval: ticks far enough apart to tell one from the next, a
hundred times what a change takes from its tick to the status on two busy cores."""
NODE = "gw-0"


class SameWords:
    """An HTTP control endpoint that answers ``"ok"`` to anything, and records what it was
    posted, each post with what :attr:`look` saw as it arrived (the tick that posted it
    waits for the answer meanwhile)."""

    def __init__(self) -> None:
        self.url = ""
        self.look: Callable[[], bool] = lambda: False
        self._lock = threading.Lock()
        self._posts: list[dict[str, Any]] = []
        self._looks: list[bool] = []

    @property
    def endpoint(self) -> str:
        return f"{self.url}/control/{{node}}"

    def record(self, body: dict[str, Any]) -> None:
        seen = self.look()
        with self._lock:
            self._posts.append(body)
            self._looks.append(seen)

    def looks(self, action: str, **fields: Any) -> list[bool]:
        """What :attr:`look` saw at each request that asked for ``action`` with these field
        values, in order."""
        with self._lock:
            return [
                seen for p, seen in zip(self._posts, self._looks, strict=True)
                if p.get("action") == action and all(p.get(k) == v for k, v in fields.items())
            ]

    def count(self) -> int:
        with self._lock:
            return len(self._posts)


@contextmanager
def same_words() -> Iterator[SameWords]:
    endpoint = SameWords()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            endpoint.record(json.loads(self.rfile.read(length)))
            answer = b'"ok"'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    endpoint.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def seed(cluster: SimCluster, api: str, endpoint: SameWords) -> dict[str, str]:
    """A GPU node capped at 120 W and 250 W per GPU, controlled at ``endpoint`` with no
    telemetry; the agent's environment."""
    if api == "nodetwin":
        cluster.add_node(NODE, cap=120, gpus=4)
        gpu = {"powerCap": {"scope": "perGpu", "capWattsPerGpu": 250}}
        cluster.api.patch("nodetwins", twin_name(NODE), {"spec": {"gpu": gpu}})
        return {
            "TELEMETRY_CPU_SOURCE": "none",
            "TELEMETRY_CPU_CONTROL": "http",
            "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT": endpoint.endpoint,
            "TELEMETRY_GPU_CONTROL": "http",
            "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT": endpoint.endpoint,
        }
    cluster.add_node(NODE, profile="", gpus=4)
    cluster.api.create(
        "nodepowerprofiles", power_profile(NODE, 120, gpu_cap={"capWattsPerGpu": 250})
    )
    http = {"type": "http", "http": {"endpoint": endpoint.endpoint}}
    spec = {"sources": {"cpu": {"type": "none", "http": None}},
            "controls": {"cpu": http, "gpu": http}}
    cluster.api.patch("telemetryprofiles", NODE, {"spec": spec})
    return {}


def change_caps(cluster: SimCluster, api: str) -> None:
    """140 W, 300 W per GPU, in one write (one tick enforces both)."""
    spec = {"cpu": {"packagePowerCapWatts": 140},
            "gpu": {"powerCap": {"capWattsPerGpu": 300}}}
    if api == "nodetwin":
        cluster.api.patch("nodetwins", twin_name(NODE), {"spec": spec})
    else:
        cluster.api.patch("nodepowerprofiles", NODE, {"spec": spec})


def control(cluster: SimCluster, api: str) -> dict[str, Any]:
    """The node's ``cpu`` and ``gpu`` statuses, wherever its API keeps them."""
    if api == "nodetwin":
        status = cluster.api.get("nodetwins", twin_name(NODE)).get("status") or {}
        return dict(status.get("controlStatus") or {})
    status = cluster.api.get("telemetryprofiles", NODE).get("status") or {}
    return dict(status.get("control") or {})


def status_writes(cluster: SimCluster, api: str) -> int:
    kind = "nodetwins" if api == "nodetwin" else "telemetryprofiles"
    return cluster.emulator.request_counts().get(("patch", f"{kind}/status"), 0)


def says(status: dict[str, Any], cpu: float, gpu: float) -> bool:
    """Whether both parts name these caps (the message is all both APIs carry)."""
    return (
        status.get("cpu", {}).get("result") == "applied"
        and f"RAPL cap {cpu:g} W over HTTP" in status["cpu"].get("message", "")
        and status.get("gpu", {}).get("result") == "applied"
        and f"GPU cap {gpu:g} W per GPU over HTTP" in status["gpu"].get("message", "")
    )


@pytest.mark.parametrize("api", ["profiles", "nodetwin"])
def test_a_cap_enforced_shows_in_the_status_of_its_tick(api: str) -> None:
    with same_words() as endpoint, SimCluster(api=api) as cluster:
        env = seed(cluster, api, endpoint)
        agent = cluster.start_agent({**env, "RECONCILE_INTERVAL": f"{INTERVAL_S:g}s"})
        agent.wait_ready()
        wait_until(lambda: says(control(cluster, api), 120, 250), 30)
        before = control(cluster, api)
        assert before["cpu"]["message"] == (
            "RAPL cap 120 W over HTTP: rapl.set_power_cap_watts accepted"
        )
        changed_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        # Each post looks at the status as it arrives: whether the status already says what
        # the tick before enforced is seen by the endpoint, whenever this thread gets to run.
        endpoint.look = lambda: says(control(cluster, api), 140, 300)
        change_caps(cluster, api)
        # The tick the change triggered posts both caps; its status write follows at once,
        # before the next tick posts them again.
        wait_until(lambda: says(control(cluster, api), 140, 300), INTERVAL_S * 3)
        after = control(cluster, api)
        for part in ("cpu", "gpu"):
            assert after[part]["updatedAt"] >= changed_at
        if api == "profiles":  # the profile API's status also says it in ``observed``
            assert after["cpu"]["observed"]["capWatts"] == 140
            assert after["gpu"]["observed"]["requestedWattsPerGpu"] == 300
        else:  # Joulie's schema: these four keys, nothing else
            assert set(after["cpu"]) == set(after["gpu"]) == {
                "backend", "result", "message", "updatedAt"
            }
        # A steady node: three more ticks post the same caps, and nothing is rewritten.
        writes, posts = status_writes(cluster, api), endpoint.count()
        wait_until(lambda: endpoint.count() >= posts + 6, INTERVAL_S * 8)
        assert status_writes(cluster, api) == writes
        assert control(cluster, api) == after
        # The change's tick posted the caps before its status said them, and the status
        # said them by the next tick's posts.
        for action, fields in (("rapl.set_power_cap_watts", {"capWatts": 140}),
                               ("gpu.set_power_cap_watts", {"capWattsPerGpu": 300})):
            looks = endpoint.looks(action, **fields)
            assert looks[:2] == [False, True], (action, looks)
        assert agent.terminate() == 0
