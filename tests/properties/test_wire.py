"""The supervisor's pipe protocol and the fork server's wire: truncated or corrupt frames end
that worker (or that fork server) cleanly, never the supervisor.

Supervisor side: the real loop, with stand-in worker processes whose pipe
ends the test holds (tests/support/fakeworkers.py); the test writes raw
bytes into a worker's pipe (valid reports bent at random bytes, frames of
any length, truncated frames, pickles of anything) and turns the loop under
a SIGALRM deadline, so a blocking read fails the example instead of hanging.
Worker side: a real worker forked by the real fork server, whose pipe gets
the same bytes; it must exit and put its host back. Fork server: a real one
gets requests of any shape, and must answer or exit quietly, never crash.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from multiprocessing.connection import Connection, Pipe, wait
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentpool.config.options import AgentMode
from agentpool.config.settings import Settings
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.results import Backend, GpuBackend, GpuTickResult, Result, TickResult
from agentpool.supervisor.forkclient import SERVER_MODULE, ForkServer
from agentpool.supervisor.lifecycle import WorkerState
from agentpool.worker.forking.wire import HEADER, READY, REPLY, STATUS, recv_exact
from agentpool.worker.protocol import Stopped, StopWorker, TickReport
from tests.support.budget import examples
from tests.support.fakeworkers import Loop

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


def _judge(data: bytes) -> str:
    """What a stream of bytes is, frame by frame (the test's own reading of the framing):
    'valid' (whole reports only), 'pending' (valid so far, the last frame not whole yet)
    or 'corrupt'."""
    offset = 0
    while offset < len(data):
        if len(data) - offset < 4:
            return "pending"
        (size,) = struct.unpack_from("!i", data, offset)
        if not 0 < size <= 16 << 20:
            return "corrupt"
        if offset + 4 + size > len(data):
            return "pending"
        if data[offset + 4 : offset + 4 + size] not in (VALID, STOPPED):
            return "corrupt"
        offset += 4 + size
    return "valid"


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
        verdict = _judge(b"".join(written))
        handle = loop.handle("a")
        if verdict != "corrupt" and not then_close:
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


# -- the worker's side: a real worker from the real fork server ------------------------------

WORKER_EXIT_S = 30.0
"""A worker exits in milliseconds once it has read its pipe; this is for a loaded CI box."""

to_worker = st.one_of(
    st.just(_frame(bytes(ForkingPickler.dumps(StopWorker())))),
    st.just(_frame(bytes(ForkingPickler.dumps(NodeInputs("n"))))),
    junk_objects.map(lambda o: _frame(pickle.dumps(o))),
    bent_pickles().map(_frame),
    st.binary(max_size=40).map(_frame),
    st.binary(max_size=40),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: struct.pack("!i", n) + b"\x80\x05"),
    st.just(struct.pack("!i", 100) + b"\x80\x05"),  # a frame cut short
)


@pytest.fixture(scope="module")
def fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    previous = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path_factory.mktemp("metrics"))
    server = ForkServer()
    assert server.wait_ready(60.0)  # a spawn does not wait for a server still starting
    try:
        yield server
    finally:
        server.stop()
        if previous is None:
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        else:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = previous


def _exit_code(status_fd: int, timeout: float) -> int | None:
    ready = wait([status_fd], timeout)
    if not ready:
        return None
    data = os.read(status_fd, STATUS.size)
    return STATUS.unpack(data)[0] if len(data) == STATUS.size else None


@settings(max_examples=examples(12))
@given(written=st.lists(to_worker, min_size=1, max_size=3))
def test_any_bytes_to_a_worker_end_it_cleanly_or_leave_it_running(
    fork_server: ForkServer, written: list[bytes]
) -> None:
    from agentpool.sim.sysfs.trees import intel_2socket
    from tests.support.sysfs import snapshot as tree_snapshot

    scratch = Path(tempfile.mkdtemp(prefix="agentpool-wire-"))
    tree = intel_2socket(scratch / "n")
    try:
        before = tree_snapshot(tree.root)
        # Ticks far apart: the test does not read the reports, which must not fill the pipe.
        settings = Settings(mode=AgentMode.POOL, reconcile_interval_s=30.0,
                            sysfs_root=str(scratch / "{node}"))
        profile = {"metadata": {"name": "p"},
                   "spec": {"nodeName": "n", "profile": "eco", "cpu": {"packagePowerCapWatts": 80}}}
        labels = {"feature.node.kubernetes.io/cpu-vendor": "GenuineIntel"}
        inputs = NodeInputs("n", labels=labels, power_profile=profile)
        ours, theirs = Pipe(duplex=True)
        try:
            worker = fork_server.spawn("n", settings.worker(), str(scratch / "journal"), inputs,
                                       theirs.fileno())
        finally:
            theirs.close()
        try:
            assert ours.poll(WORKER_EXIT_S)
            first = ours.recv()
            assert isinstance(first, TickReport)
            assert first.result.result is Result.APPLIED, first.result
            for data in written:
                _send(ours, data)
            code = _exit_code(worker.sentinel, 0.2)
            if code is None:
                # Still running (whole messages, a frame not yet whole, or not done yet):
                # SIGTERM, what the supervisor sends, must end it.
                worker.terminate()
                code = _exit_code(worker.sentinel, WORKER_EXIT_S)
            # A clean stop, or a crash path that logged why; the host went back either way.
            assert code in (0, 70), code
            assert tree_snapshot(tree.root) == before  # it put the host back either way
        finally:
            worker.kill()
            worker.close()
            ours.close()
    finally:
        tree.close()
        shutil.rmtree(scratch, ignore_errors=True)


# -- the fork server's wire ------------------------------------------------------------------


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, int, bytes]:
    """(header, how many descriptors ride on it, the rest) of one request to the fork server."""
    payload = draw(st.one_of(
        junk_objects.map(lambda o: pickle.dumps(o)),
        st.tuples(st.text(max_size=4), st.integers(), st.none(), st.none()).map(pickle.dumps),
        bent_pickles(),
        st.binary(max_size=40),
    ))
    size = draw(st.one_of(st.just(len(payload)), st.integers(0, 2**32 - 1)))
    deadline = draw(st.one_of(st.just(math.inf), st.floats()))  # NaN and the past: forks nothing
    header = HEADER.pack(size, deadline)
    header = draw(st.sampled_from([header, header[:2], b""]))
    return header, draw(st.sampled_from([2, 2, 0, 1, 3])), payload


@settings(max_examples=examples(6))
@given(request=requests())
# A header without the descriptors it needs: the server may close before the rest is sent
# (a clean-clone CI run met the closed socket in the test's own send).
@example(request=(HEADER.pack(100, math.inf), 0, pickle.dumps(("a", 2411, None, None))))
def test_any_request_to_the_fork_server_is_answered_or_ends_it_quietly(
    tmp_path_factory: pytest.TempPathFactory, request: tuple[bytes, int, bytes]
) -> None:
    header, fd_count, payload = request
    ours, theirs = socket.socketpair()
    stderr = tmp_path_factory.mktemp("server") / "stderr"
    with open(stderr, "wb") as err:
        server = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stderr=err,
        )
    theirs.close()
    pipes = [os.pipe() for _ in range(fd_count)]
    try:
        # Its ready message (with the preload report) comes first, before any request.
        ours.settimeout(WORKER_EXIT_S * 4)
        (report_size,) = READY.unpack(recv_exact(ours, READY.size))
        recv_exact(ours, report_size)
        ours.settimeout(None)
        # The server may end the exchange before it has read all of it (a request that
        # came without its descriptors, say): a send then meets a closed socket, which is
        # one way of ending quietly; how it exited is asserted below all the same.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if header:
                socket.send_fds(ours, [header], [w for _, w in pipes])
            ours.sendall(payload)
            ours.shutdown(socket.SHUT_WR)  # no more requests: the server stops at EOF
        ours.settimeout(WORKER_EXIT_S)
        reply = b""
        with contextlib.suppress(OSError):
            while chunk := ours.recv(REPLY.size - len(reply)):
                reply += chunk
                if len(reply) == REPLY.size:
                    break
        code = server.wait(WORKER_EXIT_S)
        assert code == 0, stderr.read_text()
        assert "Traceback" not in stderr.read_text(), stderr.read_text()
        if len(reply) == REPLY.size:
            (pid,) = REPLY.unpack(reply)
            if pid > 0:
                # It forked on arguments that are not a worker's: the child says why, and
                # its exit code goes to its status pipe (the second descriptor).
                status_r = pipes[1][0]
                assert _exit_code(status_r, WORKER_EXIT_S) == 70
    finally:
        ours.close()
        if server.poll() is None:
            server.kill()
            server.wait()
        for r, w in pipes:
            for fd in (r, w):
                with contextlib.suppress(OSError):
                    os.close(fd)
