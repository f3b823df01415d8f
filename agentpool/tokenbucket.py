"""A token bucket: how many writes a client may make now, and when it may make the next.

Used where this agent bounds its own API traffic rather than rely on the API
server's priority and fairness to push back: Kubernetes Events (client-go's
correlator budgets), NodeHardware publishing, and every request of a pod
where ``KUBE_CLIENT_QPS`` asks for it (:class:`RateLimiter`). Time is whatever
monotonic clock the caller passes, so simulated minutes take no time in tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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


class RateLimiter:
    """A token bucket that callers on any thread wait on: client-go's token-bucket rate
    limiter (``flowcontrol.NewTokenBucketRateLimiter``), ``qps`` a second, ``burst`` at once.

    :meth:`wait` reserves the next token under the lock and sleeps outside it until the
    token is due, so waiters are served in the order they came and none holds the lock
    while it sleeps.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._bucket = TokenBucket(Budget(max(1, burst), 1.0 / qps), clock())

    def wait(self) -> float:
        """Block until this caller may send; the seconds it waited."""
        with self._lock:
            now = self._clock()
            due = self._bucket.next_token(now)
            self._bucket.take()
        delay = due - now
        if delay > 0:
            self._sleep(delay)
        return max(0.0, delay)
