"""Wait for a condition with a deadline: how tests and tools synchronise with servers.

Polling with a deadline, not sleeping a fixed time: fast when things are
fast, and a clear TimeoutError when they never happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until[T](predicate: Callable[[], T], timeout: float, interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy; TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"condition not met within {timeout:g}s")
        time.sleep(interval)
