"""HTTP telemetry/control client against real servers on 127.0.0.1 (backends/httpclient.py).

Two servers: the project's PowerSim (what the Joulie simulator speaks, with its
fault injection), and a tiny scripted ``http.server`` for answers PowerSim never
gives (only one payload shape, empty bodies, odd status codes).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agentpool import __version__
from agentpool.backends.httpclient import (
    DVFS_ACTION,
    MAX_BODY_BYTES,
    RAPL_ACTION,
    ControlAnswer,
    _open,
    post_control,
    read_package_power,
    user_agent,
)
from agentpool.errors import HttpBackendError
from agentpool.sim.power.model import NodeConfig, RequestKind
from agentpool.sim.power.server import PowerSim
from agentpool.spec.values import HttpEndpoint, Result
from tests.backends.rawhttp import Answer, RawServer

OK_S = 10.0
"""Timeout of requests that should succeed: generous, so a loaded CI box cannot fail them."""
QUIET = NodeConfig(idle_watts=60.0, max_watts=260.0, load=0.5, noise_watts=0.0)  # 160 W


@pytest.fixture
def sim() -> Iterator[PowerSim]:
    with PowerSim(defaults=QUIET, huge_bytes=MAX_BODY_BYTES + 4096) as s:
        yield s


@dataclass
class Scripted:
    """What the tiny server answers, and what it was asked."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture(scope="module")
def scripted_server() -> Iterator[tuple[Scripted, str]]:
    script = Scripted()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            script.requests.append((self.command, self.path, dict(self.headers), body))
            self.send_response(script.status)
            self.send_header("Content-Type", script.content_type)
            self.send_header("Content-Length", str(len(script.body)))
            self.end_headers()
            self.wfile.write(script.body)

        do_GET = do_POST = _answer  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="scripted-http", daemon=True
    )
    thread.start()
    try:
        yield script, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def scripted(scripted_server: tuple[Scripted, str]) -> tuple[Scripted, str]:
    """The module's scripted server, reset to an empty 200 with no recorded requests."""
    script, url = scripted_server
    script.status, script.body, script.content_type = 200, b"", "application/json"
    script.requests.clear()
    return script, url


def answer(script: Scripted, payload: Any, status: int = 200) -> None:
    script.status = status
    script.body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()


# -- telemetry --------------------------------------------------------------------------------


def test_telemetry_from_power_sim(sim: PowerSim) -> None:
    endpoint = HttpEndpoint(sim.telemetry_endpoint, OK_S)
    assert read_package_power(endpoint, "worker-1") == 160.0
    sim.set_load("worker-1", 1.0)
    assert read_package_power(endpoint, "worker-1") == 260.0
    # {node} was replaced by the node name.
    assert [r.path for r in sim.requests("worker-1", RequestKind.TELEMETRY)] == [
        "/telemetry/worker-1",
        "/telemetry/worker-1",
    ]


@pytest.mark.parametrize(
    ("payload", "watts"),
    [
        ({"packagePowerWatts": 142.5}, 142.5),
        ({"packagePowerWatts": 142}, 142.0),
        ({"cpu": {"packagePowerWatts": 97.25}}, 97.25),
        ({"node": "n", "cpu": {"packagePowerWatts": 0}}, 0.0),
        # The CPU's own reading wins when both are present: on a GPU node the top level
        # is CPU + GPU (README "GPU power caps").
        ({"packagePowerWatts": 30, "cpu": {"packagePowerWatts": 20}}, 20.0),
        ({"packagePowerWatts": 30, "cpu": {"load": 0.5}}, 30.0),
        # JSON without the field: no reading.
        ({"node": "n"}, None),
        ({"cpu": {"load": 0.5}}, None),
        ({"packagePowerWatts": None}, None),
        ({"cpu": "busy"}, None),
    ],
)
def test_telemetry_payload_shapes(
    scripted: tuple[Scripted, str], payload: dict[str, Any], watts: float | None
) -> None:
    script, url = scripted
    answer(script, payload)
    assert read_package_power(HttpEndpoint(url + "/telemetry/{node}", OK_S), "node-a") == watts
    method, path, headers, _ = script.requests[-1]
    assert (method, path) == ("GET", "/telemetry/node-a")
    assert headers["Accept"] == "application/json"


@pytest.mark.parametrize(
    ("status", "body", "problem"),
    [
        (404, b'{"error": "no such node"}', "HTTP 404"),
        (500, b"", "HTTP 500"),
        (503, b'{"packagePowerWatts": 100}', "HTTP 503"),  # non-2xx is an error whatever it says
        (200, b"{not json", "not JSON"),
        (200, b"<html>502 Bad Gateway</html>", "not JSON"),
        (200, b"", "not JSON"),
        (200, b"[1, 2]", "not a JSON object"),
        (200, b'{"packagePowerWatts": "120W"}', "not a number"),
        (200, b'{"packagePowerWatts": true}', "not a number"),
        # Python's json accepts these non-JSON literals; a NaN would poison the EMA for good.
        (200, b'{"packagePowerWatts": NaN}', "not a number"),
        (200, b'{"cpu": {"packagePowerWatts": Infinity}}', "not a number"),
        (200, b'{"packagePowerWatts": -Infinity}', "not a number"),
    ],
)
def test_telemetry_errors(
    scripted: tuple[Scripted, str], status: int, body: bytes, problem: str
) -> None:
    script, url = scripted
    answer(script, body, status)
    with pytest.raises(HttpBackendError, match=problem) as caught:
        read_package_power(HttpEndpoint(url + "/t", OK_S), "n")
    assert caught.value.url == url + "/t"
    assert caught.value.status == (status if status >= 300 else None)


@pytest.mark.parametrize(
    ("fault", "problem"),
    [("5xx", "HTTP 503"), ("garbage", "not JSON"), ("html", "not JSON"), ("huge", "larger than")],
)
def test_telemetry_faults_from_power_sim(sim: PowerSim, fault: str, problem: str) -> None:
    sim.set_fault("worker-1", fault)
    with pytest.raises(HttpBackendError, match=problem):
        read_package_power(HttpEndpoint(sim.telemetry_endpoint, OK_S), "worker-1")


def test_telemetry_timeout_on_a_hanging_endpoint(sim: PowerSim) -> None:
    sim.set_fault("worker-1", "hang")
    started = time.monotonic()
    with pytest.raises(HttpBackendError, match=r"timed out after 0\.3s"):
        read_package_power(HttpEndpoint(sim.telemetry_endpoint, 0.3), "worker-1")
    # The hang has no end of its own: only the client's timeout can have ended the wait.
    assert time.monotonic() - started < 10.0
    sim.set_fault("worker-1", None)
    assert read_package_power(HttpEndpoint(sim.telemetry_endpoint, 5.0), "worker-1") == 160.0


def test_unreachable_endpoint() -> None:
    # Port 9 on loopback: nothing listens there, the connection is refused at once.
    with pytest.raises(HttpBackendError, match="unreachable"):
        read_package_power(HttpEndpoint("http://127.0.0.1:9/t", 1.0), "n")


# -- control ----------------------------------------------------------------------------------


def _parse_ts(ts: str) -> dt.datetime:
    assert ts.endswith("Z"), ts
    parsed = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    assert parsed.utcoffset() == dt.timedelta(0)
    return parsed


def test_control_body_fields(sim: PowerSim) -> None:
    endpoint = HttpEndpoint(sim.control_endpoint, OK_S)
    before = dt.datetime.now(dt.UTC)
    got = post_control(endpoint, "worker-1", RAPL_ACTION, 120.0, -1)
    after = dt.datetime.now(dt.UTC)
    assert got.result is Result.APPLIED
    assert got.message == "RAPL cap set to 120 W"
    assert got.state["capWatts"] == 120.0
    (request,) = sim.requests("worker-1", RequestKind.CONTROL)
    assert request.path == "/control/worker-1"
    body = request.body
    assert set(body) == {"node", "action", "capWatts", "throttlePct", "ts"}
    assert body["node"] == "worker-1"
    assert body["action"] == "rapl.set_power_cap_watts"
    assert body["capWatts"] == 120.0
    assert body["throttlePct"] == -1  # RAPL carries no throttle
    assert before - dt.timedelta(seconds=1) <= _parse_ts(body["ts"]) <= after
    assert sim.state("worker-1").cap_watts == 120.0

    got = post_control(endpoint, "worker-1", DVFS_ACTION, 120.0, 30)
    assert got.result is Result.APPLIED
    body = sim.requests("worker-1", RequestKind.CONTROL)[-1].body
    assert (body["action"], body["throttlePct"]) == ("dvfs.set_throttle_pct", 30)
    assert sim.state("worker-1").throttle_pct == 30.0


def test_control_content_type_and_method(scripted: tuple[Scripted, str]) -> None:
    script, url = scripted
    answer(script, b"")
    post_control(HttpEndpoint(url + "/c/{node}", OK_S), "n1", DVFS_ACTION, 90.0, 10)
    method, path, headers, raw = script.requests[-1]
    assert (method, path) == ("POST", "/c/n1")
    assert headers["Content-Type"] == "application/json"
    assert json.loads(raw)["throttlePct"] == 10


@pytest.mark.parametrize("result", ["blocked", "error"])
def test_control_blocked_or_error_answer_is_honoured(sim: PowerSim, result: str) -> None:
    sim.set_behaviour("worker-1", result, "RAPL locked by BIOS", action=RAPL_ACTION)
    got = post_control(HttpEndpoint(sim.control_endpoint, OK_S), "worker-1", RAPL_ACTION, 120.0, -1)
    assert got == ControlAnswer(Result(result), "RAPL locked by BIOS", got.state)
    assert got.state["capWatts"] is None  # the simulator did not apply it
    # DVFS on the same node still applies.
    dvfs = post_control(
        HttpEndpoint(sim.control_endpoint, OK_S), "worker-1", DVFS_ACTION, 120.0, 20
    )
    assert dvfs.result is Result.APPLIED


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", ControlAnswer(Result.APPLIED, "rapl.set_power_cap_watts accepted")),
        (b"  \n", ControlAnswer(Result.APPLIED, "rapl.set_power_cap_watts accepted")),
        (b"{}", ControlAnswer(Result.APPLIED, "rapl.set_power_cap_watts applied")),
        (b"[]", ControlAnswer(Result.APPLIED, "rapl.set_power_cap_watts accepted")),
        (
            b'{"result": "blocked"}',
            ControlAnswer(Result.BLOCKED, "rapl.set_power_cap_watts blocked"),
        ),
        (
            b'{"result": "applied", "message": "ok", "state": {"capWatts": 120}}',
            ControlAnswer(Result.APPLIED, "ok", {"capWatts": 120}),
        ),
        (
            b'{"result": "error", "message": "busy", "state": 5}',
            ControlAnswer(Result.ERROR, "busy"),
        ),
    ],
)
def test_control_2xx_answers(
    scripted: tuple[Scripted, str], body: bytes, expected: ControlAnswer
) -> None:
    script, url = scripted
    answer(script, body, 200)
    assert post_control(HttpEndpoint(url, OK_S), "n", RAPL_ACTION, 120.0, -1) == expected


@pytest.mark.parametrize("status", [201, 202, 204])
def test_control_other_2xx_with_empty_body_is_applied(
    scripted: tuple[Scripted, str], status: int
) -> None:
    script, url = scripted
    answer(script, b"", status)
    assert post_control(HttpEndpoint(url, OK_S), "n", RAPL_ACTION, 1.0, -1).result is Result.APPLIED


@pytest.mark.parametrize(
    ("status", "body", "problem"),
    [
        (400, b'{"result": "applied"}', "HTTP 400"),
        (409, b"", "HTTP 409"),
        (502, b"<html/>", "HTTP 502"),
        (200, b"{garbage", "not JSON"),
        (200, b'{"result": "maybe"}', "unknown result 'maybe'"),
    ],
)
def test_control_errors(
    scripted: tuple[Scripted, str], status: int, body: bytes, problem: str
) -> None:
    script, url = scripted
    answer(script, body, status)
    with pytest.raises(HttpBackendError, match=problem):
        post_control(HttpEndpoint(url, OK_S), "n", RAPL_ACTION, 120.0, -1)


def test_control_timeout_on_a_hanging_endpoint(sim: PowerSim) -> None:
    sim.set_fault("worker-1", "hang", endpoint="control")
    with pytest.raises(HttpBackendError, match="timed out"):
        post_control(HttpEndpoint(sim.control_endpoint, 0.2), "worker-1", RAPL_ACTION, 1.0, -1)
    # The telemetry endpoint of the same node is not affected.
    assert read_package_power(HttpEndpoint(sim.telemetry_endpoint, 5.0), "worker-1") == 160.0


def test_control_5xx_from_power_sim(sim: PowerSim) -> None:
    sim.set_fault("worker-1", "5xx", status=502, count=1)
    with pytest.raises(HttpBackendError) as caught:
        post_control(HttpEndpoint(sim.control_endpoint, OK_S), "worker-1", RAPL_ACTION, 1.0, -1)
    assert caught.value.status == 502
    # count=1: the next request goes through.
    assert (
        post_control(
            HttpEndpoint(sim.control_endpoint, OK_S), "worker-1", RAPL_ACTION, 1.0, -1
        ).result
        is Result.APPLIED
    )


def test_every_request_says_which_pod_and_shard_sent_it(sim: PowerSim) -> None:
    endpoint = HttpEndpoint(sim.telemetry_endpoint, OK_S)
    control = HttpEndpoint(sim.control_endpoint, OK_S)
    agent = user_agent("joulie-agent-pool-3", 3)
    assert agent == f"agentpool/{__version__} (joulie-agent-pool-3, shard 3)"
    read_package_power(endpoint, "n-ua", agent)
    post_control(control, "n-ua", RAPL_ACTION, 150.0, -1, agent)
    post_control(control, "n-ua", DVFS_ACTION, 150.0, 20, agent)
    seen = [(r.kind, r.user_agent) for r in sim.requests("n-ua")]
    assert seen == [(RequestKind.TELEMETRY, agent), (RequestKind.CONTROL, agent),
                    (RequestKind.CONTROL, agent)]
    # Without an identity, still the agent's name and version rather than Python-urllib's.
    read_package_power(endpoint, "n-anon")
    assert sim.requests("n-anon")[0].user_agent == f"agentpool/{__version__}"


def test_gpu_requests_say_which_pod_and_shard_sent_them_too(sim: PowerSim) -> None:
    from agentpool.backends.gpu_http import post_gpu_cap, read_gpu_telemetry

    agent = user_agent("joulie-agent-pool-1", 1)
    read_gpu_telemetry(HttpEndpoint(sim.telemetry_endpoint, OK_S), "n-gpu-ua", agent)
    with contextlib.suppress(HttpBackendError):  # a node without GPUs may refuse the cap
        post_gpu_cap(HttpEndpoint(sim.control_endpoint, OK_S), "n-gpu-ua", 200.0, agent)
    assert [r.user_agent for r in sim.requests("n-gpu-ua")] == [agent, agent]


# -- kept-alive connections -------------------------------------------------------------------


def test_one_connection_is_kept_alive_across_requests(sim: PowerSim) -> None:
    endpoint = HttpEndpoint(sim.telemetry_endpoint, OK_S)
    assert read_package_power(endpoint, "worker-1") == 160.0
    (conn,) = _open.by_origin.values()
    first = conn.sock
    assert first is not None
    post_control(HttpEndpoint(sim.control_endpoint, OK_S), "worker-1", RAPL_ACTION, 200.0, -1)
    assert read_package_power(endpoint, "worker-1") == 160.0  # under its 200 W cap
    assert conn.sock is first  # telemetry and control shared one socket, never reopened


@pytest.fixture
def closes_after_one() -> Iterator[tuple[str, list[int]]]:
    """A server that answers one request per connection, then closes it without saying
    so (as a keep-alive server does to an idle connection); counts its connections."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096) or b"\r\n\r\n"
                body = b'{"packagePowerWatts": 42}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )

    thread = threading.Thread(target=serve, name="closes-after-one", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/t", accepted
    finally:
        listener.close()
        thread.join(5)


def test_a_kept_connection_closed_by_the_server_is_replaced(
    closes_after_one: tuple[str, list[int]],
) -> None:
    url, accepted = closes_after_one
    endpoint = HttpEndpoint(url, OK_S)
    for _ in range(3):  # each request after the first finds its connection closed
        assert read_package_power(endpoint, "n") == 42.0
    assert len(accepted) == 3


# -- shrunk examples of tests/properties/test_http.py, kept as regressions -------------------


def test_an_answer_dripped_slower_than_the_timeout_is_cut_off_at_it() -> None:
    # Each piece arrives inside the socket timeout; the whole took 12 x 0.06 s against a
    # timeout of 0.25 s, because the timeout bounded each receive, not the request.
    body = b'{"packagePowerWatts": 12}'
    data = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with RawServer(Answer(data, pieces=12, delay_s=0.06)) as server:
        started = time.monotonic()
        with pytest.raises(HttpBackendError, match=r"timed out after 0\.25s"):
            read_package_power(HttpEndpoint(server.url, 0.25), "n")
        assert time.monotonic() - started < 0.25 + 0.5


def test_an_answer_held_open_after_its_headers_ends_at_the_timeout() -> None:
    data = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"
    with RawServer(Answer(data, hold=True)) as server:
        started = time.monotonic()
        with pytest.raises(HttpBackendError, match="timed out"):
            post_control(HttpEndpoint(server.url, 0.25), "n", RAPL_ACTION, 120.0, -1)
        assert time.monotonic() - started < 0.25 + 0.5


@pytest.mark.parametrize(
    "body",
    [
        b'{"packagePowerWatts": 1' + b"0" * 400 + b"}",  # math.isfinite raised OverflowError
        b'{"packagePowerWatts": -12}',  # no meter reads a negative power
        b'{"cpu": {"packagePowerWatts": -0.5}}',
    ],
)
def test_readings_that_are_no_power_are_errors(scripted: tuple[Scripted, str], body: bytes) -> None:
    script, url = scripted
    answer(script, body)
    with pytest.raises(HttpBackendError, match="not a number of watts"):
        read_package_power(HttpEndpoint(url + "/t", OK_S), "n")


def test_a_control_answer_is_cut_to_what_a_status_can_carry(
    scripted: tuple[Scripted, str],
) -> None:
    script, url = scripted
    answer(script, {"result": "blocked", "message": "m" * 100_000,
                    "state": {"capWatts": float("nan")}})
    got = post_control(HttpEndpoint(url + "/c", OK_S), "n", RAPL_ACTION, 120.0, -1)
    assert got.result is Result.BLOCKED
    assert got.message.startswith("m" * 500 + " [cut]")
    assert "its state is not finite JSON" in got.message
    assert got.state == {}
    answer(script, {"state": {"big": 10**400}})
    assert post_control(HttpEndpoint(url + "/c", OK_S), "n", RAPL_ACTION, 1, -1).state == {}
    answer(script, {"state": {"capWatts": 120.5, "n": [1, None, "x"]}})
    kept = post_control(HttpEndpoint(url + "/c", OK_S), "n", RAPL_ACTION, 1, -1).state
    assert kept == {"capWatts": 120.5, "n": [1, None, "x"]}


def test_a_port_http_client_cannot_use_is_an_error_not_a_crash() -> None:
    # HTTPConnection's constructor raised InvalidURL outside the request's error handling.
    with pytest.raises(HttpBackendError, match="nonnumeric port"):
        post_control(HttpEndpoint("http://sim:abc/", OK_S), "n", RAPL_ACTION, 120.0, -1)
