"""Which deadlines each worker must hold, and when to send them (agentpool/pool/fence.py).

Elastic pool: every worker holds the pod's lease fence, which only a
successful renewal moves; it is sent at a worker's start and whenever it
changes. Static pool and daemonset: a worker stops acting once it has heard
nothing from the supervisor for its heartbeat limit, the same bound the
supervisor gives the worker (:func:`~agentpool.supervisor.scope.heartbeat_limit`),
but never sooner than :data:`SILENCE_MIN_S`; the deadline is renewed once half
of it is spent, so a worker hears from a turning loop twice per bound, and from
a stopped one never.
"""

from __future__ import annotations

from agentpool.pool.fence import FenceTimes, silence_fence
from agentpool.supervisor.handles import WorkerHandle

SILENCE_MIN_S = 30.0
"""The shortest a static pool's worker waits for word from its supervisor: as long as
the supervisor's own liveness allows its loop to stall (``/healthz``). Nobody else can
take a static pool's node, so this only bounds how long inputs go unconfirmed; a short
HEARTBEAT_TIMEOUT must not make a busy loop's workers stop."""


def due(
    handle: WorkerHandle, now: float, elastic: bool, lease: FenceTimes | None
) -> FenceTimes | None:
    """The deadlines to send this worker now, if it needs new ones.

    ``lease``: the pod's worker fence (elastic pools; None before the first renewal).
    """
    current = handle.fence_unsent or handle.fence_sent
    if elastic:
        return lease if lease is not None and lease != current else None
    silence = max(handle.heartbeat_s, SILENCE_MIN_S)
    if current is None or current.stop_at - now < silence / 2:
        return silence_fence(now, silence)
    return None


def renewal_at(handle: WorkerHandle, elastic: bool) -> float | None:
    """When :func:`due` will next have a silence fence for this worker (static pools and
    daemonsets); None where only a lease renewal moves it (elastic pools) or it has none."""
    current = handle.fence_unsent or handle.fence_sent
    if elastic or current is None or handle.conn is None:
        return None
    return current.stop_at - max(handle.heartbeat_s, SILENCE_MIN_S) / 2
