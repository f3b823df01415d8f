"""The outage account: said once, then at a bounded rate, once when over; without real time."""

from __future__ import annotations

import logging

import pytest

from agentpool.errors import (
    KubeError,
    KubePermanentError,
    KubeTemporaryError,
    KubeUnreachableError,
)
from agentpool.kube.reachability import Reachability, level_of
from tests.support.clock import Clock

LOGGER = "agentpool.kube.reachability"


def test_an_outage_is_told_once_then_once_a_minute_then_once_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock(100.0)
    reach = Reachability("https://api:6443", clock=clock, summary_every_s=60.0)
    reach.answered()
    assert not reach.down
    assert reach.outage() is None
    caplog.set_level(logging.INFO, LOGGER)
    for _ in range(180):  # three minutes of a request failing every second
        reach.unanswered("watch nodes: no answer: connection refused")
        clock.now += 1.0
    outage = reach.outage()
    assert reach.down
    assert outage is not None
    assert (outage.since, outage.unanswered) == (100.0, 180)
    reach.answered()
    reach.answered()
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 1 + 2 + 1, messages  # at 0 s, 60 s, 120 s; then over
    assert "unreachable: watch nodes: no answer: connection refused" in messages[0]
    assert "still unreachable after 1m (61 requests" in messages[1]
    assert "answers again after 3m (180 requests" in messages[-1]
    assert not reach.down


@pytest.mark.parametrize(
    ("error", "level"),
    [(KubeUnreachableError("watch nodes: no answer"), logging.DEBUG),
     (KubeTemporaryError("patch: HTTP 503", 503), logging.WARNING),
     (KubePermanentError("list: HTTP 403", 403), logging.WARNING)],
)
def test_only_requests_without_an_answer_are_left_to_the_outage_account(
    error: KubeError, level: int
) -> None:
    assert level_of(error) == level
