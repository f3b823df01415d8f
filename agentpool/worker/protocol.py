"""Messages between the supervisor and a worker over their pipe (pickled), and how the
supervisor sends them without ever blocking.

Supervisor -> worker: :class:`NodeInputs` (new desired state: tick now),
:class:`Fence` (the deadlines after which it stops acting on its own: at
start, with each lease renewal, and as the reply to its heartbeats) or
:class:`StopWorker`. Worker -> supervisor, after every tick (doubles as the
heartbeat): a :class:`TickReport` when the result differs from the last one
reported, else :data:`TICKED`, a few constant bytes saying "ticked, same
result" that neither side pickles (most steady ticks); and :class:`Stopped`
once host values were restored on the way out.

The worker writes with ``Connection.send``. The supervisor writes with
:func:`frame` and :func:`send_nowait` (``Connection.send`` blocks once the
socket buffer is full, and a worker that stopped reading would then stop the
whole loop). Both read with :func:`read_frames`, never ``Connection.recv``,
which blocks until a whole message is there (a frame cut short would stop
the supervisor's loop, or keep a worker from ever seeing its SIGTERM) and
raises whatever unpickling a corrupt frame raises. The framing is
``Connection.send``'s own (a 4-byte big-endian length, then the pickle).

Anything else than whole, well-formed :class:`TickReport` and :class:`Stopped`
messages from a worker is a :class:`~agentpool.errors.PipeProtocolError` (:func:`receive`): the
supervisor stops that worker (and restarts it after its backoff), and goes
on. A worker that reads one exits through its crash path, restoring its host.
"""

from __future__ import annotations

import pickle
import signal
import socket
import struct
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler

from agentpool.errors import PipeProtocolError
from agentpool.pool.fence import FenceTimes
from agentpool.results import Backend, GpuBackend, GpuTickResult, Result, TickResult

EXIT_FENCED = 75
"""A worker's exit status when its fence passed and it stopped on its own (EX_TEMPFAIL):
the supervisor neither counts it as a crash nor writes the node's status for it."""
DUMP_SIGNAL = signal.SIGUSR1
"""Makes a worker write every thread's stack to stderr (``faulthandler``), even while it
hangs in a system call: sent before a hung worker is killed, so the log says where."""

MAX_FRAME = 0x7FFFFFFF
"""Larger messages need ``Connection``'s 12-byte header; no message comes close."""
MAX_MESSAGE = 16 << 20
"""The largest message either end reads (a report or a node's inputs is a few KiB): a
longer frame is junk, not something to wait for."""
_LENGTH = struct.Struct("!i")


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
class Ticked:
    """The worker ticked and its result is the one it last reported, again."""


TICKED = pickle.dumps(Ticked(), pickle.HIGHEST_PROTOCOL)
"""The payload of a :class:`Ticked` report, built once: the worker sends these bytes and
the supervisor recognises them without unpickling."""
TICKED_MESSAGE = Ticked()
"""What :func:`read_frames` gives for those bytes, without unpickling them."""
REFRESH_S = 60.0
"""A result that differs only in its readings (:data:`~agentpool.results.READINGS`) is
reported at most this often: the status writer writes them with a change or a heartbeat
only, minutes apart."""


@dataclass(frozen=True)
class Stopped:
    node: str
    problems: tuple[str, ...]
    """Host values that could not be restored (empty when all went back)."""
    reason: str = ""
    """Why the worker stopped on its own: a crash (the exception and the inputs it was
    enforcing) or a fence that passed; empty when it was asked to stop."""


def frame(message: object) -> bytes:
    """``message`` as ``Connection.send`` would put it on the wire."""
    payload = bytes(ForkingPickler.dumps(message))
    if len(payload) > MAX_FRAME:
        raise ValueError(f"message of {len(payload)} bytes is too large for one frame")
    return struct.pack("!i", len(payload)) + payload




def _borrow(fd: int) -> socket.socket:
    """A socket object over the pipe's descriptor, to call ``send``/``recv`` with flags;
    the caller detaches it, so the descriptor stays the ``Connection``'s.

    Family, type and protocol are given (a ``Pipe(duplex=True)`` end is a ``socketpair``:
    AF_UNIX, SOCK_STREAM): left out, the constructor asks the kernel for each, three
    system calls per message on the supervisor's busiest path.
    """
    return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, fileno=fd)


def send_nowait(fd: int, data: bytes | bytearray | memoryview) -> int:
    """Write what fits into the socket ``fd`` now; returns the number of bytes written.

    ``MSG_DONTWAIT`` makes this one call non-blocking without setting
    ``O_NONBLOCK`` on the descriptor, which would also make the supervisor's
    ``recv`` of a half-arrived message fail. Raises ``OSError`` when the
    worker's end is gone.
    """
    sock = _borrow(fd)
    try:
        return sock.send(data, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return 0
    finally:
        sock.detach()  # the descriptor stays the Connection's


def read_frames(fd: int, inbox: bytearray) -> tuple[list[object], bool]:
    """Read what the socket ``fd`` holds now, without blocking; the whole messages in it.

    ``inbox`` keeps the part of a frame that has not fully arrived, between
    calls. Returns the unpickled messages and whether the other end is
    closed. Raises :class:`PipeProtocolError` for a frame of an impossible
    length, one that does not unpickle, or one cut short by the end of the
    pipe; the messages before it are lost with the peer.
    """
    closed = False
    sock = _borrow(fd)
    try:
        while True:
            try:
                chunk = sock.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except ConnectionResetError:
                # The peer exited with a message of ours unread (a worker that crashed
                # before reading its first fence): what it sent before still counts.
                closed = True
                break
            if not chunk:
                closed = True
                break
            inbox += chunk
    finally:
        sock.detach()  # the descriptor stays the Connection's
    messages: list[object] = []
    while len(inbox) >= _LENGTH.size:
        (size,) = _LENGTH.unpack_from(inbox)
        if not 0 < size <= MAX_MESSAGE:
            raise PipeProtocolError(f"a frame of {size} bytes")
        if len(inbox) < _LENGTH.size + size:
            break  # the rest is on its way
        payload = bytes(inbox[_LENGTH.size : _LENGTH.size + size])
        del inbox[: _LENGTH.size + size]
        messages.append(TICKED_MESSAGE if payload == TICKED else _unpickle(payload))
    if closed and inbox:
        raise PipeProtocolError(f"{len(inbox)} bytes of a frame cut short by the end of the pipe")
    return messages, closed


def receive(fd: int, inbox: bytearray) -> tuple[list[TickReport | Ticked | Stopped], bool]:
    """The supervisor's :func:`read_frames`: only well-formed worker messages pass."""
    messages, closed = read_frames(fd, inbox)
    for message in messages:
        if not well_formed(message):
            raise PipeProtocolError(f"an unexpected message: {type(message).__name__}")
    return [m for m in messages if isinstance(m, TickReport | Ticked | Stopped)], closed


def _unpickle(payload: bytes) -> object:
    try:
        return pickle.loads(payload)
    except Exception as exc:  # a corrupt pickle raises anything at all
        problem = f"{type(exc).__name__}: {exc}"
        raise PipeProtocolError(f"a frame that does not unpickle ({problem})") from exc


def well_formed(message: object) -> bool:
    """Whether ``message`` is a report or a stop notice the supervisor can act on."""
    if isinstance(message, Ticked):
        return True
    if isinstance(message, Stopped):
        return (
            isinstance(message.node, str)
            and isinstance(message.reason, str)
            and isinstance(message.problems, tuple)
            and all(isinstance(p, str) for p in message.problems)
        )
    if not isinstance(message, TickReport):
        return False
    result, gpu = message.result, getattr(message.result, "gpu", None)
    return (
        isinstance(message.node, str)
        and isinstance(message.duration_s, int | float)
        and isinstance(result, TickResult)
        and isinstance(result.backend, Backend)
        and isinstance(result.result, Result)
        and isinstance(result.message, str)
        and isinstance(result.observed, dict)
        and (
            gpu is None
            or (
                isinstance(gpu, GpuTickResult)
                and isinstance(gpu.backend, GpuBackend)
                and isinstance(gpu.result, Result)
                and isinstance(gpu.message, str)
                and isinstance(gpu.observed, dict)
            )
        )
    )
