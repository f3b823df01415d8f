"""A worker's fence: the deadlines after which it stops acting on its own.

The supervisor sends a :class:`~agentpool.worker.protocol.Fence` at start, with
each lease renewal and in reply to the worker's heartbeats
(:mod:`agentpool.pool.fence` says how the deadlines are set). Past
``stop_at`` the worker ticks no more: it restores what it changed, each write
only if it lands before ``write_until`` (:mod:`agentpool.backends.fencing`),
reports, and exits with ``EXIT_FENCED``; a supervisor that is still there
starts a new worker if the node is still its own. So a node is not written by
a pod whose supervisor stopped turning (a stopped process, a system call that
never returns), whatever its workers were doing.
"""

from __future__ import annotations

import math

from agentpool.backends import fencing
from agentpool.pool.fence import FenceTimes

FIRST_FENCE_POLL_S = 1.0
"""How often a worker that must wait for its first fence checks for a stop request."""


class WorkerFence:
    """The deadlines one worker holds. ``required``: it may not act before the first one
    (an elastic pool, where another pod may own the node without it)."""

    def __init__(self, required: bool) -> None:
        self.required = required
        self.times: FenceTimes | None = None
        if required:
            fencing.set_horizon(-math.inf)  # no write at all, a restore included, before one

    def update(self, times: FenceTimes) -> None:
        self.times = times
        fencing.set_horizon(times.write_until)

    def may_act(self) -> bool:
        return self.times is not None or not self.required

    def passed(self, now: float) -> bool:
        return self.times is not None and now >= self.times.stop_at

    def wake_at(self, next_tick: float, now: float) -> float:
        """When the worker's loop must look again: its next tick, or its stop."""
        if self.times is None:
            return now + FIRST_FENCE_POLL_S if self.required else next_tick
        return min(next_tick, self.times.stop_at)

    def reason(self, now: float) -> str:
        """Why the worker stopped acting (for its log line and its last message)."""
        times = self.times
        assert times is not None
        late = now - times.stop_at
        if times.write_until is None:
            return (f"no word from the supervisor past the bound ({late:.1f}s over): it is "
                    "stopped or stuck; stopped acting on inputs it can no longer confirm")
        return (f"fence passed {late:.1f}s ago: no lease renewal reached this worker in time "
                "(the supervisor is stopped or stuck, or cannot renew); another pod may take "
                "the node, so this one stops writing to it")
