"""Backoff: how long to wait before the next try, in one formula.

Exponential with jitter, capped (:func:`exponential_delay`: the same formula
as tenacity's ``wait_exponential_jitter``, which the informers use for their
retried calls). Retries that are events in a loop rather than a retried call
take it from here: :class:`Backoff` for a thread's retry loop (the API
selection, the StatefulSet watch), :class:`RestartPolicy` for the
supervisor's restarts of a dead worker; the status writer takes the formula
itself. Time is passed in or slept by the caller, so each is tested without
clocks.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

INITIAL_DELAY_S = 1.0
"""A dead worker's first restart comes after about this long..."""
MAX_DELAY_S = 60.0
"""...doubling up to this..."""
JITTER_S = 0.5
"""...plus up to this much, so workers that died together do not restart together..."""
RESET_AFTER_S = 600.0
"""...and a worker that ran healthily this long starts again from the first delay."""


def exponential_delay(
    attempt: int,
    initial_s: float,
    max_s: float,
    jitter_s: float,
    jitter: Callable[[float, float], float] = random.uniform,
) -> float:
    """``initial_s * 2**(attempt - 1)`` plus up to ``jitter_s``, at most ``max_s``.

    ``attempt`` is 1-based: the first retry waits about ``initial_s``.
    """
    exponent = min(max(attempt - 1, 0), 64)  # 2**64 s is past any cap; no overflow
    return min(max_s, initial_s * 2.0**exponent + jitter(0.0, jitter_s))


@dataclass
class Backoff:
    """The delays of one retry loop: :meth:`next` after a failure, :meth:`reset` after a
    success."""

    initial_s: float
    max_s: float
    jitter_s: float = 0.0
    attempt: int = 0
    """Failures since the last success."""

    def next(self) -> float:
        self.attempt += 1
        return exponential_delay(self.attempt, self.initial_s, self.max_s, self.jitter_s)

    def reset(self) -> None:
        self.attempt = 0


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
