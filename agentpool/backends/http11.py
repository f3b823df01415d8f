"""One HTTP/1.1 request and its answer on a kept-alive connection: the lean wire format.

What the telemetry and control requests need and nothing else: a request
written in one send, an answer read into one buffer, framed by
``Content-Length``, chunked transfer coding or the connection's end, with
``1xx`` interim answers skipped. :mod:`agentpool.backends.httpclient` decides
what a request is and what its answer means; this module only moves bytes.

Why not ``http.client``: a node's worker makes one or two such requests per
tick, and there ``http.client`` was most of a tick's CPU on the client side:
its headers parsed by the ``email`` package, each header validated and
encoded in a call of its own, the headers and the body sent apart (two
``sendto`` calls, and two wake-ups of the server), a buffered file and a
response object per answer. Measured in one process against the power
simulator in another: ~270 us of CPU per control request through
``http.client``, ~175 us through this module, ~85 us for a bare socket loop
that parses nothing (docs/history/benchmarks-rounds.md, fifth round).

Every receive is bounded by the request's deadline (a server that drips its
answer a byte at a time, each within a socket timeout, is cut off at the
deadline all the same), bodies are read up to a bound, and what is not
well-formed HTTP/1.x is a :class:`HttpProtocolError`, never a guess. Like
``http.client``, header lines are at most :data:`MAX_LINE` bytes and an
answer at most :data:`MAX_HEADERS` of them.
"""

from __future__ import annotations

import re
import socket
import ssl
import time
from dataclasses import dataclass

from agentpool.errors import DisconnectedError, HttpProtocolError

MAX_LINE = 65536
"""The longest status or header line taken (``http.client``'s limit)."""
MAX_HEADERS = 100
"""The most header lines an answer may have (``http.client``'s limit)."""
RECV_BYTES = 65536
_ILLEGAL = re.compile(r"[\x00-\x20\x7f]")
"""What a request target may not hold (``http.client`` refuses the same)."""
_BAD_VALUE = re.compile(r"[\r\n\x00]")
"""What would end a header line early: a header smuggled into the request."""
_HEX = re.compile(rb"[0-9A-Fa-f]+")
"""A chunk size."""


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

    def exchange(self, data: bytes, method: str, deadline: float, limit: int) -> Reply:
        """Send a request (``request_bytes``) and read its answer, all before ``deadline``
        (monotonic seconds): TimeoutError past it. Reads at most ``limit + 1`` bytes of
        body. The connection is closed when the answer leaves it unusable."""
        sock = self.sock
        if sock is None:
            raise HttpProtocolError("not connected")
        try:
            _settimeout(sock, deadline)
            sock.sendall(data)
            reply = _Reader(sock, deadline).answer(method, limit)
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


class _Reader:
    """One answer from a socket: a buffer filled by receives that each end by the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()
        self.pos = 0
        self.eof = False
        self.received = False

    def _fill(self) -> bool:
        """Receive more; False at the end of the connection."""
        if self.eof:
            return False
        _settimeout(self.sock, self.deadline)
        chunk = self.sock.recv(RECV_BYTES)
        if not chunk:
            self.eof = True
            return False
        self.received = True
        if self.pos:  # drop what was consumed before growing the buffer
            del self.buf[: self.pos]
            self.pos = 0
        self.buf += chunk
        return True

    def line(self, what: str) -> bytes:
        """The next line, without its end (CRLF or LF); b"" with no line end before EOF."""
        while True:
            end = self.buf.find(b"\n", self.pos)
            if end >= 0:
                if end - self.pos > MAX_LINE:
                    raise HttpProtocolError(f"{what} longer than {MAX_LINE} bytes")
                line = bytes(self.buf[self.pos:end])
                self.pos = end + 1
                return line[:-1] if line.endswith(b"\r") else line
            if len(self.buf) - self.pos > MAX_LINE:
                raise HttpProtocolError(f"{what} longer than {MAX_LINE} bytes")
            if not self._fill():
                if self.pos == len(self.buf):
                    return b""
                raise HttpProtocolError(f"the connection ended inside the {what}")

    def take(self, count: int) -> bytes:
        """Up to ``count`` bytes of body (fewer only at the end of the connection)."""
        while len(self.buf) - self.pos < count and self._fill():
            pass
        data = bytes(self.buf[self.pos:self.pos + count])
        self.pos += len(data)
        return data

    def answer(self, method: str, limit: int) -> Reply:
        while True:
            version, status, reason = self._status_line()
            headers = self._headers()
            if not 100 <= status < 200 or status == 101:
                break  # 1xx answers are interim (a 100 Continue nobody asked for, say)
        te = headers.get("transfer-encoding")
        length = _content_length(headers.get("content-length"))
        connection = headers.get("connection", "").lower()
        keep = "close" not in connection if version == 11 else "keep-alive" in connection
        if status in (204, 304) or 100 <= status < 200 or method == "HEAD":
            body = b""
        elif te is not None:
            if te.strip().lower() != "chunked":
                raise HttpProtocolError(f"unsupported Transfer-Encoding {te!r}")
            body, complete = self._chunked(limit)
            keep = keep and complete
        elif length is not None:
            body = self.take(min(length, limit + 1))
            if len(body) < min(length, limit + 1):
                raise HttpProtocolError(f"the connection ended {length - len(body)} bytes short")
            keep = keep and length <= limit
        else:  # no framing: the body ends with the connection
            body = self.take(limit + 1)
            keep = False
        keep = keep and self.pos == len(self.buf)  # nothing may follow the answer
        return Reply(status, reason, body, keep)

    def _status_line(self) -> tuple[int, int, str]:
        raw = self.line("status line")
        if not raw and not self.received:
            raise DisconnectedError("the server closed the connection without an answer")
        line = raw.decode("latin-1")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise HttpProtocolError(f"not an HTTP status line: {line[:80]!r}")
        version = parts[0]
        if version in ("HTTP/1.0", "HTTP/0.9"):
            number = 10
        elif version.startswith("HTTP/1."):
            number = 11
        else:
            raise HttpProtocolError(f"unsupported protocol {version[:20]!r}")
        code = parts[1]
        if len(code) != 3 or not code.isdigit() or not 100 <= int(code) <= 999:
            raise HttpProtocolError(f"not an HTTP status line: {line[:80]!r}")
        return number, int(code), parts[2].strip() if len(parts) > 2 else ""

    def _headers(self) -> dict[str, str]:
        """Header names lower-cased; a repeated header's values joined with commas."""
        headers: dict[str, str] = {}
        count = 0
        last = ""
        while True:
            raw = self.line("header line")
            if not raw:  # the blank line that ends them (or the connection's end)
                return headers
            count += 1
            if count > MAX_HEADERS:
                raise HttpProtocolError(f"more than {MAX_HEADERS} headers")
            line = raw.decode("latin-1")
            if line[0] in " \t" and last:  # an obsolete folded continuation
                headers[last] += " " + line.strip()
                continue
            name, colon, value = line.partition(":")
            name = name.strip().lower()
            if not colon or not name:
                raise HttpProtocolError(f"malformed header line {line[:40]!r}")
            value = value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
            last = name

    def _chunked(self, limit: int) -> tuple[bytes, bool]:
        """The body of a chunked answer, and whether it was read to its end."""
        parts: list[bytes] = []
        size = 0
        while True:
            header = self.line("chunk size").split(b";", 1)[0].strip()
            # Hex digits only: int(x, 16) would also take a sign, "0x" and underscores.
            if not _HEX.fullmatch(header):
                raise HttpProtocolError(f"bad chunk size {header[:20]!r}")
            chunk = int(header, 16)
            if chunk == 0:
                while self.line("trailer"):  # trailers are read and ignored
                    pass
                return b"".join(parts), True
            want = min(chunk, limit + 1 - size)
            data = self.take(want)
            if len(data) < want:
                raise HttpProtocolError("the connection ended inside a chunk")
            parts.append(data)
            size += len(data)
            if size > limit:
                return b"".join(parts), False
            if self.line("chunk end"):
                raise HttpProtocolError("a chunk longer than its size")


def _content_length(value: str | None) -> int | None:
    if value is None:
        return None
    values = {v.strip() for v in value.split(",")}  # a repeated header, joined
    if len(values) != 1 or not (text := values.pop()).isdigit():
        raise HttpProtocolError(f"bad Content-Length {value[:40]!r}")
    return int(text)
