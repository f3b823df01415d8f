"""The lean fork server (zygote): the process every worker is forked from, and its loop.

Run as ``python -m agentpool.worker.forking.server FD [DIAGNOSTICS]`` by
:class:`agentpool.supervisor.forkclient.ForkServer`, with one end of a
socket pair as ``FD`` and the diagnostics settings as JSON (defaults without
them). It imports only what a worker runs (and warms and freezes it, as the
diagnostics allow: :mod:`agentpool.worker.forking.preload`), never the
Kubernetes client, click or multiprocessing's start-up machinery. A worker
hook the diagnostics name is loaded here too, once for every worker. Each
request names a node and carries the worker's arguments and two descriptors
(the worker's end of its pipe and the write end of an exit-status pipe); the
server forks, and the child goes straight into :func:`run_worker` with its
arguments already in memory, so a worker copies only the pages it writes
itself. A request the server comes to after its deadline (the supervisor
stopped waiting for its batch) is answered at once, without a fork.

The server reaps its children: when one exits it writes the exit code
(negative: killed by that signal) to the child's status pipe and closes it,
so the supervisor's end of that pipe is the worker's exit sentinel. When
the supervisor goes away (EOF on the socket) the server exits, and the
workers follow on their parent-death signal, restoring their hosts.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import selectors
import signal
import socket
import sys
import time
from multiprocessing.connection import Connection

from agentpool.config.parsers import load_hook
from agentpool.config.settings import DiagnosticsSettings, WorkerSettings
from agentpool.proctitle import COMM_PREFIX, TITLE_PREFIX, enable, set_title
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.worker.forking import preload
from agentpool.worker.forking.descriptors import close_all
from agentpool.worker.forking.wire import (
    HEADER,
    MAX_REQUEST,
    READY,
    REPLY,
    STATUS,
    TOO_LATE,
    recv_exact,
)
from agentpool.worker.main import EXIT_CRASH, WorkerHook, run_worker


def _receive(sock: socket.socket) -> tuple[tuple[object, ...], list[int], float]:
    """One request: the worker's arguments, its pipe and status descriptors, its deadline.

    Anything else than a request of our supervisor's (cut short, the wrong
    descriptors, a payload that is not the four arguments of a worker) ends
    the server (EOFError): it stops rather than guesses, and the supervisor
    starts a new one at its next spawn.
    """
    header, fds, _, _ = socket.recv_fds(sock, HEADER.size, 2)
    if not header:
        raise EOFError
    header += recv_exact(sock, HEADER.size - len(header))
    size, deadline = HEADER.unpack(header)
    if size > MAX_REQUEST or len(fds) != 2:
        raise EOFError  # not our supervisor talking: stop rather than guess
    try:
        args = pickle.loads(recv_exact(sock, size))
    except EOFError:
        raise
    except Exception as exc:  # a corrupt pickle raises anything at all
        raise EOFError(f"a request that does not unpickle: {exc!r}") from exc
    if not _worker_args(args):
        raise EOFError(f"a request that is not a worker's arguments: {type(args).__name__}")
    return tuple(args), fds, deadline


def _worker_args(args: object) -> bool:
    """Whether ``args`` are what :func:`run_worker` takes (node, settings, journal, inputs)."""
    if not isinstance(args, tuple) or len(args) != 4:
        return False
    node, settings, journal, inputs = args
    return (
        isinstance(node, str)
        and isinstance(settings, WorkerSettings)
        and (journal is None or isinstance(journal, str))
        and (inputs is None or isinstance(inputs, NodeInputs))
    )


def _child(
    args: tuple[object, ...], conn_fd: int, inherited: list[int], hook: WorkerHook | None
) -> None:
    """In the forked worker: drop the server's descriptors and handlers, then run."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        close_all(inherited)
        node, settings, journal, inputs = args  # checked by _receive
        assert isinstance(node, str)
        assert isinstance(settings, WorkerSettings)
        assert journal is None or isinstance(journal, str)
        assert inputs is None or isinstance(inputs, NodeInputs)
        run_worker(node, settings, Connection(conn_fd), journal, inputs, hook)
    finally:
        os._exit(EXIT_CRASH)  # run_worker never returns; anything else is a crash


class _Server:
    def __init__(self, control: socket.socket, hook: WorkerHook | None) -> None:
        self.control = control
        self.hook = hook
        self.children: dict[int, int] = {}
        """pid -> write end of its status pipe."""
        self.selector: selectors.DefaultSelector | None = None
        self.wake_r, self.wake_w = os.pipe()
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)

    def serve(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # only wakes the selector
        self.selector = selector = selectors.DefaultSelector()
        selector.register(self.control, selectors.EVENT_READ)
        selector.register(self.wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj is self.control:
                    try:
                        args, (conn_fd, status_fd), deadline = _receive(self.control)
                    except (EOFError, OSError):
                        return
                    if time.monotonic() < deadline:
                        answer = self._fork(args, conn_fd, status_fd)
                    else:  # the supervisor no longer waits for it: it asks again later
                        os.close(conn_fd)
                        os.close(status_fd)
                        answer = TOO_LATE
                    try:
                        self.control.sendall(REPLY.pack(answer))
                    except OSError:  # the supervisor is gone
                        return
                else:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 512):
                            pass
            self._reap()

    def _fork(self, args: tuple[object, ...], conn_fd: int, status_fd: int) -> int:
        inherited = [self.control.fileno(), self.wake_r, self.wake_w, status_fd,
                     *self.children.values()]
        if self.selector is not None:
            inherited.append(self.selector.fileno())  # an epoll descriptor (none in tests)
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(status_fd)
            os.close(conn_fd)
            return -(exc.errno or 1)
        if pid == 0:
            _child(args, conn_fd, inherited, self.hook)
        os.close(conn_fd)  # the worker's now; the server keeps only its status pipe
        self.children[pid] = status_fd
        return pid

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            fd = self.children.pop(pid, None)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.write(fd, STATUS.pack(os.waitstatus_to_exitcode(status)))
                os.close(fd)


def main(argv: list[str]) -> int:
    control = socket.socket(fileno=int(argv[1]))
    diagnostics = DiagnosticsSettings(**json.loads(argv[2])) if len(argv) > 2 else (
        DiagnosticsSettings())
    enable(diagnostics.proctitle)
    # Before the heap is frozen: the hook's objects are shared by every worker.
    hook = load_hook(diagnostics.worker_hook) if diagnostics.worker_hook else None
    lines = preload.prepare(diagnostics)
    # Tools find the fork server by its module's name in its command line: keep it there.
    set_title(f"{TITLE_PREFIX}fork server ({__spec__.name if __spec__ else __name__})",
              f"{COMM_PREFIX}forkserver")
    report = "\n".join(lines).encode()
    try:
        control.sendall(READY.pack(len(report)) + report)
    except OSError:  # the supervisor is gone already
        return 0
    _Server(control, hook).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
