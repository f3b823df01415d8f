"""A worker's lifecycle: its states, the moves between them, and what follows its exit.

One node's worker, as the supervisor sees it, is in exactly one
:class:`WorkerState`. :data:`TRANSITIONS` lists every move the lifecycle
allows; :meth:`~agentpool.supervisor.handles.WorkerHandle.transition` is the
only place a handle's state changes, and it refuses any other move with
:class:`~agentpool.errors.IllegalTransitionError` (a bug: the loop stops every
worker in order and exits non-zero). The table, with a comment on each move, is the whole machine.

Once a node's process is gone for sure, :func:`after_exit` reads what
follows from one table (:data:`AFTER_EXIT`), by why the supervisor stopped
it (its :class:`StopReason`, None if it did not) and whether it exited as
fenced (it stopped on its own when its fence passed). How the process ended
(its exit status, an OOM kill: :mod:`agentpool.supervisor.deaths`) is told
with the outcome; the delay of a restart is the restart policy's
(:class:`agentpool.backoff.RestartPolicy`, its numbers named there).

Never: touches a process, a pipe or a clock; the worker table
(:mod:`agentpool.supervisor.workers`) carries the decisions out.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agentpool.worker.protocol import EXIT_FENCED


class WorkerState(enum.Enum):
    """Where one node's worker is in its lifecycle."""

    NEW = "new"
    """Made for a node this pod now owns; its first start is being tried (within one turn)."""
    STARTING = "starting"
    """A process was started; it has not reported a tick yet."""
    RUNNING = "running"
    """It reported at least one tick and is alive."""
    STOPPING = "stopping"
    """The supervisor wants its process gone (:attr:`WorkerHandle.stop_reason` says why):
    a stop message and SIGTERM were sent, SIGKILL follows at ``kill_at``."""
    LINGERING = "lingering"
    """Its process was reported dead by the fork server that lost it, yet still runs
    (restoring the host): no new process starts for the node until it is gone; SIGKILL at
    ``kill_at``."""
    BACKOFF = "backoff"
    """No process: it died, or could not be started; the next start is at ``restart_at``."""
    DEFERRED = "deferred"
    """No process, for no fault of its own: its start was put off (the fork server was
    still starting, or its batch's spawn deadline came first); tried again at
    ``restart_at``, one loop period on, and not counted as a restart."""
    STOPPED = "stopped"
    """Gone for good: its node left this pod (the handle is dropped), or the supervisor
    stopped it at shutdown (kept for its final status)."""

    @property
    def reported(self) -> str:
        """Its ``state`` label of ``agentpool_workers``: one of :data:`REPORTED_STATES`."""
        return _REPORTED[self]


REPORTED_STATES = ("starting", "running", "stopping", "backoff")
"""The states ``agentpool_workers`` counts (docs/metrics.md); the finer ones fold into them."""

_REPORTED = {
    WorkerState.NEW: "starting",
    WorkerState.STARTING: "starting",
    WorkerState.RUNNING: "running",
    WorkerState.STOPPING: "stopping",
    WorkerState.LINGERING: "stopping",
    WorkerState.BACKOFF: "backoff",
    WorkerState.DEFERRED: "backoff",
    WorkerState.STOPPED: "stopping",
}

WAITING = frozenset({WorkerState.BACKOFF, WorkerState.DEFERRED})
"""No process: the next start is due at ``restart_at``."""

LIVE = frozenset({WorkerState.STARTING, WorkerState.RUNNING})
"""A live process that is expected to tick: its heartbeat counts."""

ALIVE = frozenset({WorkerState.STARTING, WorkerState.RUNNING, WorkerState.STOPPING,
                   WorkerState.LINGERING})
"""A process of the node may still run (its own, or a lingering predecessor): none other
may start for it."""

_S = WorkerState
TRANSITIONS: dict[WorkerState, frozenset[WorkerState]] = {
    # launched; not started (a failure); put off
    _S.NEW: frozenset({_S.STARTING, _S.BACKOFF, _S.DEFERRED}),
    # first tick; asked to stop (hung, a corrupt message, scope, shutdown); died while its
    # pid runs on; died
    _S.STARTING: frozenset({_S.RUNNING, _S.STOPPING, _S.LINGERING, _S.BACKOFF}),
    _S.RUNNING: frozenset({_S.STOPPING, _S.LINGERING, _S.BACKOFF}),
    # a later stop's reason replaces the first's (shutdown over scope); its process gone:
    # still running, restarted, or for good
    _S.STOPPING: frozenset({_S.STOPPING, _S.LINGERING, _S.BACKOFF, _S.STOPPED}),
    # told what its end means (scope, shutdown); gone: restarted, or for good
    _S.LINGERING: frozenset({_S.LINGERING, _S.BACKOFF, _S.STOPPED}),
    # restarted; a restart that failed, or was put off; its node left, or the supervisor
    # stops
    _S.BACKOFF: frozenset({_S.STARTING, _S.BACKOFF, _S.DEFERRED, _S.STOPPED}),
    _S.DEFERRED: frozenset({_S.STARTING, _S.BACKOFF, _S.DEFERRED, _S.STOPPED}),
    _S.STOPPED: frozenset(),
}
"""Every legal move, from each state to the states it may go to."""


class StopReason(enum.StrEnum):
    """Why the supervisor wants a node's process gone."""

    SCOPE = "scope"
    """The node was deleted, lost the selector's labels, or belongs to another shard."""
    SHUTDOWN = "shutdown"
    """The supervisor is stopping."""
    HEARTBEAT = "heartbeat"
    """The worker stopped reporting ticks, or stopped reading its pipe; it is restarted."""
    PROTOCOL = "protocol"
    """The worker wrote something that is not a message (a corrupt or cut frame); it is
    restarted."""


class Then(enum.Enum):
    """What follows once a node's process is gone for sure."""

    FORGET = "forget"
    """Its node left this pod: a final status unless another pod owns it now, the handle
    and the node's files dropped, and the scope looked at again (it may be back)."""
    STAY_STOPPED = "stay stopped"
    """The supervisor is stopping: kept, stopped, for the final status."""
    START_AGAIN = "start again"
    """It stopped on its own as its fence passed: no failure counted, no status written
    (another pod may own the node by now); it starts at once if the node is still ours."""
    BACK_OFF = "back off"
    """A failure: told in the log, the status and the metrics, then a restart after the
    restart policy's delay."""


@dataclass(frozen=True)
class AfterExit:
    then: Then
    cause: str = ""
    """How a failure is told ("died", ...); empty for the rest."""


AFTER_EXIT: dict[tuple[StopReason | None, bool], AfterExit] = {
    # (why the supervisor stopped it, exited as fenced): what follows
    (StopReason.SCOPE, False): AfterExit(Then.FORGET),
    (StopReason.SCOPE, True): AfterExit(Then.FORGET),
    (StopReason.SHUTDOWN, False): AfterExit(Then.STAY_STOPPED),
    (StopReason.SHUTDOWN, True): AfterExit(Then.STAY_STOPPED),
    (None, True): AfterExit(Then.START_AGAIN),
    (None, False): AfterExit(Then.BACK_OFF, "died"),
    (StopReason.HEARTBEAT, False): AfterExit(Then.BACK_OFF, "unresponsive, killed"),
    (StopReason.HEARTBEAT, True): AfterExit(Then.BACK_OFF, "unresponsive, killed"),
    (StopReason.PROTOCOL, False): AfterExit(Then.BACK_OFF, "sent a corrupt message, stopped"),
    (StopReason.PROTOCOL, True): AfterExit(Then.BACK_OFF, "sent a corrupt message, stopped"),
}
"""The restart decision: one row per stop reason and way of exiting."""


def after_exit(reason: StopReason | None, exit_code: int | None) -> AfterExit:
    """What follows the end of a process the supervisor stopped for ``reason`` (None: it
    did not), which ended with ``exit_code`` (negative: a signal; None: unknown)."""
    return AFTER_EXIT[reason, exit_code == EXIT_FENCED]
