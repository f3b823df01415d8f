"""The supervisor's side of its workers: states, the handle kept per node, and spawning.

Workers are started through the lean fork server
(:mod:`agentpool.supervisor.forkclient`): a clean, single-threaded process
that has imported only what a worker runs (see
:mod:`agentpool.worker.forking.preload`) and frozen its heap, so each worker is a
fork sharing those pages copy-on-write, and no worker inherits the
supervisor's threads, sockets or locks. The supervisor only sees a
:class:`WorkerProcess` and a pipe, through a :data:`Launch` function, so its
decisions can be driven with stand-in processes on a fake clock.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Pipe
from typing import Protocol

import psutil

from agentpool.backoff import RestartPolicy
from agentpool.config.settings import WorkerSettings
from agentpool.spec.values import NodeInputs, TickResult
from agentpool.supervisor.forkclient import ForkServer
from agentpool.worker.nodefiles import NodeFiles


class WorkerState(enum.StrEnum):
    STARTING = "starting"
    """Process started, no tick reported yet."""
    RUNNING = "running"
    """Reported at least one tick and is alive."""
    STOPPING = "stopping"
    """Asked to stop (SIGTERM sent); waiting for it to restore the host and exit."""
    BACKOFF = "backoff"
    """Died unexpectedly, or could not be started; waiting for its restart time."""


class StopReason(enum.StrEnum):
    SCOPE = "scope"
    """The node was deleted, lost the selector's labels, or belongs to another shard."""
    SHUTDOWN = "shutdown"
    """The supervisor is stopping."""
    HEARTBEAT = "heartbeat"
    """The worker stopped reporting ticks, or stopped reading its pipe; it is restarted."""


class WorkerProcess(Protocol):
    """What the supervisor uses of a worker process (a :class:`ForkedWorker`)."""

    @property
    def pid(self) -> int | None: ...

    @property
    def exitcode(self) -> int | None: ...

    @property
    def sentinel(self) -> int: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def close(self) -> None: ...


Launch = Callable[[str, NodeInputs | None], tuple[WorkerProcess, Connection]]
"""Start the worker of a node with its current inputs: its process and the supervisor's
end of its pipe. Raises ``OSError`` when no process could be started."""


@dataclass
class WorkerHandle:
    """Everything the supervisor tracks about one node's worker."""

    node: str
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    state: WorkerState = WorkerState.BACKOFF
    process: WorkerProcess | None = None
    conn: Connection | None = None
    started_at: float = 0.0
    last_seen: float = 0.0
    restart_at: float = 0.0
    stop_reason: StopReason | None = None
    kill_at: float | None = None
    """When a stopping worker (or a lingering predecessor) gets SIGKILL."""
    heartbeat_s: float = 0.0
    """How long the worker may stay silent before it is killed (set with its inputs)."""
    last_sent: NodeInputs | None = None
    """The inputs last handed to the pipe (or given at spawn)."""
    unsent: NodeInputs | None = None
    """Newer inputs waiting for the pipe to drain; only the latest is kept."""
    outbox: bytearray = field(default_factory=bytearray)
    """The rest of a message the pipe could not take at once."""
    inbox: bytearray = field(default_factory=bytearray)
    """What the pipe delivered of a report not complete yet."""
    outbox_since: float | None = None
    """Since when the pipe has refused part of a message (a worker that stopped reading)."""
    lingering: int | None = None
    """Pid of this node's previous process, reported dead but still running (it lost its
    fork server and is restoring the host): no new worker starts until it is gone."""
    exit_how: str = ""
    """How the last process ended, for the log and status once it is settled."""
    last_result: TickResult | None = None
    restore_problems: tuple[str, ...] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def hung(self, now: float) -> str | None:
        """Why a starting or running worker counts as hung at ``now``, if it does."""
        if self.state not in (WorkerState.STARTING, WorkerState.RUNNING) or self.process is None:
            return None
        if now - self.last_seen > self.heartbeat_s:
            return f"silent for {now - self.last_seen:.0f}s"
        if self.outbox_since is not None and now - self.outbox_since > self.heartbeat_s:
            return f"not reading its pipe for {now - self.outbox_since:.0f}s"
        return None

    def back_off(self, now: float, started_at: float) -> float:
        """Its process is gone (or never started): wait before the next start; the delay."""
        delay = self.policy.on_death(started_at, now)
        self.state, self.restart_at = WorkerState.BACKOFF, now + delay
        self.stop_reason, self.kill_at = None, None
        return delay

    def kill(self) -> bool:
        """SIGKILL the node's process, or its lingering predecessor; False if none runs."""
        process = self.process
        if process is not None and process.exitcode is None:
            process.kill()
            return True
        if self.lingering is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.lingering, signal.SIGKILL)
            return True
        return False

    def started(self, process: WorkerProcess, conn: Connection, now: float) -> None:
        """A process was launched for this node with the inputs ``last_sent``."""
        self.process, self.conn = process, conn
        self.state = WorkerState.STARTING
        self.started_at = self.last_seen = now
        self.stop_reason, self.kill_at = None, None
        self.unsent, self.outbox, self.outbox_since = None, bytearray(), None
        self.inbox = bytearray()
        self.restore_problems = None


class ForkServerLauncher:
    """The production :data:`Launch`: a worker forked by the lean fork server."""

    def __init__(self, server: ForkServer, settings: WorkerSettings, files: NodeFiles) -> None:
        self.server = server
        self.settings = settings
        self.files = files

    def __call__(self, node: str, inputs: NodeInputs | None) -> tuple[WorkerProcess, Connection]:
        ours, theirs = Pipe(duplex=True)
        try:
            process = self.server.spawn(
                node, self.settings, self.files.journal(node), inputs, theirs.fileno()
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return process, ours


def pid_running(pid: int) -> bool:
    """True while ``pid`` is a live process (a zombie has finished)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "vanished"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}"
    return f"exited with code {exitcode}"
