"""A TCP server on 127.0.0.1 that answers every request with scripted raw bytes.

It stands in for a misbehaving telemetry or control endpoint (a BMC gateway,
a simulator with a bug, a proxy in between): the answer is bytes, not an
HTTP library's idea of a response, so status lines, headers and bodies can
be anything, arrive in slow pieces, stop half way, or never end.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field

OVERRUN_S = 3.0
"""How far past its timeout a client's request to this server may end on a busy machine.
The overrun measured is ~10 ms; a property campaign on two cores shared with a full test
run stalled a request for 1.1 s once. An answer meant to outlast a timeout plus this
(a drip) must take longer than both together."""


@dataclass(frozen=True)
class Answer:
    """What the server sends back for each request."""

    data: bytes
    pieces: int = 1
    """Sent in this many pieces..."""
    delay_s: float = 0.0
    """...with this pause before each one."""
    hold: bool = False
    """After the data, keep the connection open and silent (until the client gives up)."""


@dataclass
class RawServer:
    answer: Answer
    requests: list[bytes] = field(default_factory=list)
    """Every request received, headers and body."""

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # close() from another thread does not wake accept()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self.port = self._listener.getsockname()[1]
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    @property
    def connections(self) -> int:
        """Connections accepted so far."""
        return len(self._conns)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/endpoint/{{node}}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._conns.append(conn)
            handler = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            handler.start()
            self._threads.append(handler)

    def _read_request(self, conn: socket.socket) -> bytes | None:
        data = b""
        conn.settimeout(5.0)
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        return head + b"\r\n\r\n" + body

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            while not self._stop.is_set():
                request = self._read_request(conn)
                if request is None:
                    return
                self.requests.append(request)
                answer = self.answer
                size = max(1, -(-len(answer.data) // max(1, answer.pieces)))
                for start in range(0, max(1, len(answer.data)), size):
                    if answer.delay_s:
                        time.sleep(answer.delay_s)
                    conn.sendall(answer.data[start : start + size])
                if answer.hold:
                    conn.settimeout(0.05)
                    while not self._stop.is_set():
                        try:
                            if not conn.recv(65536):
                                return
                        except TimeoutError:
                            continue
                    return
                head = answer.data.partition(b"\r\n\r\n")[0].lower()
                if b"\r\nconnection: close" in head:
                    return  # as it said: the connection ends with the answer
                # Keep-alive: the client may send the next request on this connection.

    def close(self) -> None:
        self._stop.set()
        self._threads[0].join(timeout=5)  # the accept loop: no connection comes after this
        self._listener.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
