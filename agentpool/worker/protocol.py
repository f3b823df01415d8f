"""Messages between the supervisor and a worker over their pipe (pickled), and how the
supervisor sends them without ever blocking.

Supervisor -> worker: :class:`NodeInputs` (new desired state: tick now),
:class:`Fence` (the deadlines after which it stops acting on its own: at
start, with each lease renewal, and as the reply to its heartbeats) or
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

import signal
import socket
import struct
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler

from agentpool.pool.fence import FenceTimes
from agentpool.spec.values import TickResult

EXIT_FENCED = 75
"""A worker's exit status when its fence passed and it stopped on its own (EX_TEMPFAIL):
the supervisor neither counts it as a crash nor writes the node's status for it."""
DUMP_SIGNAL = signal.SIGUSR1
"""Makes a worker write every thread's stack to stderr (``faulthandler``), even while it
hangs in a system call: sent before a hung worker is killed, so the log says where."""

MAX_FRAME = 0x7FFFFFFF
"""Larger messages need ``Connection``'s 12-byte header; no message comes close."""


@dataclass(frozen=True)
class StopWorker:
    """Restore host values and exit 0."""


@dataclass(frozen=True)
class Fence:
    """Stop acting at ``times.stop_at``; write nothing after ``times.write_until``.

    Both on CLOCK_MONOTONIC, which every process of the host shares. Each one
    replaces the last; a worker that must hold one (lease mode) does not tick
    before the first.
    """

    times: FenceTimes


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
    reason: str = ""
    """Why the worker stopped on its own (a crash, a fence that passed); empty when it
    was asked to stop."""


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
