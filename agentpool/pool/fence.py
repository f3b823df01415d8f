"""When a pool pod's workers must stop, so that no peer takes a node they still write.

A pod's lease is renewed by its supervisor loop, but its workers write to
their nodes on their own timers. If the loop stops turning (a stopped
process, a system call that never returns), only deadlines the workers hold
themselves keep them from writing on after a peer took their nodes over.
This module owns those deadlines and the inequality that makes them safe:
plain arithmetic on seconds, no clock is read here.

The timeline of one pod P, on P's CLOCK_MONOTONIC (one clock for all of
P's processes), counted from ``r``, when P *sent* its last lease write that
succeeded:

- ``stop_at = r + duration - renew``: P's workers stop controlling; the
  supervisor fences its handoff at the same instant
  (:meth:`~agentpool.pool.handoff.Handoff.fence_at`);
- ``write_until = stop_at + shutdown``: the last instant a write of P's
  workers may take effect. Between the two they restore what they changed,
  with the budget of a graceful stop (SHUTDOWN_TIMEOUT).

A peer Q saw that renewal no earlier than P sent it, and ignores P's claims
only ``duration + grace`` later on Q's own clock, with the grace P publishes
on its Lease (:func:`grace_for` of P's SHUTDOWN_TIMEOUT). If every clock
runs within ``1 +- e`` of real time (``e`` = :data:`CLOCK_RATE_ERROR`), P's
last write precedes Q's first one when

    (write_until - r) / (1 - e)  <=  (duration + grace) / (1 + e)

:func:`fence_holds` is that inequality; :func:`worker_fence` guarantees it
for every setting, shortening the restore window where it would not hold.
"""

from __future__ import annotations

from dataclasses import dataclass

CLOCK_RATE_ERROR = 1e-3
"""The largest rate error assumed between two hosts' monotonic clocks (1000 ppm): twice
the 500 ppm NTP may slew a clock by, and far more than a crystal drifts."""

KILL_MARGIN_S = 1.0
"""Added to SHUTDOWN_TIMEOUT for the grace: the supervisor notices an overdue worker
within one loop period (0.5 s) and SIGKILLs it; the rest is slack."""


def grace_for(shutdown_timeout_s: float) -> float:
    """How long a silent pod's claims still block after its lease expired.

    A pod that cannot renew stops its workers one renew period before its
    lease expires; each is SIGKILLed, or stops writing on its own, at most
    SHUTDOWN_TIMEOUT later, so by the end of this grace none of them can
    still act. Each pod publishes its own on its Lease.
    """
    return shutdown_timeout_s + KILL_MARGIN_S


@dataclass(frozen=True)
class FenceTimes:
    """A worker's deadlines on the host's CLOCK_MONOTONIC."""

    stop_at: float
    """Stop controlling: no tick begins at or after it."""
    write_until: float | None
    """No write may take effect after it (None: no peer can take the node, as in a
    static pool or a daemonset, where a restore is always safe)."""


def fence_holds(
    write_span_s: float, duration_s: float, grace_s: float, rate_error: float = CLOCK_RATE_ERROR
) -> bool:
    """Whether a pod whose workers write until ``write_span_s`` after its renewal was sent
    (on its clock) is done before any peer may take its nodes: ``duration_s`` and
    ``grace_s`` as the pod publishes them, measured on the peer's clock."""
    return write_span_s / (1 - rate_error) <= (duration_s + grace_s) / (1 + rate_error)


def safe_write_span_s(
    duration_s: float, grace_s: float, rate_error: float = CLOCK_RATE_ERROR
) -> float:
    """The longest write span :func:`fence_holds` accepts (less a microsecond, so that
    rounding cannot tip it over)."""
    return (duration_s + grace_s) * (1 - rate_error) / (1 + rate_error) - 1e-6


def worker_fence(
    renewed_at: float,
    duration_s: float,
    renew_s: float,
    shutdown_s: float,
    grace_s: float,
    rate_error: float = CLOCK_RATE_ERROR,
) -> FenceTimes:
    """The deadlines of a pod's workers after a renewal sent at ``renewed_at``."""
    span = min(duration_s - renew_s + shutdown_s, safe_write_span_s(duration_s, grace_s,
                                                                    rate_error))
    write_until = renewed_at + span
    return FenceTimes(min(renewed_at + duration_s - renew_s, write_until), write_until)


def silence_fence(now: float, silence_s: float) -> FenceTimes:
    """Static pools and daemonsets: stop acting when the supervisor was silent this long."""
    return FenceTimes(now + silence_s, None)
