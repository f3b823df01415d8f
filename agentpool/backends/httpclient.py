"""The transport of the Joulie HTTP telemetry/control protocol, shared by CPU and GPU.

Telemetry is a ``GET`` answering a JSON object (:func:`get_telemetry`);
control a ``POST`` of ``{"node", "action", ..., "ts"}`` whose 2xx JSON answer
may carry ``result``, ``message`` and ``state`` (:func:`post_action`). What
the CPU and the GPU read and send is theirs:
:mod:`agentpool.backends.cpu_http`, :mod:`agentpool.backends.gpu_http`.

Requests go out on one kept-alive connection per origin and worker thread
(a worker owns a single node, so that is one or two connections), in the
HTTP/1.1 exchange of :mod:`agentpool.backends.http11` (answers parsed by
httptools; why not ``http.client``: there), and a tick whose server keeps
connections alive costs no connection set-up. Redirects are not followed (a
3xx is an error, as any non-2xx), so credentials never travel elsewhere. The endpoint's timeout
bounds the whole request, not each receive: a server that drips its answer
a byte at a time, each just inside a socket timeout, is cut off at the
deadline all the same. ``https`` connections use
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

import json
import math
import re
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from agentpool import __version__
from agentpool.backends import fencing, http11
from agentpool.backends.httpauth import HttpAuth
from agentpool.config.settings import HttpAuthSettings
from agentpool.durations import utc_timestamp
from agentpool.errors import DisconnectedError, HttpBackendError, HttpProtocolError, shown
from agentpool.resources.routing import HttpEndpoint
from agentpool.results import Result

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
        self.by_origin: dict[tuple[str, str], http11.Connection] = {}


_open = _Connections()


def close_connections() -> None:
    """Close this thread's kept-alive connections (the fork server, after its warm-up)."""
    for conn in _open.by_origin.values():
        conn.close()
    _open.by_origin.clear()


def _origin(parts: urllib.parse.SplitResult) -> tuple[str, int, str]:
    """(host to connect to, port, the ``Host`` header) of a URL; HttpProtocolError for a port
    that cannot be used."""
    netloc = parts.netloc.rpartition("@")[2]
    try:
        port = parts.port
    except ValueError:
        text = netloc.rpartition(":")[2]
        problem = "port out of range" if text.isdigit() else "nonnumeric port"
        raise HttpProtocolError(f"{problem}: {text!r}") from None
    host = parts.hostname or ""
    return host, port or (443 if parts.scheme == "https" else 80), netloc


def _connection(
    scheme: str, parts: urllib.parse.SplitResult, context: ssl.SSLContext | None
) -> tuple[http11.Connection, str]:
    """This thread's connection to the URL's origin (made if need be, not yet connected),
    and the ``Host`` header of its requests."""
    host, port, host_header = _origin(parts)
    key = (scheme, parts.netloc)
    conn = _open.by_origin.get(key)
    if conn is not None and conn.context is not context:
        _open.by_origin.pop(key).close()  # TLS files changed: reconnect with them
        conn = None
    if conn is None:
        if len(_open.by_origin) >= MAX_CONNECTIONS:  # endpoints moved: drop the oldest
            oldest = next(iter(_open.by_origin))
            _open.by_origin.pop(oldest).close()
        conn = http11.Connection(host, port, context)
        _open.by_origin[key] = conn
    return conn, host_header


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
    context = _auth.context(url)  # None for plain http
    deadline = time.monotonic() + timeout  # both attempts together: one timeout
    for attempt in (1, 2):
        if method == "POST":
            fencing.permit(f"POST {url}", timeout)
        conn: http11.Connection | None = None
        reused = False
        try:
            conn, host = _connection(parts.scheme, parts, context)
            data = http11.request_bytes(method, target, host, headers, body)
            reused = conn.sock is not None
            if not reused:
                _connect(conn, url, timeout, deadline)
            reply = conn.exchange(data, deadline, MAX_BODY_BYTES)
        except TimeoutError as exc:
            raise HttpBackendError(url, f"timed out after {timeout:g}s") from exc
        except (ConnectionError, DisconnectedError) as exc:  # reset, or closed while idle
            if reused and attempt == 1:
                continue
            raise HttpBackendError(url, f"request failed: {exc}") from exc
        except (OSError, ValueError, HttpProtocolError) as exc:  # a malformed answer, a bad URL
            if conn is not None:
                conn.close()
            what = shown(str(exc))[1:-1] if isinstance(exc, HttpProtocolError) else shown(exc)
            raise HttpBackendError(url, f"request failed: {what}") from exc
        if not 200 <= reply.status < 300:
            problem = f"HTTP {reply.status} {shown(reply.reason)}"
            if reply.status in (401, 403):
                problem += f": {_refusal(reply.status)}"
            raise HttpBackendError(url, problem, status=reply.status)
        if len(reply.body) > MAX_BODY_BYTES:
            raise HttpBackendError(url, f"answer larger than {MAX_BODY_BYTES} bytes")
        return reply.body
    raise AssertionError("unreachable: the second attempt returns or raises")


def _connect(conn: http11.Connection, url: str, timeout: float, deadline: float) -> None:
    try:
        conn.connect(max(0.001, deadline - time.monotonic()))
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


_LONG_NUMBER = re.compile(r"\d{19}")
"""Digits enough to overflow int64 (a float's text never holds that many in a row)."""


def _portable_json(state: dict[str, Any]) -> str:
    """``state`` as JSON if an API server can store it (:func:`_portable`), else "".

    The encoder refuses NaN and the infinities itself; only a text with an integer long
    enough to overflow int64 (or a string of such digits) takes the walk over every value.
    """
    try:
        encoded = json.dumps(state, allow_nan=False)
    except ValueError:
        return ""
    if _LONG_NUMBER.search(encoded) and not _portable(state):
        return ""
    return encoded


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
    encoded = _portable_json(state)
    if not encoded or len(encoded) > MAX_STATE_BYTES:
        note = f"; its state is not finite JSON of at most {MAX_STATE_BYTES} bytes, not kept"
        return ControlAnswer(result, message + note, {})
    return ControlAnswer(result, message, state)
