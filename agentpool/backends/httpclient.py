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
non-2xx), so credentials never travel elsewhere. ``https`` connections use
the TLS context and headers of :mod:`agentpool.backends.httpauth`; when its
files change, the connection is made again with the new context. Bodies are
read up to a bound so a misbehaving endpoint cannot balloon a worker's memory.

Every request says who sent it: ``User-Agent: agentpool/<version> (<pod
name>, shard <id>)`` (:func:`user_agent`), so a BMC gateway's or the
simulator's log shows which pool pod acted on a node.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from agentpool import __version__
from agentpool.backends import fencing
from agentpool.backends.httpauth import HttpAuth
from agentpool.config.settings import HttpAuthSettings
from agentpool.durations import utc_timestamp
from agentpool.errors import HttpBackendError
from agentpool.spec.values import HttpEndpoint, Result

MAX_BODY_BYTES = 1 << 20
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


_open = _Connections()


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
    for attempt in (1, 2):
        if method == "POST":
            fencing.permit(f"POST {url}", timeout)
        conn = _connection(parts.scheme, parts.netloc, timeout, context)
        reused = conn.sock is not None
        try:
            if not reused:
                _connect(conn, url, timeout)
            conn.request(method, target, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read(MAX_BODY_BYTES + 1)
        except TimeoutError as exc:
            conn.close()
            raise HttpBackendError(url, f"timed out after {timeout:g}s") from exc
        except (ConnectionError, http.client.RemoteDisconnected) as exc:
            conn.close()
            if reused and attempt == 1:
                continue
            raise HttpBackendError(url, f"request failed: {exc}") from exc
        except (OSError, ValueError, http.client.HTTPException) as exc:
            conn.close()  # reset mid-body, malformed answer...
            raise HttpBackendError(url, f"request failed: {exc}") from exc
        if not response.isclosed():  # body left unread (too large): the connection is spent
            conn.close()
        if not 200 <= response.status < 300:
            problem = f"HTTP {response.status} {response.reason}"
            if response.status in (401, 403):
                problem += f": {_refusal(response.status)}"
            raise HttpBackendError(url, problem, status=response.status)
        if len(data) > MAX_BODY_BYTES:
            raise HttpBackendError(url, f"answer larger than {MAX_BODY_BYTES} bytes")
        return data
    raise AssertionError("unreachable: the second attempt returns or raises")


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
        raise HttpBackendError(url, f"unknown result {raw_result!r} in answer") from None
    if result is Result.NONE:
        result = Result.APPLIED
    message = str(payload.get("message") or f"{action} {result.value}")
    state = payload.get("state")
    return ControlAnswer(result, message, state if isinstance(state, dict) else {})
