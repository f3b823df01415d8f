"""Each worker's next moment (agentpool/supervisor/deadlines.py), on plain handles."""

from __future__ import annotations

import math

from agentpool.pool.fence import silence_fence
from agentpool.supervisor import fences
from agentpool.supervisor.deadlines import Deadlines, next_check
from agentpool.supervisor.handles import WorkerHandle
from agentpool.supervisor.lifecycle import StopReason, WorkerState
from tests.support.fakeworkers import IdleProcess


def running(node: str, last_seen: float, heartbeat_s: float = 60.0) -> WorkerHandle:
    handle = WorkerHandle(node)
    handle.started(IdleProcess(), None, last_seen)  # type: ignore[arg-type]  # no pipe yet
    handle.transition(WorkerState.RUNNING)
    handle.heartbeat_s = heartbeat_s
    return handle


def test_the_earliest_of_a_workers_deadlines_is_its_next_moment() -> None:
    handle = running("a", last_seen=100.0)
    assert next_check(handle, elastic=False, now=100.0, loop_period_s=0.5) == 160.0
    handle.outbox_since = 90.0  # its pipe refuses a message since before its last report
    assert next_check(handle, elastic=False, now=100.0, loop_period_s=0.5) == 150.0
    handle.outbox_since = None
    handle.conn = object()  # type: ignore[assignment]  # any pipe: only its presence counts
    handle.fence_sent = silence_fence(100.0, 60.0)
    assert next_check(handle, elastic=False, now=100.0, loop_period_s=0.5) == 130.0  # half
    assert next_check(handle, elastic=True, now=100.0, loop_period_s=0.5) == 160.0  # leases
    handle.to_stop(StopReason.HEARTBEAT, 105.0)
    assert next_check(handle, elastic=False, now=100.0, loop_period_s=0.5) == 105.0
    handle.ended(-15, "killed by SIGTERM")
    handle.lingers(99, 105.0)  # a predecessor without a sentinel: looked at every loop period
    assert next_check(handle, elastic=False, now=104.0, loop_period_s=0.5) == 104.5


def test_a_worker_in_backoff_is_due_at_its_restart_and_an_idle_one_never() -> None:
    handle = WorkerHandle("a")
    handle.wait_until(42.0)
    assert next_check(handle, elastic=False, now=0.0, loop_period_s=0.5) == 42.0
    handle.stopped()
    assert next_check(handle, elastic=False, now=0.0, loop_period_s=0.5) == math.inf


def test_workers_come_up_once_each_when_due_earliest_first_stale_entries_skipped() -> None:
    deadlines = Deadlines(loop_period_s=0.5)
    a, b, c = running("a", 0.0), running("b", 0.0), running("c", 0.0)
    deadlines.schedule(a, 30.0)
    deadlines.schedule(b, 10.0)
    deadlines.schedule(c, 20.0)
    deadlines.schedule(a, 5.0)  # moved earlier: the entry at 30 s is stale now
    deadlines.schedule(b, 15.0)  # later than its moment: no change
    assert deadlines.next_at() == 5.0
    assert deadlines.due(4.9) == []
    assert deadlines.due(12.0) == [a, b]
    assert deadlines.next_at() == 20.0
    assert deadlines.due(100.0) == [c]  # a's stale entry at 30 s does not bring it back
    assert deadlines.next_at() == math.inf
    assert len(deadlines) == 0


def test_nothing_is_due_sooner_than_a_loop_period_after_the_last_look() -> None:
    # A deadline acted on only once it has passed (a heartbeat limit is exceeded, not
    # reached) comes up at its very instant: rescheduled for then, it must not spin.
    deadlines = Deadlines(loop_period_s=0.5)
    handle = running("a", 0.0)
    deadlines.schedule(handle, 10.0)
    assert deadlines.due(10.0) == [handle]
    deadlines.schedule(handle, 10.0)
    assert deadlines.next_at() == 10.5
    assert deadlines.due(10.2) == []
    assert deadlines.due(10.5) == [handle]


def test_a_silence_fence_is_renewed_just_before_the_tick_before_half_of_it_is_spent() -> None:
    handle = running("a", last_seen=1003.0, heartbeat_s=60.0)
    handle.conn = object()  # type: ignore[assignment]  # any pipe: only its presence counts
    handle.fence_sent = silence_fence(1003.0, 60.0)  # stops at 1063; half spent at 1033
    # The tick at 1030, less the time a worker woken before its tick ticks at once (1 s).
    assert fences.renewal_at(handle, elastic=False, interval_s=10.0) == 1029.0
    assert fences.due(handle, 1028.9, False, None, 10.0) is None
    renewed = fences.due(handle, 1029.0, False, None, 10.0)
    assert renewed is not None
    assert renewed.stop_at == 1089.0
    assert fences.renewal_at(handle, elastic=False, interval_s=2.0) == 1031.5  # 1032 - 0.5
    # The tick before would bring it forward by more than a quarter: half it is.
    assert fences.renewal_at(handle, elastic=False, interval_s=40.0) == 1033.0
    assert fences.renewal_at(handle, elastic=False, interval_s=0.0) == 1033.0
