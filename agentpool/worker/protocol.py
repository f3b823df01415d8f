"""Messages between the supervisor and a worker over their pipe (pickled), and how the
supervisor sends them without ever blocking.

Supervisor -> worker: :class:`NodeInputs` (new desired state: tick now) or
:class:`StopWorker`. Worker -> supervisor: :class:`TickReport` after every
tick (doubles as the heartbeat) and :class:`Stopped` once host values were
restored on the way out.

The worker reads and writes with ``Connection.recv``/``send``. The supervisor
reads the same way (only when the selector says data is there) but writes
with :func:`frame` and :func:`send_nowait`: ``Connection.send`` blocks once the
socket buffer is full, and a worker that stopped reading would then stop the
whole loop. The framing is ``Connection.send``'s own (a 4-byte big-endian
length, then the pickle), so the worker's ``recv`` reads both alike.
"""

from __future__ import annotations

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
