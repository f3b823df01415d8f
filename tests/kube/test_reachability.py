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


def test_a_503_is_one_more_request_unanswered_never_the_end_of_an_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A kube-apiserver back from a restart answers 503 "server is starting" for custom
    resources for a while: the outage is over only with an answer it serves."""
    clock = Clock(100.0)
    reach = Reachability("https://api:6443", clock=clock)
    backs: list[float] = []
    reach.when_back(lambda: backs.append(clock.now))
    caplog.set_level(logging.INFO, LOGGER)
    reach.unanswered("watch nodes: no answer: connection refused")
    clock.now += 5
    reach.heard(503, "list nodetwins: HTTP 503 Service Unavailable")
    reach.heard(502, "list nodes: HTTP 502 Bad Gateway")
    outage = reach.outage()
    assert outage is not None
    assert (outage.unanswered, outage.error) == (3, "list nodes: HTTP 502 Bad Gateway")
    assert backs == []
    clock.now += 1
    reach.heard(404, "list nodetwins: HTTP 404 Not Found")  # the server's own word
    assert not reach.down
    assert backs == [106.0]
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 2, messages
    assert (
        "answers again after 6s (3 requests without an answer meanwhile, the last: "
        "list nodes: HTTP 502 Bad Gateway)"
    ) in messages[-1]


def test_a_503_outside_an_outage_starts_none(caplog: pytest.LogCaptureFixture) -> None:
    """The server answered a moment ago: a 503 on one path is that request's failure, which
    its caller says (a 503 is not left to the outage account: level_of)."""
    reach = Reachability("https://api:6443", clock=Clock(100.0))
    caplog.set_level(logging.DEBUG, LOGGER)
    reach.heard(200, "")
    reach.heard(503, "list nodetwins: HTTP 503 Service Unavailable")
    assert not reach.down
    assert [r for r in caplog.records if r.name == LOGGER] == []


def test_a_failing_listener_does_not_fail_the_request(caplog: pytest.LogCaptureFixture) -> None:
    reach = Reachability("https://api:6443", clock=Clock(100.0))
    told: list[str] = []

    def broken() -> None:
        raise RuntimeError("a bug")

    reach.when_back(broken)
    reach.when_back(lambda: told.append("back"))
    reach.unanswered("watch nodes: no answer: connection refused")
    reach.answered()
    assert told == ["back"]
    assert "a listener of the API's return failed" in caplog.text
