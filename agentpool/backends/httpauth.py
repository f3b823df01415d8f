"""Credentials for HTTP telemetry/control endpoints: CA bundle, bearer token, client certificate.

Real BMCs and power gateways serve TLS with their own CA and authenticate
their callers. Whichever API routed a node to an endpoint (TelemetryProfile
or ``TELEMETRY_*``), every request of the worker goes through one
:class:`HttpAuth` built from its :class:`HttpAuthSettings` (checked at start
by :func:`agentpool.config.settings.load_settings`):

- ``HTTP_CA_BUNDLE``: PEM file of the CAs that sign the endpoints' server
  certificates; unset, ``https`` endpoints are verified against the system
  store;
- ``HTTP_TOKEN_FILE``: a file holding a bearer token, sent as
  ``Authorization: Bearer ...`` to ``https`` endpoints only (a token on a
  plain-text connection would be readable on the wire). The file is stat'ed
  before each request and re-read when it changed, because a mounted Secret
  is rotated by swapping the file;
- ``HTTP_CLIENT_CERT`` / ``HTTP_CLIENT_KEY``: an optional client certificate
  and key (both or neither), reloaded when either file changes.

The token is a secret: it never goes into a log line, an error message, a
status or a metric. Messages name the file, never its content.
"""

from __future__ import annotations

import os
import ssl
import threading

from agentpool.config.settings import HttpAuthSettings, read_token
from agentpool.errors import HttpBackendError

_Stamp = tuple[int, int, int] | None


def _stamp(path: str | None) -> _Stamp:
    """What changes when a file is replaced or rewritten (None: missing or not set)."""
    if path is None:
        return None
    try:
        st = os.stat(path)  # follows the symlinks a mounted Secret is made of
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class HttpAuth:
    """The TLS context and headers of the next request, current with the files. Thread safe."""

    def __init__(self, settings: HttpAuthSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._context_stamp: tuple[_Stamp, _Stamp, _Stamp] | None = None
        self._context: ssl.SSLContext | None = None
        self._token_stamp: _Stamp = None
        self._token: str | None = None

    def context(self, url: str) -> ssl.SSLContext | None:
        """The TLS context for ``url`` (None for plain http: urllib's default applies)."""
        if not url.startswith("https:"):
            return None
        s = self.settings
        stamp = (_stamp(s.ca_bundle), _stamp(s.client_cert), _stamp(s.client_key))
        with self._lock:
            if self._context is None or stamp != self._context_stamp:
                try:
                    self._context = s.tls_context()
                except (ssl.SSLError, OSError) as exc:
                    raise HttpBackendError(url, f"TLS settings do not load: {exc}") from None
                self._context_stamp = stamp
            return self._context

    def headers(self, url: str) -> dict[str, str]:
        """``Authorization`` for ``https`` endpoints when a token file is set."""
        path = self.settings.token_file
        if path is None or not url.startswith("https:"):
            return {}
        stamp = _stamp(path)
        with self._lock:
            if self._token is None or stamp != self._token_stamp:
                try:
                    self._token = read_token(path)
                except OSError as exc:
                    raise HttpBackendError(
                        url, f"cannot read the token file {path}: {exc.strerror}"
                    ) from None
                self._token_stamp = stamp
            token = self._token
        if not token:
            raise HttpBackendError(url, f"the token file {path} is empty")
        return {"Authorization": f"Bearer {token}"}
