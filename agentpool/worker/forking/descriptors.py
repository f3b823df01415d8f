"""Closing the fork server's descriptors in a new worker (importing nothing heavy).

A module of its own so that tests (and tools) can use it without importing
:mod:`agentpool.worker.forking.server`, whose import preloads, warms, freezes
and makes immortal the importing process's heap.
"""

from __future__ import annotations

import os


def close_all(fds: list[int]) -> None:
    """Close ``fds``, a run of consecutive numbers at a time.

    The server's descriptors are mostly its children's status pipes, numbered in
    a row: the thousandth worker of a start-up closed them one call (and one
    Python loop turn) at a time, a millisecond of its start. ``os.closerange``
    is one ``close_range`` system call per run, and closes nothing outside it.
    """
    ordered = sorted(set(fds))
    start = 0
    for index in range(1, len(ordered) + 1):
        if index == len(ordered) or ordered[index] != ordered[index - 1] + 1:
            os.closerange(ordered[start], ordered[index - 1] + 1)
            start = index
