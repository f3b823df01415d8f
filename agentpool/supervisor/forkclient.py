"""The supervisor's side of the lean fork server: start it, ask it for workers, stop it.

The server (:mod:`agentpool.worker.forking.server`) is a separate, fresh
interpreter started with ``subprocess``, so it inherits none of the
supervisor's threads, sockets, locks or imported modules. It is started
again, lazily, at the next spawn after it died; the workers it had exit on
their parent-death signal and are reported dead through their status pipes.

Nothing here may stall the supervisor's loop: a batch of spawns, whatever its
size, returns within :data:`SPAWN_BOUND_S`. Its requests carry one deadline,
:data:`SPAWN_TIMEOUT_S` away, after which the server forks none of them: those
it had not come to by then are :class:`Deferred`, asked for again at the next
turn. A server whose answers do not all arrive :data:`LATE_ANSWER_S` after the
deadline is taken as stuck: it is killed (its workers follow), without waiting
for it to be gone, and a new one is started at the next spawn. A new server
takes its imports and warm-up before it can fork (seconds): until its ready
message has arrived, a spawn answers :class:`Deferred` at once rather than
wait for it: no worker yet, and no failure either. At start-up the supervisor
waits for it once (:meth:`ForkServer.wait_ready`), and logs the server's
preload report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from agentpool.config.settings import DiagnosticsSettings, WorkerSettings
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.supervisor.orphans import spare_pids
from agentpool.worker.forking.wire import HEADER, READY, REPLY, STATUS, TOO_LATE, recv_exact

log = logging.getLogger(__name__)

SERVER_MODULE = "agentpool.worker.forking.server"
TITLE_ROOM = " " * 96
"""An ignored last argument: argv memory the fork server and its workers rename themselves
in (agentpool.proctitle), so a worker's title has room for a long node name."""
SPAWN_TIMEOUT_S = 2.0
"""A batch's deadline: the server forks no request of it after this long (a fork takes a
few milliseconds, up to ~30 on a loaded 2-core machine while the batch's first workers
set themselves up)."""
LATE_ANSWER_S = 1.0
"""How long after the deadline the last answers may take (a fork under way, then one
instant refusal per request left); a server still silent then counts as stuck."""
DISCARD_WAIT_S = 0.2
"""How long a discarded server gets to exit at EOF before SIGKILL (inside the loop)."""
KILL_WAIT_S = 0.5
"""How long a SIGKILLed server is waited for; one not gone by then (a process in
uninterruptible sleep) is reaped at a later spawn instead."""
SPAWN_BOUND_S = SPAWN_TIMEOUT_S + LATE_ANSWER_S + DISCARD_WAIT_S + KILL_WAIT_S
MAX_BATCH = 64
"""The most requests one batch sends (a few KiB of pickle each: about what the socket
buffers, so the sending ends soon after the deadline however slow the server); the rest
of a larger one are :class:`Deferred`."""
"""The longest :meth:`ForkServer.spawn_many` takes, whatever the batch and the server do."""
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


@dataclass(frozen=True)
class SpawnRequest:
    """One worker to fork: its arguments, and its end of the pipe (``conn_fd``; the caller
    keeps and closes its own copy)."""

    node: str
    settings: WorkerSettings
    journal: str | None
    inputs: NodeInputs | None
    conn_fd: int


@dataclass(frozen=True)
class Deferred:
    """No worker was forked, and nothing failed: the fork server is still importing and
    warming up, or its batch's deadline (or size) left this request out. Ask again
    shortly."""

    why: str


class ForkServer:
    """Owns the fork server process; thread-safe (one request at a time). Every server it
    starts is given ``diagnostics`` (how to preload, a worker hook) on its command line."""

    def __init__(self, diagnostics: DiagnosticsSettings | None = None) -> None:
        self._argument = json.dumps(dataclasses.asdict(diagnostics or DiagnosticsSettings()))
        self._process: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._ready = False
        """The server's ready message (and its preload report) has been read."""
        self._greeting = bytearray()
        self._dying: list[subprocess.Popen[bytes]] = []
        """Servers SIGKILLed but not yet gone: reaped when they are (never waited for)."""

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def ensure_running(self) -> None:
        with self._lock:
            self._ensure_running()

    def _ensure_running(self) -> None:
        self._reap_dying()
        if self._process is not None and self._process.poll() is None and self._sock is not None:
            return
        self._discard(DISCARD_WAIT_S)  # a server found dead: nothing to wait for
        ours, theirs = socket.socketpair()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", SERVER_MODULE, str(theirs.fileno()), self._argument,
                 TITLE_ROOM],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        self._ready, self._greeting = False, bytearray()
        spare_pids.add(self._process.pid)

    def wait_ready(self, timeout: float) -> bool:
        """Wait for the server's ready message (start-up only: this blocks)."""
        with self._lock:
            self._ensure_running()
            return self._read_ready(timeout)

    def _read_ready(self, timeout: float) -> bool:
        """Read what has come of the ready message within ``timeout`` (0: what is there)."""
        sock = self._sock
        assert sock is not None
        sock.settimeout(timeout if timeout > 0 else 0.0)
        try:
            while not self._ready:
                need = READY.size if len(self._greeting) < READY.size else (
                    READY.size + READY.unpack_from(self._greeting)[0])
                chunk = sock.recv(need - len(self._greeting))
                if not chunk:
                    raise EOFError("fork server exited while starting")
                self._greeting += chunk
                if len(self._greeting) >= READY.size and len(self._greeting) == READY.size + (
                        READY.unpack_from(self._greeting)[0]):
                    self._ready = True
                    report = bytes(self._greeting[READY.size:]).decode(errors="replace")
                    for line in filter(None, report.split("\n")):
                        log.info("fork server (pid %s): %s", self.pid, line)
        except (BlockingIOError, TimeoutError):
            pass
        finally:
            sock.settimeout(None)
        return self._ready

    def spawn(
        self, node: str, settings: WorkerSettings, journal: str | None, inputs: NodeInputs | None,
        conn_fd: int,
    ) -> ForkedWorker:
        """Fork the worker of ``node``; ``conn_fd`` is its end of the pipe (the caller
        keeps and closes its own copy). Raises ``OSError`` when no worker was started, the
        server still starting included."""
        (result,) = self.spawn_many([SpawnRequest(node, settings, journal, inputs, conn_fd)])
        if isinstance(result, Deferred):
            raise OSError(result.why)
        if isinstance(result, BaseException):
            raise result
        return result

    def spawn_many(
        self, requests: Sequence[SpawnRequest]
    ) -> list[ForkedWorker | OSError | Deferred]:
        """Fork a worker for each request, in order: each one's worker, why it has none, or
        :class:`Deferred` (for all while the server is still starting; beyond
        :data:`MAX_BATCH` requests; past the deadline).

        Every request is sent before the first answer is read, so the server forks
        them back to back: a start-up of a thousand workers waits for the server and
        the supervisor to be scheduled in turn once per batch, not twice per worker
        (on a loaded machine that waiting, not the forks, was most of a spawn). The
        batch has one deadline (the module's docstring): what the server has not
        forked by then is :class:`Deferred`, and the call returns within
        :data:`SPAWN_BOUND_S`.
        """
        if not requests:
            return []
        with self._lock:
            self._ensure_running()
            try:
                ready = self._ready or self._read_ready(0)
            except (OSError, EOFError) as exc:
                self._discard(DISCARD_WAIT_S)
                raise OSError(f"fork server lost while starting: {exc!r}") from exc
            if not ready:
                return [Deferred(f"fork server (pid {self.pid}) is still starting")] * len(
                    requests)
            left_out = [Deferred(f"more than {MAX_BATCH} starts at once")] * (
                len(requests) - MAX_BATCH)
            return self._exchange(requests[:MAX_BATCH]) + left_out

    def _exchange(
        self, requests: Sequence[SpawnRequest]
    ) -> list[ForkedWorker | OSError | Deferred]:
        sock = self._sock
        assert sock is not None
        deadline = time.monotonic() + SPAWN_TIMEOUT_S
        give_up = deadline + LATE_ANSWER_S
        payloads = [
            pickle.dumps((r.node, r.settings, r.journal, r.inputs), pickle.HIGHEST_PROTOCOL)
            for r in requests
        ]
        pipes: list[tuple[int, int]] = []
        no_pipe: OSError | None = None  # EMFILE: this process's lack, not the server's fault
        for _ in requests:
            try:
                pipes.append(os.pipe())
            except OSError as exc:
                no_pipe = exc
                break
        results: list[ForkedWorker | OSError | Deferred] = []
        sent = 0
        try:
            for request, payload, (_, status_w) in zip(requests, payloads, pipes, strict=False):
                _time_left(sock, give_up)
                header = HEADER.pack(len(payload), deadline)
                socket.send_fds(sock, [header], [request.conn_fd, status_w])
                sock.sendall(payload)
                sent += 1
                os.close(status_w)  # the server holds its copy once sent
            for status_r, _ in pipes:
                _time_left(sock, give_up)
                (pid,) = REPLY.unpack(recv_exact(sock, REPLY.size))
                if pid > 0:
                    results.append(ForkedWorker(pid, status_r))
                    continue
                os.close(status_r)
                if pid == TOO_LATE:
                    results.append(Deferred(f"fork server (pid {self.pid}) came to it after "
                                            f"its batch's {SPAWN_TIMEOUT_S:g}s deadline"))
                else:
                    why = f"fork server could not fork: {os.strerror(-pid)}"
                    results.append(OSError(-pid, why))
        except (OSError, EOFError) as exc:
            stuck = isinstance(exc, TimeoutError)
            # Dead, confused or stuck: it is killed, and a new one starts at the next spawn.
            # Requests it answered have their workers; the others have none (a worker it
            # forked without answering finds its pipe closed, and its parent gone).
            self._discard(DISCARD_WAIT_S)
            waited = SPAWN_TIMEOUT_S + LATE_ANSWER_S
            what = f"no answer within {waited:g}s" if stuck else repr(exc)
            lost = OSError(f"fork server lost: {what}")
            lost.__cause__ = exc
            for index, (status_r, status_w) in enumerate(pipes[len(results):], len(results)):
                os.close(status_r)
                if index >= sent:
                    os.close(status_w)
            results += [lost] * (len(pipes) - len(results))
        finally:
            if self._sock is not None:
                self._sock.settimeout(None)
        if no_pipe is not None:
            results += [no_pipe] * (len(requests) - len(results))
        return results

    def stop(self, timeout: float = 5.0) -> None:
        """Close the socket (the server exits at EOF) and reap it; SIGKILL past ``timeout``."""
        with self._lock:
            self._discard(timeout)
            self._reap_dying()

    def _discard(self, timeout: float = 5.0) -> None:
        """Close the socket (the server exits at EOF); SIGKILL it past ``timeout``, and wait
        for that at most :data:`KILL_WAIT_S`."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._ready = False
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill(process)
            try:
                process.wait(KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                log.warning("fork server (pid %s) still there %gs after SIGKILL: it is reaped "
                            "once gone", process.pid, KILL_WAIT_S)
                self._dying.append(process)
                return  # still a child of ours: the orphan reaper must leave it alone
        spare_pids.discard(process.pid)

    def _kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL a server that would not exit."""
        process.kill()

    def _reap_dying(self) -> None:
        for process in [p for p in self._dying if p.poll() is not None]:
            self._dying.remove(process)
            spare_pids.discard(process.pid)


def _time_left(sock: socket.socket, until: float) -> None:
    """Give the socket's next operation what is left until ``until``; TimeoutError if none."""
    left = until - time.monotonic()
    if left <= 0:
        raise TimeoutError("the batch's deadline passed")
    sock.settimeout(left)
