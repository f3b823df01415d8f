"""The fence inequality (agentpool/pool/fence.py): a pod's workers are done writing before
any peer may take their nodes, for every setting the agent accepts."""

from __future__ import annotations

import itertools

import pytest

from agentpool.pool.assignment import Assignment
from agentpool.pool.fence import (
    CLOCK_RATE_ERROR,
    KILL_MARGIN_S,
    FenceTimes,
    fence_holds,
    grace_for,
    silence_fence,
    worker_fence,
)
from agentpool.pool.handoff import Handoff
from agentpool.pool.state import PoolState


def takeover_real_s(duration_s: float, grace_s: float, rate: float) -> float:
    """The earliest a peer whose clock runs at ``rate`` may take the nodes, in real seconds
    after the renewal was sent (it saw the renewal no earlier than that)."""
    return (duration_s + grace_s) / rate


def test_defaults_stop_ten_seconds_after_a_renewal_and_write_until_thirty() -> None:
    fence = worker_fence(100.0, duration_s=15.0, renew_s=5.0, shutdown_s=20.0,
                         grace_s=grace_for(20.0))
    assert fence == FenceTimes(stop_at=110.0, write_until=130.0)
    # Peers take the nodes 36 s after they saw the renewal at the earliest.
    assert takeover_real_s(15.0, grace_for(20.0), 1 + CLOCK_RATE_ERROR) > 35.9


DURATIONS = [1.0, 2.0, 8.0, 15.0, 60.0, 600.0, 3600.0, 86400.0]
SHUTDOWNS = [0.5, 3.0, 20.0, 120.0, 3600.0]


@pytest.mark.parametrize(("duration", "shutdown"), list(itertools.product(DURATIONS, SHUTDOWNS)))
def test_every_accepted_setting_satisfies_the_inequality(duration: float, shutdown: float) -> None:
    grace = grace_for(shutdown)
    for renew in (duration / 2, duration / 10, 0.001):  # POOL_LEASE_RENEW <= duration / 2
        fence = worker_fence(0.0, duration, renew, shutdown, grace)
        assert fence.write_until is not None
        assert fence.stop_at <= fence.write_until
        assert fence_holds(fence.write_until, duration, grace)
        # The same on real clocks at the extremes the inequality assumes: this pod's
        # clock slow (its deadlines come late), the peer's fast (it takes over early).
        slow, fast = 1 - CLOCK_RATE_ERROR, 1 + CLOCK_RATE_ERROR
        assert fence.write_until / slow <= takeover_real_s(duration, grace, fast) + 1e-9
        # Workers stop when the supervisor fences its handoff, unless even that is too late.
        handoff = Handoff(duration, renew)
        handoff.published(0.0, frozenset())
        assert fence.stop_at <= handoff.fence_at()  # type: ignore[operator]
        if fence_holds(duration - renew + shutdown, duration, grace):
            # The whole graceful-stop budget where it is safe.
            assert fence == FenceTimes(duration - renew, duration - renew + shutdown)


def test_the_inequality_is_what_keeps_writes_before_a_takeover() -> None:
    # Without the margin for clock rates (or with a grace that ignores the restore window)
    # a pod's last write could land after a peer's first one.
    duration, shutdown = 3600.0, 20.0
    naive_span = duration - 0.5 + shutdown
    assert not fence_holds(naive_span, duration, grace_for(shutdown))
    assert (naive_span / (1 - CLOCK_RATE_ERROR)
            > takeover_real_s(duration, grace_for(shutdown), 1 + CLOCK_RATE_ERROR))
    # ... which worker_fence shortens: the restore window gives way, never the takeover.
    fence = worker_fence(0.0, duration, 0.5, shutdown, grace_for(shutdown))
    assert fence.write_until is not None
    assert fence.write_until < naive_span
    # A grace shorter than the restore window cannot be made safe by the restore window.
    assert not fence_holds(15.0 - 5.0 + 20.0, 15.0, 20.0 - KILL_MARGIN_S - 9.0)


def test_pool_state_gives_its_workers_the_fence_of_its_last_renewal() -> None:
    state = PoolState("p-0", Assignment.RENDEZVOUS, 15.0, 5.0, grace_for(20.0))
    assert state.worker_fence(20.0) is None  # nothing may run before the first renewal
    state.written(50.0, state.next_write())
    assert state.worker_fence(20.0) == FenceTimes(60.0, 80.0)
    state.written(55.0, state.next_write())
    assert state.worker_fence(20.0) == FenceTimes(65.0, 85.0)
    # A renewal acknowledged late but sent earlier does not move the deadlines back.
    state.written(52.0, state.next_write())
    assert state.worker_fence(20.0) == FenceTimes(65.0, 85.0)


def test_a_silent_supervisor_fence_has_no_write_limit() -> None:
    assert silence_fence(10.0, 90.0) == FenceTimes(100.0, None)
