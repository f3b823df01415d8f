"""The supervisor loop's descriptors: what it waits on, and how it writes without blocking.

One long-lived epoll selector holds the wake-up pipe (informer events and
signals write to it) and, for each worker, its pipe and its exit sentinel,
registered when the worker starts and unregistered before they are closed,
so a turn of the loop touches only the workers that have something to say.

Writes to a worker go through its handle's outbox: only the latest inputs
(:attr:`WorkerHandle.unsent`) and the latest fence
(:attr:`WorkerHandle.fence_unsent`, sent first) are kept, framed when the
previous message has left, and handed to the socket with a non-blocking send. What the socket
does not take waits for the selector to report the pipe writable again, and
:attr:`WorkerHandle.outbox_since` tells the loop for how long a worker has
not been reading. Only the loop's thread uses this object, except
:meth:`LoopIO.wake`.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal

from agentpool.pool.fence import FenceTimes
from agentpool.supervisor.handles import WorkerHandle
from agentpool.worker.protocol import Fence, frame, send_nowait

READ = selectors.EVENT_READ
READ_WRITE = selectors.EVENT_READ | selectors.EVENT_WRITE


class LoopIO:
    def __init__(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, READ, None)
        self.readable: set[str] = set()
        """Nodes whose worker pipe has data or hit EOF since the last read."""
        self.writable: set[str] = set()
        """Nodes whose worker pipe can take more of a pending message."""
        self.exited: set[str] = set()
        """Nodes whose worker's exit sentinel fired since the last reap."""
        self.stalled: set[str] = set()
        """Nodes whose worker's pipe began refusing a message (``outbox_since`` set) since
        the loop last looked: from then on the worker counts towards being hung."""
        self._fence_frame: tuple[FenceTimes, bytes] | None = None
        """The last fence framed: a renewal sends the same one to every worker."""

    def wake(self) -> None:
        """Make the current or next ``wait`` return (thread safe)."""
        with contextlib.suppress(BlockingIOError):  # full: the loop is already due to wake
            os.write(self._wake_w, b"\0")

    def wake_on_signals(self) -> None:
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)

    def close(self) -> None:
        self._selector.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` for something to do; sort what is ready into the sets."""
        for key, mask in self._selector.select(timeout):
            if key.data is None:
                self._drain_wake_pipe()
                continue
            node, what = key.data
            if what == "exit":
                self.exited.add(node)
                continue
            if mask & selectors.EVENT_READ:
                self.readable.add(node)
            if mask & selectors.EVENT_WRITE:
                self.writable.add(node)

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    # -- a worker's descriptors ------------------------------------------------------------------

    def _register(self, fd: int, mask: int, data: tuple[str, str]) -> None:
        try:
            self._selector.register(fd, mask, data)
        except KeyError:  # already registered (or a stale entry for a reused number)
            self._selector.modify(fd, mask, data)

    def unregister(self, fd: int) -> None:
        try:
            self._selector.unregister(fd)
        except (KeyError, ValueError, OSError):
            pass  # never registered, or already gone

    def add_worker(self, handle: WorkerHandle) -> None:
        """Register a freshly spawned worker's pipe and exit sentinel."""
        if handle.conn is not None:
            self._register(handle.conn.fileno(), READ, (handle.node, "conn"))
        if handle.process is not None:
            self._register(handle.process.sentinel, READ, (handle.node, "exit"))

    def close_conn(self, handle: WorkerHandle) -> None:
        """Unregister and close the worker's pipe; what was still to send is dropped."""
        conn, handle.conn = handle.conn, None
        self.readable.discard(handle.node)
        self.writable.discard(handle.node)
        handle.unsent, handle.outbox, handle.outbox_since = None, bytearray(), None
        handle.fence_unsent = None
        handle.inbox = bytearray()
        if conn is None:
            return
        with contextlib.suppress(OSError):
            self.unregister(conn.fileno())
        conn.close()

    def _framed(self, times: FenceTimes) -> bytes:
        cached = self._fence_frame
        if cached is None or cached[0] != times:
            cached = self._fence_frame = (times, frame(Fence(times)))
        return cached[1]

    def flush(self, handle: WorkerHandle, now: float) -> None:
        """Hand the pipe as much as it takes now; ask for a wake-up when it can take more."""
        conn = handle.conn
        if conn is None:
            return
        try:
            while True:
                if not handle.outbox and handle.fence_unsent is not None:
                    handle.outbox += self._framed(handle.fence_unsent)
                    handle.fence_sent, handle.fence_unsent = handle.fence_unsent, None
                if not handle.outbox and handle.unsent is not None:
                    handle.outbox += frame(handle.unsent)
                    handle.last_sent, handle.unsent = handle.unsent, None
                if not handle.outbox:
                    break
                sent = send_nowait(conn.fileno(), handle.outbox)
                del handle.outbox[:sent]
                if handle.outbox:
                    break
        except OSError:  # the worker's end is gone; its sentinel tells how it ended
            handle.unsent, handle.fence_unsent, handle.outbox = None, None, bytearray()
        full = bool(handle.outbox)
        if not full:
            handle.outbox_since = None
        elif handle.outbox_since is None:
            handle.outbox_since = now
            self.stalled.add(handle.node)
        data = (handle.node, "conn")
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.modify(conn.fileno(), READ_WRITE if full else READ, data)
