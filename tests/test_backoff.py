"""Restart backoff and crash-loop policy, without real time."""

from __future__ import annotations

import pytest

from agentpool.backoff import Backoff, RestartPolicy


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
