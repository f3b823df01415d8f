"""Backoff: how long to wait before the next try.

Exponential with jitter, capped (:func:`exponential_delay`, the same formula
as tenacity's ``wait_exponential_jitter``). Retries that are events in a loop
rather than a retried call take it from here: :class:`Backoff` for a thread's
retry loop (the API selection, the StatefulSet watch), :class:`RestartPolicy`
for the supervisor's restarts of a dead worker.

Reaching the API server again after it failed (the informers' tenacity loops,
the status writers) takes :func:`reconnect_delay` instead, capped at
:func:`reconnect_cap`: its jitter grows with the delay. Every pod of a
DaemonSet loses the server at the same moment; with a jitter of a second at
most, their retries would stay together and meet a restarted server as one
burst of relists. Time is passed in or slept by the caller, so each is tested
without clocks.
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
CRASH_LOOP_FAILURES = 3
"""A node whose worker died this many times in a row (no healthy stretch between) is
reported as crash-looping: in its status, its metrics and the log."""


RECONNECT_MIN_S = 1.0
RECONNECT_MAX_S = 30.0
"""The bounds of :func:`reconnect_cap`."""
RECONNECT_INITIAL_S = 0.5


def reconnect_cap(reconcile_interval_s: float) -> float:
    """The longest wait between two tries to reach the API server: one reconcile interval,
    within [1 s, 30 s]. The agent acts on a change within an interval, and so it does on
    one made while the server was away, within an interval of its return."""
    return min(RECONNECT_MAX_S, max(RECONNECT_MIN_S, reconcile_interval_s))


def reconnect_delay(
    attempt: int,
    cap_s: float,
    initial_s: float = RECONNECT_INITIAL_S,
    jitter: Callable[[float, float], float] = random.uniform,
) -> float:
    """"Equal jitter": of ``d = min(cap_s, initial_s * 2**(attempt - 1))``, half is fixed
    and half drawn at random, so the delay lies in ``[d/2, d]``.

    Clients that failed together spread over half the cap within a few tries, and each
    still comes back within ``cap_s`` of the server's return.
    """
    exponent = min(max(attempt - 1, 0), 64)
    full = min(cap_s, initial_s * 2.0**exponent)
    return full / 2 + jitter(0.0, full / 2)


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

    @property
    def crash_looping(self) -> bool:
        return self.failures >= CRASH_LOOP_FAILURES
