"""The last instant this process may write to its node; every write asks first.

In an elastic pool a worker may write to its node, host files or HTTP control
requests, only until its fence's ``write_until``
(:mod:`agentpool.pool.fence`): after that another pod may own the node. The
worker sets the horizon from each fence its supervisor sends; the backends
call :func:`permit` right before each write, in a tick and in a restore alike,
so no write begins that could land after it. A sysfs write takes effect at
once; an HTTP request is taken to take effect within its timeout (the client
gives up then and closes the connection: what a server does with a request
it read but answers later is beyond any client's reach).

Process-wide, like the HTTP client's connections: a worker process drives one
node. Without a horizon (static pools, daemonsets, the fork server's warm-up)
every write is permitted.
"""

from __future__ import annotations

import time

from agentpool.errors import FencedError

_horizon: float | None = None


def set_horizon(write_until: float | None) -> None:
    """No write of this process may take effect after ``write_until`` (CLOCK_MONOTONIC)."""
    global _horizon
    _horizon = write_until


def horizon() -> float | None:
    return _horizon


def permit(what: str, lasts_s: float = 0.0) -> None:
    """Raise :class:`FencedError` unless a write that takes up to ``lasts_s`` lands in time."""
    if _horizon is None:
        return
    late = time.monotonic() + lasts_s - _horizon
    if late > 0:
        raise FencedError(what, late)
