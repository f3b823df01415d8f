"""Worker lifecycle: states, the handle the supervisor keeps per node, and spawning.

Workers are started through multiprocessing's fork server: a clean,
single-threaded process that has already imported the agent (see
:mod:`agentpool.supervisor.preload`) and frozen its heap, so each worker is a
fork sharing those pages copy-on-write, and no worker inherits the
supervisor's threads, sockets or locks.
"""

from __future__ import annotations

import enum
import multiprocessing
import multiprocessing.context
import signal
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from agentpool.config import Settings
from agentpool.model import NodeInputs, TickResult
from agentpool.supervisor.backoff import RestartPolicy
from agentpool.supervisor.worker import run_worker


class WorkerState(enum.StrEnum):
    STARTING = "starting"
    """Process started, no tick reported yet."""
    RUNNING = "running"
    """Reported at least one tick and is alive."""
    STOPPING = "stopping"
    """Asked to stop (SIGTERM sent); waiting for it to restore the host and exit."""
    BACKOFF = "backoff"
    """Died unexpectedly; waiting for its restart time."""


class StopReason(enum.StrEnum):
    SCOPE = "scope"
    """The node was deleted, lost the selector's labels, or belongs to another shard."""
    SHUTDOWN = "shutdown"
    """The supervisor is stopping."""
    HEARTBEAT = "heartbeat"
    """The worker stopped reporting ticks; it is killed and restarted."""


@dataclass
class WorkerHandle:
    """Everything the supervisor tracks about one node's worker."""

    node: str
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    state: WorkerState = WorkerState.BACKOFF
    process: multiprocessing.process.BaseProcess | None = None
    conn: Connection | None = None
    started_at: float = 0.0
    last_seen: float = 0.0
    restart_at: float = 0.0
    stop_reason: StopReason | None = None
    kill_at: float | None = None
    """When a stopping worker gets SIGKILL."""
    last_sent: NodeInputs | None = None
    last_result: TickResult | None = None
    restore_problems: tuple[str, ...] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None


def fork_server_context(preload: list[str]) -> multiprocessing.context.ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, multiprocessing.context.ForkServerContext)
    ctx.set_forkserver_preload(preload)
    return ctx


def spawn(
    ctx: multiprocessing.context.ForkServerContext,
    handle: WorkerHandle,
    settings: Settings,
    journal: str | None,
    now: float,
    inputs: NodeInputs | None = None,
) -> None:
    """Start the node's worker process with its current inputs; the handle becomes STARTING."""
    ours, theirs = ctx.Pipe(duplex=True)
    process = ctx.Process(
        target=run_worker,
        args=(handle.node, settings, theirs, journal, inputs),
        name=f"agentpool-worker:{handle.node}",
    )
    process.start()
    _untrack(process)
    theirs.close()
    handle.process, handle.conn = process, ours
    handle.state = WorkerState.STARTING
    handle.started_at = handle.last_seen = now
    handle.stop_reason, handle.kill_at, handle.last_sent = None, None, inputs
    handle.restore_problems = None


def _untrack(process: multiprocessing.process.BaseProcess) -> None:
    """Take the worker out of multiprocessing's own list of children.

    ``Process.start()`` first polls every child still in that list, each poll
    building a selector around the child's sentinel: with 1,000 workers the
    last starts cost 50 ms each instead of 6, and a mass start took 20 s. The
    supervisor reaps its workers itself (their sentinels are in its selector),
    so the list only ever served that scan. The attribute is private: read
    defensively, and without it nothing breaks, starts are only slower.
    """
    children = getattr(multiprocessing.process, "_children", None)
    if isinstance(children, set):
        children.discard(process)


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
