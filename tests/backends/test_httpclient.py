"""The HTTP transport (backends/httpclient.py): who sent each request, kept-alive connections.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from agentpool import __version__
from agentpool.backends.cpu_http import DVFS_ACTION, RAPL_ACTION, post_control, read_package_power
from agentpool.backends.httpclient import _open, user_agent
from agentpool.errors import HttpBackendError
from agentpool.resources.routing import HttpEndpoint
from agentpool.results import Result
from agentpool.sim.power.model import RequestKind
from agentpool.sim.power.server import PowerSim
from tests.backends.scripted import OK_S, Scripted, answer
from tests.support.rawhttp import OVERRUN_S, Answer, RawServer


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
    # timeout of 0.25 s, because the timeout bounded each receive, not the request. Here
    # the drip (one byte every 0.1 s) would take about 6 s that way, past the timeout
    # and what a busy machine may add to it.
    body = b'{"packagePowerWatts": 12}'
    data = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    assert len(data) * 0.1 > 0.25 + OVERRUN_S
    with RawServer(Answer(data, pieces=len(data), delay_s=0.1)) as server:
        started = time.monotonic()
        with pytest.raises(HttpBackendError, match=r"timed out after 0\.25s"):
            read_package_power(HttpEndpoint(server.url, 0.25), "n")
        assert time.monotonic() - started < 0.25 + OVERRUN_S


def test_an_answer_held_open_after_its_headers_ends_at_the_timeout() -> None:
    data = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"
    with RawServer(Answer(data, hold=True)) as server:
        started = time.monotonic()
        with pytest.raises(HttpBackendError, match="timed out"):
            post_control(HttpEndpoint(server.url, 0.25), "n", RAPL_ACTION, 120.0, -1)
        assert time.monotonic() - started < 0.25 + OVERRUN_S


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
