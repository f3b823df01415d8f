"""Evaluate a tenacity wait strategy outside a tenacity retry loop.

The supervisor's restart backoff and the status writer's retry delays are
not retry loops around one call (they are events in a main loop), but they
should use the same well-tested wait strategies; tenacity's waits take a
RetryCallState, of which only the attempt number matters to them.
"""

from __future__ import annotations

import tenacity


def wait_delay(wait: tenacity.wait.wait_base, attempt: int) -> float:
    """The delay ``wait`` gives before retry number ``attempt`` (1-based)."""
    state = tenacity.RetryCallState(retry_object=tenacity.Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    return float(wait(state))
