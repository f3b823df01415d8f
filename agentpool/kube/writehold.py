"""Enforce first, report after: the API writes that wait while workers start.

At start-up (and whenever many nodes arrive at once) the supervisor starts a
worker per node, and each first tick's result is a status PATCH and, with the
NodeTwin API, a NodeHardware write. Written while workers are still being
started, those writes compete with the starts for the supervisor's CPU and the
API server's, and delay the last caps. The caps are what protects the hardware;
the statuses say so a few seconds later.

The supervisor calls :meth:`WriteHold.hold` while workers it started have not
reported their first tick, and :meth:`WriteHold.release` once none is left.
The status writers and the NodeHardware publisher wait while
:meth:`WriteHold.remaining` is above zero. A hold never lasts more than
``max_s`` from its first call: a worker whose first tick hangs (an endpoint that
does not answer) holds nobody's status beyond that. Leases, watches and lists
never wait: only writes that say what happened.

Set by the loop's thread and read by writer threads: a float assignment is
atomic, and a writer that reads a stale value waits at most one poll more.
"""

from __future__ import annotations

import time
from collections.abc import Callable

HOLD_MAX_S = 15.0
"""The longest a hold lasts from its first call: a mass start of 1,000 workers takes
4-10 s on two cores, up to 20 s on a loaded machine."""
POLL_S = 0.1
"""How often a held writer looks again: a release reaches it within this."""


class WriteHold:
    """Whether the agent's deferrable API writes wait, and until when."""

    def __init__(self, max_s: float = HOLD_MAX_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._max_s = max_s
        self._clock = clock
        self._until = 0.0
        self._since: float | None = None

    def hold(self) -> None:
        """Workers are starting: writes wait, at most ``max_s`` after the first call since
        the last :meth:`release`."""
        if self._since is None:
            self._since = self._clock()
            self._until = self._since + self._max_s

    def release(self) -> None:
        """No worker is starting: writes go out again."""
        self._since = None
        self._until = 0.0

    def remaining(self) -> float:
        """Seconds a writer waits before its next write (0 when writes may go out)."""
        return max(0.0, self._until - self._clock())

    def wait_s(self) -> float:
        """How long a held writer sleeps before it looks again (0 when not held)."""
        left = self.remaining()
        return min(left, POLL_S) if left > 0 else 0.0
