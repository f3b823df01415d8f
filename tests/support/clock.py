"""A clock that moves only when a test moves it.

It stands in for ``time.monotonic`` (or ``time.time``) wherever the code under test
takes ``clock=``, so that "silent for 90 s" or "a minute later" takes no time.
"""

from __future__ import annotations


class Clock:
    """Seconds: ``now``, moved by the test (and by ``step`` on every read, where set)."""

    def __init__(self, now: float = 1000.0, step: float = 0.0) -> None:
        self.now = now
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        """As the code's ``sleep=``: sleeping moves the clock instead of waiting."""
        self.advance(seconds)
