"""Which deadlines each worker must hold, and when to send them (agentpool/pool/fence.py).

Elastic pool: every worker holds the pod's lease fence, which only a
successful renewal moves; it is sent at a worker's start and whenever it
changes. Static pool and daemonset: a worker stops acting once it has heard
nothing from the supervisor for its heartbeat limit, the same bound the
supervisor gives the worker (:func:`~agentpool.supervisor.clusterview.heartbeat_limit`),
but never sooner than :data:`SILENCE_MIN_S`; the deadline is renewed just before
the last tick time of the pod's grid before half of it is spent, so that it wakes
the worker for its tick (with the default heartbeat limit at a 20 s interval,
90 s, that is every other tick): a worker hears from a turning loop at least
twice per bound, and from a stopped one never.
"""

from __future__ import annotations

import math

from agentpool.pool.fence import FenceTimes, silence_fence
from agentpool.supervisor.handles import WorkerHandle
from agentpool.worker import cadence

SILENCE_MIN_S = 30.0
"""The shortest a static pool's worker waits for word from its supervisor: as long as
the supervisor's own liveness allows its loop to stall (``/healthz``). Nobody else can
take a static pool's node, so this only bounds how long inputs go unconfirmed; a short
HEARTBEAT_TIMEOUT must not make a busy loop's workers stop."""


def due(
    handle: WorkerHandle, now: float, elastic: bool, lease: FenceTimes | None,
    interval_s: float = 0.0,
) -> FenceTimes | None:
    """The deadlines to send this worker now, if it needs new ones.

    ``lease``: the pod's worker fence (elastic pools; None before the first renewal).
    ``interval_s``: the reconcile interval, whose grid renewals are aligned to.
    """
    current = handle.fence_unsent or handle.fence_sent
    if elastic:
        return lease if lease is not None and lease != current else None
    if current is None or now >= _renewal(current, _silence(handle), interval_s):
        return silence_fence(now, _silence(handle))
    return None


def renewal_at(handle: WorkerHandle, elastic: bool, interval_s: float = 0.0) -> float | None:
    """When :func:`due` will next have a silence fence for this worker (static pools and
    daemonsets); None where only a lease renewal moves it (elastic pools) or it has none."""
    current = handle.fence_unsent or handle.fence_sent
    if elastic or current is None or handle.conn is None:
        return None
    return _renewal(current, _silence(handle), interval_s)


def _silence(handle: WorkerHandle) -> float:
    return max(handle.heartbeat_s, SILENCE_MIN_S)


def _renewal(current: FenceTimes, silence: float, interval_s: float) -> float:
    """Half of the fence spent, brought forward to just before the last tick time of the
    pod's grid (:mod:`agentpool.worker.cadence`) before it: a worker woken by a renewal
    that close to its tick ticks at once (:func:`~agentpool.worker.cadence.early_s`), where
    one read after its tick ended wakes it once more. Sent at the grid time itself, as
    before, it reached 1,000 workers at 20 s late enough for 0.2 more wake-ups a tick
    (most likely as the loop looks at a deadline no sooner than a loop period after its
    last look, and the workers' burst takes the CPU at that moment). Not brought forward
    by more than a quarter of the fence."""
    half = current.stop_at - silence / 2
    if interval_s <= 0:
        return half
    aligned = math.floor(half / interval_s) * interval_s - cadence.early_s(interval_s)
    return aligned if aligned >= current.stop_at - silence * 3 / 4 else half
