"""The rate limiter of KUBE_CLIENT_QPS: a token bucket that callers wait on.

The bound it must keep is a token bucket's: over any span of ``t`` seconds at
most ``burst + qps * t`` callers are released. A clock the test moves checks
the exact schedule; real threads on the real clock check that waiters on
several threads share one bucket (tests/envtest/test_client_limit.py counts
the requests the API server received).
"""

from __future__ import annotations

import threading
import time

import pytest

from agentpool.tokenbucket import RateLimiter
from tests.support.clock import Clock


def test_a_burst_goes_at_once_then_one_every_1_over_qps() -> None:
    clock = Clock(100.0)
    limiter = RateLimiter(4.0, 3, clock=clock, sleep=clock.sleep)
    released = []
    for _ in range(7):
        limiter.wait()
        released.append(round(clock.now - 100.0, 6))
    assert released == [0.0, 0.0, 0.0, 0.25, 0.5, 0.75, 1.0]


def test_an_idle_limiter_fills_up_to_its_burst_and_no_more() -> None:
    clock = Clock(100.0)
    limiter = RateLimiter(10.0, 2, clock=clock, sleep=clock.sleep)
    for _ in range(2):
        assert limiter.wait() == 0.0
    clock.now += 60.0  # a minute idle: still only two at once
    assert [limiter.wait() for _ in range(3)] == pytest.approx([0.0, 0.0, 0.1])


def test_waiters_on_many_threads_share_one_bucket() -> None:
    qps, burst, threads = 40.0, 4, 16
    limiter = RateLimiter(qps, burst)
    released: list[float] = []
    lock = threading.Lock()

    def call() -> None:
        limiter.wait()
        with lock:
            released.append(time.monotonic())

    workers = [threading.Thread(target=call) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    assert len(released) == threads
    released.sort()
    # No span of the releases holds more than the bucket allows (sleeps only end late).
    for i in range(threads):
        for j in range(i, threads):
            assert j - i + 1 <= burst + qps * (released[j] - released[i]) + 1e-6, (i, j)
