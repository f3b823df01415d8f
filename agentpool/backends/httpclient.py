"""The transport of the Joulie HTTP telemetry/control protocol, shared by CPU and GPU.

Telemetry is a ``GET`` answering a JSON object (:func:`get_telemetry`);
control a ``POST`` of ``{"node", "action", ..., "ts"}`` whose 2xx JSON answer
may carry ``result``, ``message`` and ``state`` (:func:`post_action`). What
the CPU and the GPU read and send is theirs:
:mod:`agentpool.backends.cpu_http`, :mod:`agentpool.backends.gpu_http`.

Uses the standard library's ``http.client`` with one kept-alive connection
per origin and worker thread (a worker owns a single node, so that is one
or two connections): no urllib opener and handler chain is rebuilt per
request, and a tick whose server keeps connections alive costs no
connection set-up. Redirects are not followed (a 3xx is an error, as any
non-2xx), so credentials never travel elsewhere. The endpoint's timeout
bounds the whole request, not each receive: a server that drips its answer
a byte at a time, each just inside a socket timeout, is cut off at the
deadline all the same (:class:`_DeadlineIO`). ``https`` connections use
the TLS context and headers of :mod:`agentpool.backends.httpauth`; when its
files change, the connection is made again with the new context. Bodies are
read up to a bound so a misbehaving endpoint cannot balloon a worker's memory.

What an answer carries is checked before it goes anywhere: a control
answer's message is cut to :data:`MAX_MESSAGE` characters and its ``state``
kept only when it is finite JSON of at most :data:`MAX_STATE_BYTES` (both
end up in the node's status, which a megabyte message or a NaN would make
unwritable); readings are the CPU's and GPU's modules' to check.

Every request says who sent it: ``User-Agent: agentpool/<version> (<pod
name>, shard <id>)`` (:func:`user_agent`), so a BMC gateway's or the
simulator's log shows which pool pod acted on a node.
"""

from __future__ import annotations

import http.client
import io
import json
import math
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from agentpool import __version__
from agentpool.backends import fencing
from agentpool.backends.httpauth import HttpAuth
from agentpool.config.settings import HttpAuthSettings
from agentpool.durations import utc_timestamp
from agentpool.errors import HttpBackendError, shown
from agentpool.spec.values import HttpEndpoint, Result

MAX_BODY_BYTES = 1 << 20
MAX_MESSAGE = 500
"""Characters of an endpoint's ``message`` kept for the status."""
MAX_STATE_BYTES = 4096
"""The largest ``state`` of a control answer kept for the status (as JSON)."""
MAX_CONNECTIONS = 4
"""Kept-alive connections per worker (its telemetry and control origins, usually one)."""
_GET_HEADERS = {"Accept": "application/json"}
_POST_HEADERS = {"Content-Type": "application/json"}


DEFAULT_USER_AGENT = f"agentpool/{__version__}"


def user_agent(pod_name: str, shard_id: int) -> str:
    """The User-Agent of every telemetry and control request of this pod."""
    return f"{DEFAULT_USER_AGENT} ({pod_name}, shard {shard_id})"


@dataclass(frozen=True)
class ControlAnswer:
    result: Result
    message: str
    state: dict[str, Any] = field(default_factory=dict)


_auth = HttpAuth(HttpAuthSettings())
"""The credentials of this process's requests (one worker, one node): see :func:`configure`."""


def configure(settings: HttpAuthSettings) -> None:
    """Use these credentials for every later request of this process."""
    global _auth
    if settings != _auth.settings:
        _auth = HttpAuth(settings)
        close_connections()  # kept connections were made with the old credentials


def _refusal(code: int) -> str:
    what = "not authenticated" if code == 401 else "not allowed"
    return f"refused the agent's credentials ({what}: check HTTP_TOKEN_FILE and the client cert)"


class _Connections(threading.local):
    """This thread's open connections, by (scheme, host:port); a worker has one thread."""

    def __init__(self) -> None:
        self.by_origin: dict[tuple[str, str], http.client.HTTPConnection] = {}
        self.contexts: dict[tuple[str, str], ssl.SSLContext | None] = {}
        """The TLS context each connection was made with."""
        self.deadline = math.inf
        """When this thread's request in flight must be over (monotonic seconds)."""


_open = _Connections()


class _DeadlineIO(io.RawIOBase):
    """A connection's socket as an answer is read from it: no receive outlasts the deadline.

    A socket timeout bounds one receive only; ``http.client`` reads the status
    line, each header and each chunk of the body with receives of their own.
    It wraps the socket file ``http.client`` made (``raw``), which holds the
    reference that keeps the socket open when the connection hands itself over
    to an answer that ends with the connection (``Connection: close``).
    """

    def __init__(self, sock: socket.socket, raw: io.RawIOBase, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._raw = raw
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's deadline passed")
        self._sock.settimeout(left)
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _Response(http.client.HTTPResponse):
    """``http.client``'s response, reading through :class:`_DeadlineIO`."""

    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        raw = self.fp.detach()  # nothing is buffered yet: the answer is still unread
        self.fp = io.BufferedReader(_DeadlineIO(sock, raw, _open.deadline))


def close_connections() -> None:
    """Close this thread's kept-alive connections (the fork server, after its warm-up)."""
    for conn in _open.by_origin.values():
        conn.close()
    _open.by_origin.clear()
    _open.contexts.clear()


def _connection(
    scheme: str, netloc: str, timeout: float, context: ssl.SSLContext | None
) -> http.client.HTTPConnection:
    conn = _open.by_origin.get((scheme, netloc))
    if conn is not None and _open.contexts.get((scheme, netloc)) is not context:
        _open.by_origin.pop((scheme, netloc)).close()  # TLS files changed: reconnect with them
        conn = None
    if conn is None:
        if len(_open.by_origin) >= MAX_CONNECTIONS:  # endpoints moved: drop the oldest
            oldest = next(iter(_open.by_origin))
            _open.by_origin.pop(oldest).close()
        if scheme == "https":
            conn = http.client.HTTPSConnection(netloc, timeout=timeout, context=context)
        else:
            conn = http.client.HTTPConnection(netloc, timeout=timeout)
        conn.response_class = _Response
        _open.by_origin[(scheme, netloc)] = conn
        _open.contexts[(scheme, netloc)] = context
    conn.timeout = timeout
    if conn.sock is not None:
        conn.sock.settimeout(timeout)
    return conn


def _exchange(url: str, method: str, headers: dict[str, str], body: bytes | None,
              timeout: float) -> bytes:
    """One request on this thread's kept-alive connection to the URL's origin.

    A request that fails on a reused connection (the server closed it while
    idle) is sent once more on a new one; the control actions are idempotent
    (set a cap, set a throttle), so a repeat is harmless. A POST (a control
    action) is sent only if it lands before this worker's fence
    (:mod:`agentpool.backends.fencing`).
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise HttpBackendError(url, f"request failed: unsupported URL {url!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {**headers, **_auth.headers(url)}
    context = _auth.context(url)
    _open.deadline = time.monotonic() + timeout  # both attempts together: one timeout
    for attempt in (1, 2):
        if method == "POST":
            fencing.permit(f"POST {url}", timeout)
        conn: http.client.HTTPConnection | None = None
        response: http.client.HTTPResponse | None = None
        reused = False
        try:
            conn = _connection(parts.scheme, parts.netloc, _left(), context)
            reused = conn.sock is not None
            if not reused:
                _connect(conn, url, timeout)
            conn.request(method, target, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read(MAX_BODY_BYTES + 1)
        except TimeoutError as exc:
            _drop(conn, response)
            raise HttpBackendError(url, f"timed out after {timeout:g}s") from exc
        except (ConnectionError, http.client.RemoteDisconnected) as exc:
            _drop(conn, response)
            if reused and attempt == 1:
                continue
            raise HttpBackendError(url, f"request failed: {exc}") from exc
        except (OSError, ValueError, http.client.HTTPException) as exc:
            _drop(conn, response)  # reset mid-body, malformed answer, a URL it cannot use...
            raise HttpBackendError(url, f"request failed: {shown(exc)}") from exc
        if not response.isclosed():  # body left unread (too large): the connection is spent
            _drop(conn, response)
        if not 200 <= response.status < 300:
            problem = f"HTTP {response.status} {shown(response.reason)}"
            if response.status in (401, 403):
                problem += f": {_refusal(response.status)}"
            raise HttpBackendError(url, problem, status=response.status)
        if len(data) > MAX_BODY_BYTES:
            raise HttpBackendError(url, f"answer larger than {MAX_BODY_BYTES} bytes")
        return data
    raise AssertionError("unreachable: the second attempt returns or raises")


def _left() -> float:
    """Seconds left before this thread's request deadline (a tiny positive floor: a
    socket timeout of 0 would mean non-blocking, not 'none left')."""
    return max(0.001, _open.deadline - time.monotonic())


def _drop(
    conn: http.client.HTTPConnection | None, response: http.client.HTTPResponse | None
) -> None:
    """Close a connection that cannot be reused, and its answer's socket file with it."""
    if response is not None:
        response.close()
    if conn is not None:
        conn.close()


def _connect(conn: http.client.HTTPConnection, url: str, timeout: float) -> None:
    try:
        conn.connect()
    except TimeoutError as exc:
        conn.close()
        raise HttpBackendError(url, f"timed out after {timeout:g}s") from exc
    except OSError as exc:  # refused, no route, name not resolved
        conn.close()
        raise HttpBackendError(url, f"unreachable: {exc}") from exc


def _json(url: str, body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        snippet = body[:60].decode("utf-8", "replace")
        raise HttpBackendError(url, f"answer is not JSON: {snippet!r}") from exc


def get_telemetry(
    endpoint: HttpEndpoint, node: str, agent: str = DEFAULT_USER_AGENT
) -> tuple[str, dict[str, Any]]:
    """``GET`` the node's telemetry: (its URL, for messages; the JSON object it answered)."""
    url = endpoint.url(node)
    headers = {**_GET_HEADERS, "User-Agent": agent}
    payload = _json(url, _exchange(url, "GET", headers, None, endpoint.timeout_s))
    if not isinstance(payload, dict):
        raise HttpBackendError(url, "answer is not a JSON object")
    return url, payload


def post_action(
    endpoint: HttpEndpoint,
    node: str,
    action: str,
    fields: dict[str, Any],
    agent: str = DEFAULT_USER_AGENT,
) -> ControlAnswer:
    """``POST`` one control action, ``{"node", "action", **fields, "ts"}``; honours
    ``result``/``message``/``state`` in a JSON answer."""
    url = endpoint.url(node)
    body = json.dumps(
        {"node": node, "action": action, **fields, "ts": utc_timestamp(micro=True)}
    ).encode()
    raw = _exchange(
        url, "POST", {**_POST_HEADERS, "User-Agent": agent}, body, endpoint.timeout_s)
    return parse_answer(url, action, raw)


def _portable(value: Any) -> bool:
    """Whether an API server can store ``value``: JSON whose numbers are finite floats or
    integers of int64 (NaN, Infinity or a 400-digit integer make a status write fail)."""
    if isinstance(value, dict):
        return all(_portable(v) for v in value.values())
    if isinstance(value, list):
        return all(_portable(v) for v in value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    return isinstance(value, float) and math.isfinite(value)


def parse_answer(url: str, action: str, raw: bytes) -> ControlAnswer:
    """A control answer: empty or non-object bodies mean accepted; ``result`` is honoured."""
    if not raw.strip():
        return ControlAnswer(Result.APPLIED, f"{action} accepted")
    payload = _json(url, raw)
    if not isinstance(payload, dict):
        return ControlAnswer(Result.APPLIED, f"{action} accepted")
    raw_result = payload.get("result", Result.APPLIED.value)
    try:
        result = Result(raw_result)
    except ValueError:
        raise HttpBackendError(url, f"unknown result {shown(raw_result)} in answer") from None
    if result is Result.NONE:
        result = Result.APPLIED
    message = str(payload.get("message") or f"{action} {result.value}")
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + " [cut]"
    state = payload.get("state")
    if not isinstance(state, dict):
        return ControlAnswer(result, message, {})
    encoded = json.dumps(state) if _portable(state) else ""
    if not encoded or len(encoded) > MAX_STATE_BYTES:
        note = f"; its state is not finite JSON of at most {MAX_STATE_BYTES} bytes, not kept"
        return ControlAnswer(result, message + note, {})
    return ControlAnswer(result, message, state)
