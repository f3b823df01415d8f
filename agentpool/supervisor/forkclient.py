"""The supervisor's side of the lean fork server: start it, ask it for workers, stop it.

The server (:mod:`agentpool.worker.forking.server`) is a separate, fresh
interpreter started with ``subprocess``, so it inherits none of the
supervisor's threads, sockets, locks or imported modules. It is started
again, lazily, at the next spawn after it died; the workers it had exit on
their parent-death signal and are reported dead through their status pipes.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading

from agentpool.config.settings import WorkerSettings
from agentpool.spec.values import NodeInputs
from agentpool.supervisor.orphans import spare_pids
from agentpool.worker.forking.wire import HEADER, REPLY, STATUS, recv_exact

SERVER_MODULE = "agentpool.worker.forking.server"
LOST_EXIT_CODE = 255
"""The exit code reported for a worker whose fork server died before it did (as
multiprocessing's fork server reports it)."""


class ForkedWorker:
    """A worker forked by the fork server: a :class:`WorkerProcess` for the supervisor.

    Its sentinel is the read end of its status pipe: readable once the fork
    server wrote the exit code, or closed it by dying.
    """

    def __init__(self, pid: int, status_fd: int) -> None:
        self._pid = pid
        self._fd = status_fd
        self._exitcode: int | None = None

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def sentinel(self) -> int:
        return self._fd

    @property
    def exitcode(self) -> int | None:
        if self._exitcode is None and self._fd >= 0:
            os.set_blocking(self._fd, False)
            try:
                data = os.read(self._fd, STATUS.size)
            except BlockingIOError:
                return None
            self._exitcode = STATUS.unpack(data)[0] if len(data) == STATUS.size else LOST_EXIT_CODE
        return self._exitcode

    def _signal(self, signum: int) -> None:
        if self.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signum)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class ForkServer:
    """Owns the fork server process; thread-safe (one request at a time)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def ensure_running(self) -> None:
        with self._lock:
            self._ensure_running()

    def _ensure_running(self) -> None:
        if self._process is not None and self._process.poll() is None and self._sock is not None:
            return
        self._discard()
        ours, theirs = socket.socketpair()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", SERVER_MODULE, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        spare_pids.add(self._process.pid)

    def spawn(
        self, node: str, settings: WorkerSettings, journal: str | None, inputs: NodeInputs | None,
        conn_fd: int,
    ) -> ForkedWorker:
        """Fork the worker of ``node``; ``conn_fd`` is its end of the pipe (the caller
        keeps and closes its own copy). Raises ``OSError`` when no worker was started."""
        payload = pickle.dumps((node, settings, journal, inputs), pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self._ensure_running()
            sock = self._sock
            assert sock is not None
            status_r, status_w = os.pipe()
            try:
                socket.send_fds(sock, [HEADER.pack(len(payload))], [conn_fd, status_w])
                sock.sendall(payload)
                reply = recv_exact(sock, REPLY.size)
            except (OSError, EOFError) as exc:
                os.close(status_r)
                self._discard()  # dead or confused: a new one at the next spawn
                raise OSError(f"fork server lost: {exc!r}") from exc
            finally:
                os.close(status_w)
        (pid,) = REPLY.unpack(reply)
        if pid <= 0:
            os.close(status_r)
            raise OSError(-pid, f"fork server could not fork: {os.strerror(-pid)}")
        return ForkedWorker(pid, status_r)

    def stop(self, timeout: float = 5.0) -> None:
        """Close the socket (the server exits at EOF) and reap it; SIGKILL past ``timeout``."""
        with self._lock:
            self._discard(timeout)

    def _discard(self, timeout: float = 5.0) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        spare_pids.discard(process.pid)

