"""When to restart a dead worker: exponential backoff with jitter, reset when healthy.

One small object holds the numbers. The delays come from
:func:`agentpool.retrying.exponential_delay` (first retry after about 1 s,
doubling, capped at 60 s); a worker that ran healthily for ``reset_after_s`` starts again from
the first delay. Time is passed in, so the policy is tested without clocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentpool.retrying import exponential_delay

INITIAL_DELAY_S = 1.0
MAX_DELAY_S = 60.0
JITTER_S = 0.5
RESET_AFTER_S = 600.0


@dataclass
class RestartPolicy:
    """Backoff state of one node's worker."""

    initial_s: float = INITIAL_DELAY_S
    max_s: float = MAX_DELAY_S
    jitter_s: float = JITTER_S
    reset_after_s: float = RESET_AFTER_S
    failures: int = 0
    """Consecutive deaths without a healthy stretch of ``reset_after_s``."""
    restarts: int = 0
    """Total restarts (the ``agentpool_worker_restarts_total`` value)."""

    def on_death(self, started_at: float, died_at: float) -> float:
        """Record a death; returns the delay before the next start."""
        if died_at - started_at >= self.reset_after_s:
            self.failures = 0
        self.failures += 1
        return exponential_delay(self.failures, self.initial_s, self.max_s, self.jitter_s)

    def on_restart(self) -> None:
        self.restarts += 1
