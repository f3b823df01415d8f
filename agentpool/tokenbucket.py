"""A token bucket: how many writes a client may make now, and when it may make the next.

Used where this agent bounds its own API traffic rather than rely on the API
server's priority and fairness to push back: Kubernetes Events (client-go's
correlator budgets) and NodeHardware publishing. Time is whatever monotonic
clock the caller passes, so simulated minutes take no time in tests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    """A token bucket: ``burst`` writes at once, then one more every ``refill_s``."""

    burst: int
    refill_s: float


_EPSILON = 1e-9
"""Refills summed over many calls round; a token due now must count as there."""


class TokenBucket:
    """Starts full; :meth:`take` may drive it below zero (a write that cost two tokens)."""

    def __init__(self, budget: Budget, now: float) -> None:
        self.budget = budget
        self.tokens = float(budget.burst)
        self.at = now

    def _refill(self, now: float) -> None:
        if now > self.at:
            self.tokens = min(
                float(self.budget.burst), self.tokens + (now - self.at) / self.budget.refill_s
            )
        self.at = max(self.at, now)

    def ready(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= 1.0 - _EPSILON

    def take(self, count: int = 1) -> None:
        self.tokens -= count

    def full(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= self.budget.burst - _EPSILON

    def next_token(self, now: float) -> float:
        self._refill(now)
        if self.tokens >= 1.0 - _EPSILON:
            return now
        return now + (1.0 - self.tokens) * self.budget.refill_s
