"""One HTTP/1.1 request and its answer on a kept-alive connection.

What the telemetry and control requests need and nothing else: a request
written in one send, its answer received into httptools' parser (llhttp,
Node.js's HTTP parser) as it arrives, framed by ``Content-Length``, chunked
transfer coding or the connection's end, with ``1xx`` interim answers
skipped. :mod:`agentpool.backends.httpclient` decides what a request is and
what its answer means; this module only moves bytes.

Why not ``http.client``: a node's worker makes one or two such requests per
tick, and there ``http.client`` (its headers parsed by the ``email``
package, the headers and the body sent apart, a buffered file and a response
object per answer) was most of a tick's CPU on the client side
(BENCHMARKS.md, the optimisations).

Every receive is bounded by the request's deadline (a server that drips its
answer a byte at a time, each within a socket timeout, is cut off at the
deadline all the same), bodies are read up to a bound, and what is not
well-formed HTTP/1.x is a :class:`HttpProtocolError`, never a guess. Like
``http.client``, a header line is at most :data:`MAX_LINE` bytes and an
answer has at most :data:`MAX_HEADERS` of them (and :data:`MAX_HEAD` bytes
before its body).
"""

from __future__ import annotations

import re
import socket
import ssl
import time
from dataclasses import dataclass

import httptools

from agentpool.errors import DisconnectedError, HttpProtocolError

MAX_LINE = 65536
"""The longest status or header line taken (``http.client``'s limit)."""
MAX_HEADERS = 100
"""The most header lines an answer may have (``http.client``'s limit)."""
MAX_HEAD = 4 * MAX_LINE
"""The most bytes received before an answer's headers end (its 1xx answers included)."""
RECV_BYTES = 65536
_ILLEGAL = re.compile(r"[\x00-\x20\x7f]")
"""What a request target may not hold (``http.client`` refuses the same)."""
_BAD_VALUE = re.compile(r"[\r\n\x00]")
"""What would end a header line early: a header smuggled into the request."""


@dataclass(frozen=True)
class Reply:
    status: int
    reason: str
    body: bytes
    """At most the ``limit`` the request was made with, plus one byte."""
    reusable: bool
    """Whether the connection can carry the next request (the answer was read to its end,
    nothing followed it, and the server did not say it closes)."""


def request_bytes(method: str, target: str, host: str, headers: dict[str, str],
                  body: bytes | None) -> bytes:
    """The request as it goes on the wire; HttpProtocolError for a target or header that
    would not make one request."""
    if _ILLEGAL.search(target):
        raise HttpProtocolError(f"URL can't contain control characters: {target!r}")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Accept-Encoding: identity"]
    for name, value in headers.items():
        if _BAD_VALUE.search(name) or _BAD_VALUE.search(value) or ":" in name:
            raise HttpProtocolError(f"invalid header {name!r}")
        lines.append(f"{name}: {value}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body is not None else head


class Connection:
    """A kept-alive connection to one origin. Not thread safe: a worker has one thread."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.port = port
        self.context = context
        """The TLS context of an ``https`` origin; None for plain HTTP."""
        self.sock: socket.socket | None = None

    def connect(self, timeout: float) -> None:
        sock = socket.create_connection((self.host, self.port), timeout)
        try:
            # A request is one small write and its answer is awaited: Nagle would only delay.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.context is not None:
                sock = self.context.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock

    def close(self) -> None:
        if self.sock is not None:
            sock, self.sock = self.sock, None
            sock.close()

    def exchange(self, data: bytes, deadline: float, limit: int) -> Reply:
        """Send a ``GET`` or ``POST`` (``request_bytes``) and read its answer, all before
        ``deadline`` (monotonic seconds): TimeoutError past it. Reads at most ``limit + 1``
        bytes of body. The connection is closed when the answer leaves it unusable."""
        sock = self.sock
        if sock is None:
            raise HttpProtocolError("not connected")
        try:
            _settimeout(sock, deadline)
            sock.sendall(data)
            reply = _Answer(limit).read(sock, deadline)
        except BaseException:
            self.close()
            raise
        if not reply.reusable:
            self.close()
        return reply


def _settimeout(sock: socket.socket, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request's deadline passed")
    sock.settimeout(left)


class _Answer:
    """One answer, as httptools' parser calls back while it is fed: interim (``1xx``)
    answers are passed over, the body is kept up to its bound."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parser = httptools.HttpResponseParser(self)
        self.reason = ""
        self.headers = 0
        self.framed = False
        """The final answer says where its body ends (a length, or chunks)."""
        self.headers_done = False
        self.head_bytes = 0
        self.body: list[bytes] = []
        self.size = 0
        self.complete = False
        self.keep = False
        self.problem = ""

    # -- httptools' callbacks (an exception raised in one is the parser's error) ----------

    def on_message_begin(self) -> None:
        if self.complete:  # bytes after the answer: not a connection to use again
            self.keep = False
            raise HttpProtocolError("data after the answer")
        self.reason, self.headers, self.framed, self.headers_done = "", 0, False, False

    def on_status(self, reason: bytes) -> None:
        if len(reason) > MAX_LINE:
            raise HttpProtocolError(f"status line longer than {MAX_LINE} bytes")
        self.reason = reason.decode("latin-1").strip()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers += 1
        if self.headers > MAX_HEADERS:
            raise HttpProtocolError(f"more than {MAX_HEADERS} headers")
        if len(name) + len(value) > MAX_LINE:
            raise HttpProtocolError(f"header line longer than {MAX_LINE} bytes")
        lowered = name.lower()
        if lowered == b"transfer-encoding":
            if value.strip().lower() != b"chunked":
                raise HttpProtocolError(f"unsupported Transfer-Encoding {value[:40]!r}")
            self.framed = True
        elif lowered == b"content-length":
            self.framed = True

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if not 100 <= status <= 999:
            raise HttpProtocolError(f"not an HTTP status code: {status}")
        self.keep = self.parser.should_keep_alive()
        self.headers_done = True

    def on_body(self, data: bytes) -> None:
        room = self.limit + 1 - self.size
        if room > 0:
            self.body.append(data[:room])
            self.size += min(room, len(data))

    def on_message_complete(self) -> None:
        if not 100 <= self.parser.get_status_code() < 200:  # an interim answer goes on
            self.complete = True

    # -- reading ---------------------------------------------------------------------------

    def read(self, sock: socket.socket, deadline: float) -> Reply:
        received = False
        while not self.complete and self.size <= self.limit:
            _settimeout(sock, deadline)
            chunk = sock.recv(RECV_BYTES)
            if not chunk:
                return self._at_eof(received)
            received = True
            self._feed(chunk)
        return self._reply(self.complete and self.keep)

    def _feed(self, chunk: bytes) -> None:
        try:
            self.parser.feed_data(chunk)
        except httptools.HttpParserUpgrade as exc:
            raise HttpProtocolError("an answer that upgrades the connection") from exc
        except httptools.HttpParserError as exc:
            if self.complete:  # the answer was whole: only what came after is wrong
                self.keep = False
                return
            cause = exc.__context__  # what one of the callbacks above raised
            raise (cause if isinstance(cause, HttpProtocolError) else
                   HttpProtocolError(str(exc))) from exc
        if not self.headers_done:
            self.head_bytes += len(chunk)
            if self.head_bytes > MAX_HEAD:
                raise HttpProtocolError(f"more than {MAX_HEAD} bytes before the body")

    def _at_eof(self, received: bool) -> Reply:
        """The connection ended: the end of a body without a length, or of an answer cut
        short."""
        if not received:
            raise DisconnectedError("the server closed the connection without an answer")
        if self.headers_done and not self.framed and not self.complete:
            return self._reply(False)  # no framing: the body ends with the connection
        if not self.complete:
            raise HttpProtocolError("the connection ended inside the answer")
        return self._reply(False)

    def _reply(self, reusable: bool) -> Reply:
        return Reply(self.parser.get_status_code(), self.reason, b"".join(self.body), reusable)
