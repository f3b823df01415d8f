"""Messages between the supervisor and a worker over their pipe (pickled), and how the
supervisor sends them without ever blocking.

Supervisor -> worker: :class:`NodeInputs` (new desired state: tick now) or
:class:`StopWorker`. Worker -> supervisor, after every tick (doubles as the
heartbeat): a :class:`TickReport` when the result differs from the last one
reported, else :data:`TICKED`, a few constant bytes saying "ticked, same
result" that neither side pickles (most steady ticks); and :class:`Stopped`
once host values were restored on the way out.

The worker reads and writes with ``Connection.recv``/``send``. The supervisor
reads the same way (only when the selector says data is there) but writes
with :func:`frame` and :func:`send_nowait`: ``Connection.send`` blocks once the
socket buffer is full, and a worker that stopped reading would then stop the
whole loop. The framing is ``Connection.send``'s own (a 4-byte big-endian
length, then the pickle), so the worker's ``recv`` reads both alike.
"""

from __future__ import annotations

import pickle
import socket
import struct
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler

from agentpool.spec.values import TickResult

MAX_FRAME = 0x7FFFFFFF
"""Larger messages need ``Connection``'s 12-byte header; no message comes close."""


@dataclass(frozen=True)
class StopWorker:
    """Restore host values and exit 0."""


@dataclass(frozen=True)
class TickReport:
    node: str
    result: TickResult
    duration_s: float


@dataclass(frozen=True)
class Ticked:
    """The worker ticked and its result is the one it last reported, again."""


TICKED = pickle.dumps(Ticked(), pickle.HIGHEST_PROTOCOL)
"""The payload of a :class:`Ticked` report, built once: the worker sends these bytes and
the supervisor recognises them without unpickling."""
REFRESH_S = 60.0
"""A result that differs only in ``observed`` (power readings) is reported at most this
often; the status writer writes ``observed`` at its heartbeat only, minutes apart."""


@dataclass(frozen=True)
class Stopped:
    node: str
    problems: tuple[str, ...]
    """Host values that could not be restored (empty when all went back)."""


def frame(message: object) -> bytes:
    """``message`` as ``Connection.send`` would put it on the wire."""
    payload = bytes(ForkingPickler.dumps(message))
    if len(payload) > MAX_FRAME:
        raise ValueError(f"message of {len(payload)} bytes is too large for one frame")
    return struct.pack("!i", len(payload)) + payload


def decode_frames(buffer: bytearray) -> list[bytes]:
    """Take every complete frame's payload out of ``buffer`` (what is left is a partial
    frame, kept for the next read)."""
    payloads = []
    start = 0
    while len(buffer) - start >= 4:
        (size,) = struct.unpack_from("!i", buffer, start)
        if size < 0:
            raise ValueError(f"frame of {size} bytes: not this protocol")
        end = start + 4 + size
        if end > len(buffer):
            break
        payloads.append(bytes(buffer[start + 4 : end]))
        start = end
    del buffer[:start]
    return payloads


def recv_nowait(fd: int, size: int = 1 << 16) -> bytes | None:
    """What the socket ``fd`` holds now, up to ``size`` bytes: ``b""`` at EOF, None when
    nothing is there yet. Non-blocking as :func:`send_nowait` is; ``OSError`` when the
    worker's end is gone."""
    sock = socket.socket(fileno=fd)
    try:
        return sock.recv(size, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return None
    finally:
        sock.detach()


def send_nowait(fd: int, data: bytes | bytearray | memoryview) -> int:
    """Write what fits into the socket ``fd`` now; returns the number of bytes written.

    ``MSG_DONTWAIT`` makes this one call non-blocking without setting
    ``O_NONBLOCK`` on the descriptor, which would also make the supervisor's
    ``recv`` of a half-arrived message fail. Raises ``OSError`` when the
    worker's end is gone.
    """
    sock = socket.socket(fileno=fd)
    try:
        return sock.send(data, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return 0
    finally:
        sock.detach()  # the descriptor stays the Connection's
