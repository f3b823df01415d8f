"""A JSON answer from a stdlib ``BaseHTTPRequestHandler``, for the tests' stand-in servers."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


def send_json(handler: BaseHTTPRequestHandler, code: int, body: Any) -> None:
    """Answer ``code`` with ``body`` as JSON, its length given (the connection stays usable)."""
    data = json.dumps(body).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
