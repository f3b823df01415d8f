"""The probe and metrics server, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from agentpool.supervisor.httpserver import AgentHttpServer


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
