"""Restart backoff, crash-loop policy and reconnect backoff, without real time."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from agentpool.backoff import (
    Backoff,
    RestartPolicy,
    exponential_delay,
    reconnect_cap,
    reconnect_delay,
)


def test_delays_double_from_about_one_second_up_to_the_cap() -> None:
    policy = RestartPolicy(jitter_s=0.0)
    delays = [policy.on_death(started_at=0.0, died_at=1.0) for _ in range(9)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


def test_jitter_stays_within_its_bound() -> None:
    policy = RestartPolicy(jitter_s=0.5)
    first = [RestartPolicy(jitter_s=0.5).on_death(0.0, 1.0) for _ in range(50)]
    assert all(1.0 <= d <= 1.5 for d in first)
    assert len(set(first)) > 1, "jitter must spread restarts of many crashing workers"
    for _ in range(20):
        assert policy.on_death(0.0, 1.0) <= 60.0


def test_a_long_healthy_run_resets_the_backoff() -> None:
    policy = RestartPolicy(jitter_s=0.0)
    for _ in range(5):
        policy.on_death(0.0, 1.0)
    assert policy.on_death(started_at=100.0, died_at=100.0 + 599.0) == 32.0
    assert policy.on_death(started_at=1000.0, died_at=1000.0 + 600.0) == 1.0
    assert policy.failures == 1


@pytest.mark.parametrize("restarts", [0, 1, 7])
def test_restarts_count_every_restart(restarts: int) -> None:
    policy = RestartPolicy()
    for _ in range(restarts):
        policy.on_death(0.0, 1.0)
        policy.on_restart()
    assert policy.restarts == restarts


def test_a_retry_loop_doubles_from_its_first_delay_to_its_cap_and_starts_over() -> None:
    backoff = Backoff(initial_s=0.5, max_s=10.0)
    assert [backoff.next() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    backoff.reset()
    assert backoff.next() == 0.5


@pytest.mark.parametrize(("interval", "cap"), [(0.5, 1.0), (10.0, 10.0), (20.0, 20.0),
                                               (60.0, 30.0)])
def test_the_reconnect_cap_is_one_interval_within_bounds(interval: float, cap: float) -> None:
    assert reconnect_cap(interval) == cap


def test_a_reconnect_delay_lies_in_the_upper_half_of_its_capped_exponential() -> None:
    lowest = [reconnect_delay(n, 20.0, jitter=lambda a, b: a) for n in range(1, 10)]
    highest = [reconnect_delay(n, 20.0, jitter=lambda a, b: b) for n in range(1, 10)]
    assert lowest == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert highest == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0, 20.0]


def returns_after_outage(
    delay: Callable[[int], float], pods: int = 1000, outage_s: float = 180.0
) -> list[float]:
    """When each of ``pods`` clients that lost the server at 0 tries again after it came
    back at ``outage_s``, seconds after."""
    arrivals = []
    for _ in range(pods):
        at, attempt = 0.0, 0
        while at < outage_s:
            attempt += 1
            at += delay(attempt)
        arrivals.append(at - outage_s)
    return arrivals


def test_a_daemonset_that_lost_the_server_comes_back_spread_over_the_cap() -> None:
    # Issue 43: 1,000 pods lose the API server together; it returns 3 minutes later.
    rng = random.Random(43)
    cap = reconnect_cap(20.0)
    spread = returns_after_outage(lambda n: reconnect_delay(n, cap, jitter=rng.uniform))
    busiest = max(Counter(int(at) for at in spread).values())
    assert max(spread) <= cap
    assert busiest <= 2 * len(spread) / cap  # measured 77 for a fair share of 50
    # A jitter of a second keeps them together: half of them in one second.
    bunched = returns_after_outage(lambda n: exponential_delay(n, 0.5, 30.0, 1.0, rng.uniform))
    assert max(Counter(int(at) for at in bunched).values()) >= len(bunched) / 4

