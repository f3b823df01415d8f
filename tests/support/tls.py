"""A throwaway CA and an https Joulie endpoint on 127.0.0.1 that checks credentials.

Certificates come from the ``openssl`` CLI (the ``cryptography`` package is
not installed here). The server is a real TLS server (the standard library's
http.server wrapped in an ``ssl`` context): it requires a bearer token, and
optionally a client certificate signed by the same CA.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.jsonanswer import send_json

KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")
"""EC keys: RSA key generation takes seconds on a busy machine."""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    """A CA that signed nothing here: trusting it must fail verification."""


def make_pki(directory: Path) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is needed to make a throwaway CA")
    d = directory
    for ca in ("ca", "other-ca"):
        _openssl(
            "req",
            "-x509",
            *KEY,
            "-nodes",
            "-keyout",
            f"{ca}.key",
            "-out",
            f"{ca}.crt",
            "-days",
            "2",
            "-subj",
            f"/CN={ca}",
            cwd=d,
        )
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for who, subject in (("server", "/CN=127.0.0.1"), ("client", "/CN=agentpool")):
        _openssl(
            "req",
            *KEY,
            "-nodes",
            "-keyout",
            f"{who}.key",
            "-out",
            f"{who}.csr",
            "-subj",
            subject,
            cwd=d,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{who}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{who}.crt",
            "-days",
            "2",
            "-extfile",
            f"{who}.ext",
            cwd=d,
        )
    return Pki(
        d / "ca.crt",
        d / "server.crt",
        d / "server.key",
        d / "client.crt",
        d / "client.key",
        d / "other-ca.crt",
    )


@dataclass
class Gateway:
    url: str
    token: str
    seen: list[dict[str, Any]] = field(default_factory=list)
    """Per request: path, Authorization header, client certificate subject."""

    @property
    def control(self) -> str:
        return f"{self.url}/control/{{node}}"

    @property
    def telemetry(self) -> str:
        return f"{self.url}/telemetry/{{node}}"


@contextmanager
def https_gateway(pki: Pki, token: str, client_cert: bool = False) -> Iterator[Gateway]:
    """Answers Joulie's telemetry/control protocol only with ``Bearer <gateway.token>``."""
    gateway = Gateway("", token)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _answer(self, body: dict[str, Any]) -> None:
            peer = self.connection.getpeercert()  # type: ignore[attr-defined]
            auth = self.headers.get("Authorization")
            gateway.seen.append({"path": self.path, "auth": auth, "peer": peer})
            if auth != f"Bearer {gateway.token}":
                code, body = (
                    (401, {"error": "bad token"})
                    if auth is None
                    else (403, {"error": "token refused"})
                )
            else:
                code = 200
            send_json(self, code, body)

        def do_GET(self) -> None:
            self._answer({"packagePowerWatts": 180.0, "cpu": {"packagePowerMaxWatts": 400}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(length)
            self._answer({"result": "applied", "message": "gateway applied the cap"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    if client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    gateway.url = f"https://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield gateway
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
