"""Fixtures of the backend tests: the power simulator, and a scripted HTTP endpoint."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agentpool.backends.httpclient import MAX_BODY_BYTES
from agentpool.sim.power.model import NodeConfig
from agentpool.sim.power.server import PowerSim
from tests.backends.scripted import Scripted

QUIET = NodeConfig(idle_watts=60.0, max_watts=260.0, load=0.5, noise_watts=0.0)  # 160 W


@pytest.fixture
def sim() -> Iterator[PowerSim]:
    with PowerSim(defaults=QUIET, huge_bytes=MAX_BODY_BYTES + 4096) as s:
        yield s


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


# -- telemetry --------------------------------------------------------------------------------
