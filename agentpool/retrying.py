"""Retry delays for retries that are events in a loop, not a retried call.

The supervisor's restart backoff and the status writer's retry delays are
not retry loops around one call (tenacity's job, used by the informers), so
they take the delay from this formula: the same exponential backoff with
jitter as tenacity's ``wait_exponential_jitter``, as a plain function of the
attempt number.
"""

from __future__ import annotations

import random
from collections.abc import Callable


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
