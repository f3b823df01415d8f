"""The supervisor's side of its workers: the handle kept per node, and spawning.

Workers are started through the lean fork server
(:mod:`agentpool.supervisor.forkclient`): a clean, single-threaded process
that has imported only what a worker runs (see
:mod:`agentpool.worker.forking.preload`) and frozen its heap, so each worker is a
fork sharing those pages copy-on-write, and no worker inherits the
supervisor's threads, sockets or locks. The supervisor only sees a
:class:`WorkerProcess` and a pipe, through a :data:`Launch` function, so its
decisions can be driven with stand-in processes on a fake clock. A handle's state
changes only through :meth:`WorkerHandle.transition`, by the moves of
:mod:`agentpool.supervisor.lifecycle`.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Pipe
from typing import Protocol, runtime_checkable

import psutil

from agentpool.backoff import RestartPolicy
from agentpool.config.settings import WorkerSettings
from agentpool.errors import IllegalTransitionError
from agentpool.pool.fence import FenceTimes
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.results import TickResult
from agentpool.supervisor.forkclient import Deferred, ForkServer, SpawnRequest
from agentpool.supervisor.lifecycle import (
    LIVE,
    TRANSITIONS,
    StopReason,
    WorkerState,
)
from agentpool.worker.nodefiles import NodeFiles
from agentpool.worker.protocol import DUMP_SIGNAL


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

Launched = tuple[WorkerProcess, Connection] | OSError | Deferred
"""A node's worker and the supervisor's end of its pipe, why it has none, or that it has
none yet for no fault of its own (the fork server is still starting)."""


@runtime_checkable
class BatchLaunch(Protocol):
    """A :data:`Launch` that can also start several nodes' workers in one go."""

    def __call__(self, node: str, inputs: NodeInputs | None) -> tuple[WorkerProcess, Connection]:
        ...

    def many(self, starts: Sequence[tuple[str, NodeInputs | None]]) -> list[Launched]:
        """One result per start, in order; raises only what :data:`Launch` would for all."""
        ...


def launch_all(launch: Launch, starts: Sequence[tuple[str, NodeInputs | None]]) -> list[Launched]:
    """Start each node's worker through ``launch``: in one batch when it can."""
    if isinstance(launch, BatchLaunch):
        return launch.many(starts)
    results: list[Launched] = []
    for node, inputs in starts:
        try:
            results.append(launch(node, inputs))
        except OSError as exc:
            results.append(exc)
        except EOFError as exc:  # a pipe closed under the launcher: as a failed start
            results.append(OSError(f"EOFError: {exc}"))
    return results


@dataclass
class WorkerHandle:
    """Everything the supervisor tracks about one node's worker."""

    node: str
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    state: WorkerState = field(default=WorkerState.NEW, init=False)
    """Written by :meth:`transition` only."""
    process: WorkerProcess | None = None
    """The node's process while the state is STARTING, RUNNING or STOPPING."""
    conn: Connection | None = None
    started_at: float = 0.0
    last_seen: float = 0.0
    restart_at: float = 0.0
    """BACKOFF, DEFERRED: when the next start is due."""
    stop_reason: StopReason | None = None
    """STOPPING, LINGERING, STOPPED: why the supervisor wants the process gone (None in a
    LINGERING one that died on its own); the restart decision's input."""
    kill_at: float | None = None
    """When a stopping worker (or a lingering predecessor) gets SIGKILL (None once sent)."""
    heartbeat_s: float = 0.0
    """How long the worker may stay silent before it is killed (set with its inputs)."""
    last_sent: NodeInputs | None = None
    """The inputs last handed to the pipe (or given at spawn)."""
    unsent: NodeInputs | None = None
    """Newer inputs waiting for the pipe to drain; only the latest is kept."""
    outbox: bytearray = field(default_factory=bytearray)
    """The rest of a message the pipe could not take at once."""
    outbox_since: float | None = None
    """Since when the pipe has refused part of a message (a worker that stopped reading)."""
    fence_sent: FenceTimes | None = None
    """The deadlines last handed to the pipe (:mod:`agentpool.supervisor.fences`)."""
    fence_unsent: FenceTimes | None = None
    """Newer deadlines waiting for the pipe to drain; only the latest is kept."""
    inbox: bytearray = field(default_factory=bytearray)
    """The part of the worker's next message that has arrived so far."""
    lingering: int | None = None
    """LINGERING: the pid of the node's previous process, reported dead but still running
    (it lost its fork server and is restoring the host)."""
    exit_how: str = ""
    """How the last process ended, for the log and status once it is settled."""
    exit_code: int | None = None
    """Its exit status (negative: the signal that killed it)."""
    exit_reason: str = ""
    """Why it stopped, in its own words (its last message: a crash, a fence that passed)."""
    last_failure: str = ""
    """How the last failure went (died, killed as hung, not started), for the metrics."""
    last_result: TickResult | None = None
    restore_problems: tuple[str, ...] | None = None
    check_at: float = math.inf
    """When the loop looks at this worker next (:mod:`agentpool.supervisor.deadlines`)."""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    # -- the lifecycle's moves (agentpool/supervisor/lifecycle.py) -----------------------------

    def transition(self, to: WorkerState) -> None:
        """Move to ``to``; a move the lifecycle does not allow raises
        :class:`~agentpool.errors.IllegalTransitionError` and changes nothing."""
        if to not in TRANSITIONS[self.state]:
            raise IllegalTransitionError(self.node, self.state, to)
        self.state = to

    def started(self, process: WorkerProcess, conn: Connection, now: float) -> None:
        """A process was launched for this node with the inputs ``last_sent``: STARTING."""
        self.transition(WorkerState.STARTING)
        self.process, self.conn = process, conn
        self.started_at = self.last_seen = now
        self.stop_reason, self.kill_at = None, None
        self.unsent, self.outbox, self.outbox_since = None, bytearray(), None
        self.fence_sent = self.fence_unsent = None
        self.inbox = bytearray()
        self.restore_problems = None
        self.exit_code, self.exit_reason = None, ""

    def to_stop(self, reason: StopReason, kill_at: float | None) -> None:
        """The supervisor wants the node's process gone for ``reason``, SIGKILL at ``kill_at``
        (the table sends the stop message and the signals): STOPPING. A lingering
        predecessor stays LINGERING; ``reason`` says what its end will mean."""
        lingers = self.state is WorkerState.LINGERING
        self.transition(WorkerState.LINGERING if lingers else WorkerState.STOPPING)
        self.stop_reason, self.kill_at = reason, kill_at

    def ended(self, exit_code: int | None, how: str) -> None:
        """Its process ended (the table reaped it, and moves the handle on at once)."""
        self.process = None
        self.exit_code, self.exit_how = exit_code, how

    def lingers(self, pid: int, kill_at: float) -> None:
        """Its process was reported dead, yet ``pid`` still runs: LINGERING until it is gone,
        SIGKILL at ``kill_at``."""
        self.transition(WorkerState.LINGERING)
        self.lingering, self.kill_at = pid, kill_at

    def wait_until(self, at: float) -> None:
        """No process (any more): BACKOFF, the next start at ``at``."""
        self.transition(WorkerState.BACKOFF)
        self.restart_at = at
        self.stop_reason, self.kill_at, self.lingering = None, None, None

    def put_off(self, at: float) -> None:
        """Its start was put off, through no fault of its own: DEFERRED until ``at``."""
        self.transition(WorkerState.DEFERRED)
        self.restart_at = at

    def back_off(self, now: float, started_at: float) -> float:
        """Its process is gone (or never started), a failure: BACKOFF for the restart
        policy's delay, which is returned."""
        delay = self.policy.on_death(started_at, now)
        self.wait_until(now + delay)
        return delay

    def stopped(self) -> None:
        """Gone for good (its node left, or the supervisor stops): STOPPED."""
        self.transition(WorkerState.STOPPED)
        self.kill_at, self.lingering = None, None

    # -- looking at it -------------------------------------------------------------------------

    def hung(self, now: float) -> str | None:
        """Why a starting or running worker counts as hung at ``now``, if it does."""
        if self.state not in LIVE:
            return None
        if now - self.last_seen > self.heartbeat_s:
            return f"silent for {now - self.last_seen:.0f}s"
        if self.outbox_since is not None and now - self.outbox_since > self.heartbeat_s:
            return f"not reading its pipe for {now - self.outbox_since:.0f}s"
        return None

    def dump_stack(self) -> None:
        """Ask the worker to write its threads' stacks to the log (it keeps running)."""
        pid = self.pid
        if pid is not None and self.process is not None and self.process.exitcode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, DUMP_SIGNAL)

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


class ForkServerLauncher:
    """The production :data:`Launch`: a worker forked by the lean fork server."""

    def __init__(self, server: ForkServer, settings: WorkerSettings, files: NodeFiles) -> None:
        self.server = server
        self.settings = settings
        self.files = files

    def __call__(self, node: str, inputs: NodeInputs | None) -> tuple[WorkerProcess, Connection]:
        (result,) = self.many([(node, inputs)])
        if isinstance(result, Deferred):
            raise OSError(result.why)
        if isinstance(result, OSError):
            raise result
        return result

    def many(self, starts: Sequence[tuple[str, NodeInputs | None]]) -> list[Launched]:
        pipes: list[tuple[Connection, Connection]] = []
        try:
            for _ in starts:
                pipes.append(Pipe(duplex=True))
            requests = [
                SpawnRequest(node, self.settings, self.files.journal(node), inputs,
                             theirs.fileno())
                for (node, inputs), (_, theirs) in zip(starts, pipes, strict=True)
            ]
            spawned = self.server.spawn_many(requests)
        except BaseException:
            for ours, theirs in pipes:
                ours.close()
                theirs.close()
            raise
        results: list[Launched] = []
        for result, (ours, theirs) in zip(spawned, pipes, strict=True):
            theirs.close()  # the worker's copy is in the worker now (or in no one)
            if isinstance(result, OSError | Deferred):
                ours.close()
                results.append(result)
            else:
                results.append((result, ours))
        return results


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
