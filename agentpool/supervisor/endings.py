"""How the end of a node's worker is told: its log line, the node's status, its Node event.

A failure (a death, a hung or corrupt worker killed, a start that failed) is told
with how it went and when the restart comes, and as crash-looping once it keeps
failing; a stop is told as such, with the final status of a node no pod controls
any more; a worker that stopped on its own as its fence passed is told in the log
only (another pod may own the node by now). The worker table
(:mod:`agentpool.supervisor.workers`) decides what happened; this says it. Never:
changes a handle's state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from logging import ERROR, INFO, WARNING

from agentpool.config.settings import Settings
from agentpool.nodeevents.hooks import NodeEvents
from agentpool.supervisor import statuses
from agentpool.supervisor.clusterview import ClusterView
from agentpool.supervisor.handles import WorkerHandle
from agentpool.supervisor.lifecycle import StopReason
from agentpool.supervisor.statuses import StatusRouter
from agentpool.worker.protocol import EXIT_FENCED

log = logging.getLogger("agentpool.supervisor.workers")
"""The worker table's logger: a worker's whole story is told under one name."""


def wall_time(now: float, at: float) -> str:
    """``at`` on the loop's monotonic clock (``now`` is its present) in RFC 3339 UTC."""
    stamp = datetime.fromtimestamp(time.time() + (at - now), UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def node_log(level: int, node: str, message: str, *args: object) -> None:
    """Log an event of one node: the node is the message's first argument and, in JSON
    logs, a ``node`` field to filter on."""
    log.log(level, message, node, *args, extra={"node": node})


class Endings:
    """Tells each end of a worker. Not thread safe: the loop's thread only."""

    def __init__(
        self,
        settings: Settings,
        view: ClusterView,
        statuses: StatusRouter,
        node_events: NodeEvents | None,
    ) -> None:
        self.settings = settings
        self.view = view
        self.statuses = statuses
        self.node_events = node_events

    def failed(
        self, handle: WorkerHandle, pid: int | None, cause: str, how: str, reason: str,
        delay: float, now: float,
    ) -> None:
        """Say how the worker failed, in the log, the node's status and the metrics, and
        that the node is crash-looping once it keeps failing."""
        node, policy = handle.node, handle.policy
        restart = policy.restarts + 1
        handle.last_failure = f"{cause} ({how})" + (f": {reason}" if reason else "")
        looping = f"; crash-looping ({policy.failures} failures in a row)" if (
            policy.crash_looping) else ""
        process = f" (pid {pid})" if pid is not None else ""
        message = "worker for node %s%s %s%s; restart %d in %.1fs"
        node_log(ERROR, node, message, process, handle.last_failure, looping, restart, delay)
        next_at = wall_time(now, handle.restart_at)
        restarting = statuses.restarting(cause, how, restart, delay, reason, policy.failures,
                                         next_at)
        self.statuses.offer(node, statuses.with_gpu(restarting, handle.last_result))
        if self.node_events is not None:
            self.node_events.restarting(node, cause, how)

    def stopped(self, handle: WorkerHandle, pid: int | None, reason: StopReason) -> None:
        """The supervisor stopped it for good (its node left, or the supervisor stops)."""
        node = handle.node
        if handle.exit_code == EXIT_FENCED:  # it stopped on its own before it was asked
            self.fenced_itself(handle, pid)
        else:
            node_log(INFO, node, "worker for node %s (pid %s) stopped: %s", pid, handle.exit_how)
        if self.node_events is not None:
            self.node_events.stopped(node, self._why_stopped(node, reason),
                                     handle.restore_problems)
        if reason is StopReason.SCOPE:
            self._final_scope_status(handle)

    def fenced_itself(self, handle: WorkerHandle, pid: int | None) -> None:
        why = handle.exit_reason or "its fence passed"
        message = "worker for node %s (pid %s) stopped on its own: %s"
        node_log(WARNING, handle.node, message, pid, why)

    def _why_stopped(self, node: str, reason: StopReason) -> str:
        """Why a node's controller stopped for good, for its event."""
        if reason is StopReason.SHUTDOWN:
            return "agent stopped"
        if self.view.matches_selector(node):
            return "node handed over to another pool pod"
        return "node deleted or no longer selected"

    def _final_scope_status(self, handle: WorkerHandle) -> None:
        """Say why a node is no longer controlled, unless another pod now owns it.

        A node that moved to another shard gets its status from its new owner;
        writing ours too would race with it. A node that was deleted or stopped
        matching the selector has no controller any more, and its status must
        not keep claiming a cap is applied.
        """
        if not self.view.matches_selector(handle.node):
            result = statuses.not_controlled(self.settings, handle.restore_problems)
            result = statuses.with_gpu(result, handle.last_result)
            self.statuses.offer(handle.node, result, force=True, unowned=True)

    def agent_stopped(self, handles: Iterable[WorkerHandle]) -> None:
        """Each node's final status once the supervisor stopped its worker."""
        for handle in handles:
            result = statuses.agent_stopped(self.settings, handle.restore_problems)
            result = statuses.with_gpu(result, handle.last_result)
            self.statuses.offer(handle.node, result, force=True)
