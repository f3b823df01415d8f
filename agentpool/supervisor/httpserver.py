"""``/metrics``, ``/healthz`` and ``/readyz`` on ``METRICS_ADDR``, served from a thread.

``/healthz`` answers 200 while the supervisor's main loop keeps turning (it
is what a liveness probe should restart us for); ``/readyz`` answers 200 once
the caches are synced and every one was confirmed fresh recently, and 503
otherwise with a body that says which cache and why.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
"""A client that sends nothing (or reads nothing) for this long loses its connection,
so stuck connections cannot pile up handler threads."""

Readiness = Callable[[], tuple[bool, str]]
"""Ready or not, and the body to answer with."""


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
    ) -> None:
        """``ready`` says whether ``/readyz`` answers 200 and with which body (the reason,
        when not ready); ``render``, if given, writes part of ``/metrics`` directly (the
        workers' merged multiprocess files, see ``FastMultiProcessCollector.render``);
        ``registry`` the rest; ``on_scrape`` is told each scrape's duration."""
        scrape_lock = threading.Lock()

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
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    # Collectors keep per-scrape caches and are not thread safe.
                    with scrape_lock:
                        started = time.monotonic()
                        body = (render() if render is not None else b"") + generate_latest(registry)
                        if on_scrape is not None:
                            on_scrape(time.monotonic() - started)
                    self._send(200, body, CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    ok = healthy()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"main loop stalled\n")
                elif path == "/readyz":
                    ok, why = ready()
                    self._send(200 if ok else 503, why.encode() + b"\n")
                else:
                    self._send(404, b"not found\n")

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
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
