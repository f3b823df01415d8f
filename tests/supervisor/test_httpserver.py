"""The probe and metrics server, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from agentpool.supervisor.httpserver import AgentHttpServer, listen


def _server(ready: tuple[bool, str] = (True, "ok"), timeout_s: float = 10.0) -> AgentHttpServer:
    return AgentHttpServer(
        "127.0.0.1",
        0,
        CollectorRegistry(),
        lambda: True,
        lambda: ready,
        request_timeout_s=timeout_s,
    )


def test_a_silent_client_is_disconnected() -> None:
    # A connection that never sends a request (or never reads the answer) must not hold
    # a handler thread forever.
    server = _server(timeout_s=0.5)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.settimeout(10)  # 20x the server's timeout
            started = time.monotonic()
            assert sock.recv(1) == b""  # closed by the server, without a request
            assert time.monotonic() - started < 10
    finally:
        server.stop()


def test_readyz_names_what_is_not_ready() -> None:
    server = _server(ready=(False, "not ready: nodes: not confirmed for 95s"))
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/readyz"
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(url, timeout=10)
        assert caught.value.code == 503
        assert caught.value.read() == b"not ready: nodes: not confirmed for 95s\n"
    finally:
        server.stop()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def test_readyz_wait_answers_the_moment_it_turns_ready() -> None:
    # The startup probe's request: held while not ready, answered when readiness turns.
    turned = threading.Event()
    server = AgentHttpServer(
        "127.0.0.1", 0, CollectorRegistry(), lambda: True,
        lambda: (True, "ok") if turned.is_set() else (False, "not ready: nodes: listing"),
    )
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}/readyz"
        assert _get(base) == (503, b"not ready: nodes: listing\n")  # no wait: as before
        threading.Timer(0.3, turned.set).start()
        started = time.monotonic()
        assert _get(base + "?wait=20s") == (200, b"ok\n")
        assert turned.is_set()
        assert time.monotonic() - started < 15  # answered when ready, not at the deadline
    finally:
        server.stop()


def test_wait_gives_up_with_the_reason_at_its_deadline() -> None:
    server = _server(ready=(False, "not ready: nodes: listing"))
    server.start()
    try:
        started = time.monotonic()
        code, body = _get(f"http://127.0.0.1:{server.port}/readyz?wait=300ms")
        assert (code, body) == (503, b"not ready: nodes: listing\n")
        assert time.monotonic() - started >= 0.3
        # A wait that does not parse is no wait (never an error for a probe).
        assert _get(f"http://127.0.0.1:{server.port}/healthz?wait=soon")[0] == 200
    finally:
        server.stop()


def test_a_probe_that_connects_before_the_server_runs_is_answered_not_refused() -> None:
    listener = listen("127.0.0.1", 0)
    port = listener.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as early:
        early.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")  # queued by the kernel meanwhile
        server = AgentHttpServer(
            "127.0.0.1", 0, CollectorRegistry(), lambda: True, lambda: (True, "ok"),
            listener=listener,
        )
        assert server.port == port
        server.start()
        try:
            answer = b""
            while chunk := early.recv(4096):
                answer += chunk
        finally:
            server.stop()
    assert answer.startswith(b"HTTP/1.0 200")
    assert answer.endswith(b"\r\n\r\nok\n")


def test_a_client_gone_before_its_answer_leaves_no_traceback(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # A probe queued while the agent started gave up (its timeout) before the answer:
    # socketserver printed a traceback to stderr, raw text among the JSON log lines.
    listener = listen("127.0.0.1", 0)
    port = listener.getsockname()[1]
    gone = socket.create_connection(("127.0.0.1", port), timeout=30)
    gone.sendall(b"GET /readyz HTTP/1.0\r\n\r\n")
    gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    gone.close()  # a reset: the answer's write fails
    served = threading.Event()

    def ready() -> tuple[bool, str]:
        served.set()
        return True, "ok"

    server = AgentHttpServer("127.0.0.1", 0, CollectorRegistry(), lambda: True, ready,
                             listener=listener)
    server.start()
    try:
        assert served.wait(30)
        assert _get(f"http://127.0.0.1:{port}/healthz") == (200, b"ok\n")  # still serving
    finally:
        server.stop()
    assert capsys.readouterr().err == ""
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
