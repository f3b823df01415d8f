"""The supervisor's pipe protocol and the fork server's wire: truncated or corrupt frames end
that worker (or that fork server) cleanly, never the supervisor.

Supervisor side: the real loop, with stand-in worker processes whose pipe
ends the test holds (tests/supervisor/fakeworkers.py); the test writes raw
bytes into a worker's pipe (valid reports bent at random bytes, frames of
any length, truncated frames, pickles of anything) and turns the loop under
a SIGALRM deadline, so a blocking read fails the example instead of hanging.
Worker side: a real worker forked by the real fork server, whose pipe gets
the same bytes; it must exit and put its host back. Fork server: a real one
gets requests of any shape, and must answer or exit quietly, never crash.
"""

from __future__ import annotations

import contextlib
import pickle
import signal
import socket
import struct
from collections.abc import Iterator
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from types import FrameType

from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.spec.gpu import GpuBackend, GpuTickResult
from agentpool.spec.values import Backend, NodeInputs, Result, TickResult
from agentpool.supervisor.handles import WorkerState
from agentpool.worker.protocol import Stopped, StopWorker, TickReport
from tests.properties.budget import examples
from tests.supervisor.fakeworkers import Loop

TURN_LIMIT_S = 5.0
"""A turn of the loop takes milliseconds; one that takes this long is blocked on a read."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the main thread if the block runs longer than ``seconds``."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"blocked for {seconds}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _frame(payload: bytes) -> bytes:
    return struct.pack("!i", len(payload)) + payload


def _report(node: str) -> TickReport:
    gpu = GpuTickResult(GpuBackend.HTTP, Result.ERROR, "x", {"devices": [1.5, None]})
    result = TickResult(Backend.RAPL, Result.APPLIED, "ok", {"capWatts": 120.0}, gpu)
    return TickReport(node, result, 0.01)


VALID = bytes(ForkingPickler.dumps(_report("a")))
STOPPED = bytes(ForkingPickler.dumps(Stopped("a", ("a problem",))))


@st.composite
def bent_pickles(draw: st.DrawFn) -> bytes:
    """A valid report's pickle with a few bytes replaced, removed or cut off."""
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        how = draw(st.sampled_from(["replace", "delete", "truncate"]))
        if how == "replace":
            data[at] = draw(st.integers(0, 255))
        elif how == "delete":
            del data[at]
        else:
            del data[at:]
            break
    return bytes(data)


junk_objects = st.one_of(
    st.integers(), st.text(max_size=8), st.none(), st.dictionaries(st.text(max_size=3),
                                                                   st.integers(), max_size=3),
    st.builds(TickReport, st.text(max_size=3), st.integers() | st.none(), st.floats()),
    st.builds(TickReport, st.just("a"),
              st.builds(TickResult, st.just(Backend.RAPL), st.just(Result.APPLIED),
                        st.integers() | st.none(), st.integers() | st.none()),
              st.just(0.1)),
    st.builds(Stopped, st.just("a"), st.integers() | st.lists(st.integers(), max_size=2)),
    st.just(StopWorker()),
    st.just(NodeInputs("a")),
)
"""Well-framed pickles of objects the supervisor does not expect from a worker."""

frames = st.one_of(
    st.just(_frame(VALID)),
    st.just(_frame(STOPPED)),
    bent_pickles().map(_frame),
    junk_objects.map(lambda o: _frame(pickle.dumps(o))),
    st.binary(max_size=40).map(_frame),
    st.binary(max_size=40),  # no framing at all
    st.integers(-(2**31), 2**31 - 1).map(lambda n: struct.pack("!i", n) + b"\x80\x05"),
    st.just(struct.pack("!i", -1) + struct.pack("!Q", 2**40)),  # Connection's 64-bit header
    st.just(_frame(VALID)[: len(VALID) // 2]),  # a report cut in half
)


def _send(pipe: Connection, data: bytes) -> None:
    sock = socket.socket(fileno=pipe.fileno())
    try:
        sock.sendall(data)
    finally:
        sock.detach()


@settings(max_examples=examples(60))
@given(written=st.lists(frames, min_size=1, max_size=4), then_close=st.booleans())
def test_any_bytes_from_a_worker_end_that_worker_never_the_supervisor(
    written: list[bytes], then_close: bool
) -> None:
    with Loop() as loop:
        loop.nodes("a", "b")
        loop.turn()
        a, b = loop.launcher.of("a")[0], loop.launcher.of("b")[0]
        a.report()
        b.report()
        loop.turn()
        assert loop.handle("a").state is WorkerState.RUNNING
        for data in written:
            _send(a.pipe, data)
        if then_close:
            a.pipe.close()
        with deadline(TURN_LIMIT_S):
            for _ in range(4):
                loop.turn()
        # The other worker never noticed.
        b.report()
        with deadline(TURN_LIMIT_S):
            loop.turn()
        assert loop.handle("b").state is WorkerState.RUNNING
        assert loop.handle("b").process is b.process
        assert b.process.signals == []
        # The worker that wrote them: it goes on only if all it wrote was whole, valid
        # messages; otherwise it is stopped (and restarted after its backoff).
        whole = all(d in (_frame(VALID), _frame(STOPPED)) for d in written)
        handle = loop.handle("a")
        if whole and not then_close:
            assert handle.state is WorkerState.RUNNING
            assert a.process.signals == []
        elif not then_close:
            assert a.process.signals, (written, handle.state)  # told to stop: SIGTERM
            assert handle.state in (WorkerState.STOPPING, WorkerState.BACKOFF)
        if not loop.supervisor.workers["a"].process:
            return
        a.process.exit(0)
        with deadline(TURN_LIMIT_S):
            loop.turn()
        assert loop.handle("a").state is WorkerState.BACKOFF
