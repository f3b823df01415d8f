"""``/metrics``, ``/healthz`` and ``/readyz`` on ``METRICS_ADDR``, served from a thread.

``/healthz`` answers 200 while the supervisor's main loop keeps turning (it
is what a liveness probe should restart us for); ``/readyz`` answers 200 once
the caches are synced and every one was confirmed fresh recently, and 503
otherwise with a body that says which cache and why.

Both take ``?wait=<duration>`` (``9s``, ``500ms``; at most :data:`MAX_WAIT_S`):
a request that would answer 503 waits up to that long for the answer to turn
200 first. The chart's readiness probe asks ``/readyz?wait=`` a second less
than its own timeout, so on a normal start the kubelet's first readiness probe
gets 200 the moment the caches are synced, instead of failing until then. For
the same reason the listening socket can be opened before the server exists
(:func:`listen`, first thing at start-up): a probe that connects while the
agent is still importing waits in the kernel's accept queue instead of being
refused.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from agentpool.durations import parse_duration
from agentpool.proctitle import name_thread

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
"""A client that sends nothing (or reads nothing) for this long loses its connection,
so stuck connections cannot pile up handler threads."""
MAX_WAIT_S = 60.0
"""The longest ``?wait=`` honoured: a held request costs a thread."""
WAIT_POLL_S = 0.05
"""How often a held request looks again (readiness is computed, not signalled)."""
LISTEN_BACKLOG = 64
"""Connections the kernel queues while start-up has not begun serving yet."""


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (all addresses for ''), as the server binds it.

    Raises ``OSError`` (address in use, not permitted). Not inherited by children.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def _wait_of(query: str) -> float:
    """The ``wait`` query parameter in seconds, 0 when absent or unparseable."""
    values = urllib.parse.parse_qs(query).get("wait")
    if not values:
        return 0.0
    try:
        return min(MAX_WAIT_S, max(0.0, parse_duration(values[-1])))
    except ValueError:
        return 0.0


def _held(check: Callable[[], tuple[bool, str]], wait_s: float) -> tuple[bool, str]:
    """``check()``, looked at again until it says ok or ``wait_s`` has passed."""
    deadline = time.monotonic() + wait_s
    ok, why = check()
    while not ok and time.monotonic() < deadline:
        time.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))
        ok, why = check()
    return ok, why

Readiness = Callable[[], tuple[bool, str]]
"""Ready or not, and the body to answer with."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        name_thread("metrics-http")
        super().serve_forever(poll_interval)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        name_thread("metrics-request")  # one thread per request: scrapes, probes
        super().process_request_thread(request, client_address)

    def handle_error(self, request: object, client_address: object) -> None:
        # Not socketserver's traceback on stderr, which would break JSON logs.
        error = sys.exc_info()[1]
        if isinstance(error, BrokenPipeError | ConnectionResetError):
            return  # the client gave up first: a probe queued while we started, timed out
        log.exception("metrics server: a request from %s failed", client_address)


class AgentHttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        healthy: Callable[[], bool],
        ready: Readiness,
        on_scrape: Callable[[float], None] | None = None,
        render: Callable[[], bytes] | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        listener: socket.socket | None = None,
    ) -> None:
        """``ready`` says whether ``/readyz`` answers 200 and with which body (the reason,
        when not ready); ``render``, if given, writes part of ``/metrics`` directly (the
        workers' merged multiprocess files, see ``FastMultiProcessCollector.render``);
        ``registry`` the rest; ``on_scrape`` is told each scrape's duration. ``listener``,
        if given, is the socket :func:`listen` opened (``host`` and ``port`` are then only
        its address); the server owns it from here on."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        scrape_lock = threading.Lock()

        def health() -> tuple[bool, str]:
            ok = healthy()
            return ok, "ok" if ok else "main loop stalled"

        class Handler(BaseHTTPRequestHandler):
            timeout = request_timeout_s

            def log_message(self, format: str, *args: object) -> None:
                pass  # scrapes and probes every few seconds would drown the log

            def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                if path == "/metrics":
                    # Collectors keep per-scrape caches and are not thread safe.
                    with scrape_lock:
                        started = time.monotonic()
                        body = (render() if render is not None else b"") + generate_latest(registry)
                        if on_scrape is not None:
                            on_scrape(time.monotonic() - started)
                    self._send(200, body, CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz"):
                    ok, why = _held(health if path == "/healthz" else ready, _wait_of(query))
                    self._send(200 if ok else 503, why.encode() + b"\n")
                else:
                    self._send(404, b"not found\n")

        if listener is None:
            self._server = _Server((host, port), Handler)
        else:
            self._server = _Server((host, port), Handler, bind_and_activate=False)
            self._server.socket.close()
            self._server.socket = listener
            self._server.server_address = listener.getsockname()
            self._server.server_name, self._server.server_port = host, listener.getsockname()[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(2)
