"""The supervisor loop's descriptors, with real pipes: wake-ups, readiness, sends that never
block."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterator

import pytest

from agentpool.resources.nodeinputs import NodeInputs
from agentpool.supervisor.handles import WorkerHandle
from agentpool.supervisor.loopio import LoopIO
from agentpool.worker.protocol import frame


@pytest.fixture
def io() -> Iterator[LoopIO]:
    loop = LoopIO()
    yield loop
    loop.close()


def test_wake_from_another_thread_ends_a_wait(io: LoopIO) -> None:
    threading.Timer(0.05, io.wake).start()
    started = time.monotonic()
    io.wait(30)
    assert time.monotonic() - started < 10  # the wake-up, not the timeout
    assert not io.readable
    assert not io.exited


def test_a_wait_with_nothing_to_do_times_out(io: LoopIO) -> None:
    io.wake()
    io.wait(5)  # drains the wake-up
    started = time.monotonic()
    io.wait(0.05)
    assert time.monotonic() - started >= 0.04


def test_a_worker_pipe_becomes_readable_and_closing_it_forgets_it(io: LoopIO) -> None:
    ours, theirs = multiprocessing.Pipe()
    handle = WorkerHandle("a", conn=ours)
    io.add_worker(handle)
    theirs.send("report")
    io.wait(5)
    assert io.readable == {"a"}
    io.close_conn(handle)
    assert handle.conn is None
    assert "a" not in io.readable
    theirs.close()


def test_only_the_latest_inputs_wait_and_a_full_pipe_asks_for_a_wake_up(io: LoopIO) -> None:
    ours, theirs = multiprocessing.Pipe()
    handle = WorkerHandle("a", conn=ours)
    io.add_worker(handle)
    # Distinct values (pickle would share equal ones): far more than a socket buffer.
    big = NodeInputs("a", labels={f"k{i}": f"{i:0200d}" for i in range(20000)})
    handle.unsent = big
    io.flush(handle, now=1.0)
    # The pipe took what it could; the rest waits, and nothing blocked.
    assert handle.last_sent == big
    assert handle.unsent is None
    assert 0 < len(handle.outbox) < len(frame(big))
    assert handle.outbox_since == 1.0
    newer = NodeInputs("a", labels={"k": "newer"})
    handle.unsent = NodeInputs("a", labels={"k": "older"})
    handle.unsent = newer  # replaced before it was sent: only the latest goes
    received: list[object] = []
    reader = threading.Thread(target=lambda: received.extend(theirs.recv() for _ in range(2)))
    reader.start()
    deadline = time.monotonic() + 10
    while (handle.outbox or handle.unsent is not None) and time.monotonic() < deadline:
        io.wait(0.5)
        if "a" in io.writable:
            io.writable.discard("a")
            io.flush(handle, now=2.0)
    reader.join(10)
    assert received == [big, newer]
    assert handle.outbox_since is None
    io.close_conn(handle)
    theirs.close()


def test_a_worker_whose_end_is_gone_drops_what_was_to_send(io: LoopIO) -> None:
    ours, theirs = multiprocessing.Pipe()
    handle = WorkerHandle("a", conn=ours)
    io.add_worker(handle)
    theirs.close()
    handle.unsent = NodeInputs("a")
    io.flush(handle, now=1.0)  # EPIPE: no exception escapes into the loop
    assert handle.unsent is None
    assert not handle.outbox
    io.close_conn(handle)
