"""A worker's lifecycle (agentpool/supervisor/lifecycle.py) on plain handles: every legal
move made, every other one refused, and the restart decision's table row by row.

The oracle is written out here, move by move, not read from the module's table: a move
added to or dropped from TRANSITIONS must be added to or dropped from this list too.
"""

from __future__ import annotations

import itertools

import pytest

from agentpool.errors import IllegalTransitionError
from agentpool.supervisor.handles import WorkerHandle
from agentpool.supervisor.lifecycle import (
    AFTER_EXIT,
    REPORTED_STATES,
    TRANSITIONS,
    StopReason,
    Then,
    WorkerState,
    after_exit,
)
from agentpool.worker.protocol import EXIT_FENCED
from tests.support.fakeworkers import IdleProcess

S = WorkerState

LEGAL = {
    (S.NEW, S.STARTING),  # launched
    (S.NEW, S.BACKOFF),  # not started: a failure
    (S.NEW, S.DEFERRED),  # put off: the fork server still starting, the batch's deadline
    (S.STARTING, S.RUNNING),  # its first tick
    (S.STARTING, S.STOPPING),  # hung, a corrupt message, scope, shutdown
    (S.STARTING, S.LINGERING),  # died, its pid still running
    (S.STARTING, S.BACKOFF),  # died
    (S.RUNNING, S.STOPPING),
    (S.RUNNING, S.LINGERING),
    (S.RUNNING, S.BACKOFF),
    (S.STOPPING, S.STOPPING),  # a later reason (shutdown over scope)
    (S.STOPPING, S.LINGERING),
    (S.STOPPING, S.BACKOFF),  # stopped to be restarted (hung, corrupt), or fenced itself
    (S.STOPPING, S.STOPPED),  # stopped for good (scope, shutdown)
    (S.LINGERING, S.LINGERING),  # told what its end means (scope, shutdown)
    (S.LINGERING, S.BACKOFF),
    (S.LINGERING, S.STOPPED),
    (S.BACKOFF, S.STARTING),  # restarted
    (S.BACKOFF, S.BACKOFF),  # a restart that failed
    (S.BACKOFF, S.DEFERRED),  # a restart put off
    (S.BACKOFF, S.STOPPED),  # its node left, or the supervisor stops
    (S.DEFERRED, S.STARTING),
    (S.DEFERRED, S.BACKOFF),
    (S.DEFERRED, S.DEFERRED),
    (S.DEFERRED, S.STOPPED),
}


def reach(state: WorkerState) -> WorkerHandle:
    """A handle brought to ``state`` by legal moves only, its fields as they would be."""
    handle = WorkerHandle("a")
    if state is S.NEW:
        return handle
    if state is S.BACKOFF:
        handle.back_off(now=10.0, started_at=10.0)
        return handle
    if state is S.DEFERRED:
        handle.put_off(10.5)
        return handle
    handle.started(IdleProcess(), None, 10.0)  # type: ignore[arg-type]  # no pipe needed
    if state is S.RUNNING:
        handle.transition(S.RUNNING)
    elif state is S.STOPPING:
        handle.to_stop(StopReason.SCOPE, 30.0)
    elif state is S.LINGERING:
        handle.ended(255, "exited with code 255")
        handle.lingers(99, 30.0)
    elif state is S.STOPPED:
        handle.to_stop(StopReason.SHUTDOWN, 30.0)
        handle.ended(0, "exited with code 0")
        handle.stopped()
    assert handle.state is state
    return handle


def test_the_oracle_and_the_table_agree() -> None:
    table = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert table == LEGAL
    assert set(TRANSITIONS) == set(WorkerState)


def test_a_new_handle_is_new() -> None:
    assert WorkerHandle("a").state is S.NEW


@pytest.mark.parametrize(("source", "target"), sorted(LEGAL, key=str))
def test_every_legal_move_is_made(source: WorkerState, target: WorkerState) -> None:
    handle = reach(source)
    handle.transition(target)
    assert handle.state is target


ILLEGAL = sorted(set(itertools.product(WorkerState, WorkerState)) - LEGAL, key=str)


@pytest.mark.parametrize(("source", "target"), ILLEGAL)
def test_every_other_move_is_refused_and_changes_nothing(
    source: WorkerState, target: WorkerState
) -> None:
    handle = reach(source)
    said = f"from {source.name} to {target.name}"
    with pytest.raises(IllegalTransitionError, match=said) as refused:
        handle.transition(target)
    assert (refused.value.node, refused.value.source, refused.value.target) == (
        "a", source, target)
    assert handle.state is source


def test_the_moves_set_what_each_state_holds() -> None:
    handle = WorkerHandle("a")
    process = IdleProcess()
    handle.started(process, None, 5.0)  # type: ignore[arg-type]
    assert (handle.state, handle.process, handle.started_at) == (S.STARTING, process, 5.0)
    handle.to_stop(StopReason.HEARTBEAT, 7.0)
    assert (handle.state, handle.stop_reason, handle.kill_at) == (S.STOPPING, "heartbeat", 7.0)
    handle.ended(-9, "killed by SIGKILL")
    handle.lingers(77, 9.0)
    assert (handle.state, handle.process, handle.lingering, handle.kill_at) == (
        S.LINGERING, None, 77, 9.0)
    handle.to_stop(StopReason.SCOPE, handle.kill_at)  # stays LINGERING, its end now means scope
    assert (handle.state, handle.stop_reason, handle.lingering) == (S.LINGERING, "scope", 77)
    delay = handle.back_off(now=10.0, started_at=5.0)
    assert (handle.state, handle.restart_at) == (S.BACKOFF, 10.0 + delay)
    assert (handle.stop_reason, handle.kill_at, handle.lingering) == (None, None, None)
    assert handle.policy.failures == 1
    handle.put_off(11.0)  # no failure counted (a fork server still starting)
    assert (handle.state, handle.restart_at, handle.policy.failures) == (S.DEFERRED, 11.0, 1)
    handle.wait_until(12.0)  # a fenced exit's restart, at once: no failure either
    assert (handle.state, handle.restart_at, handle.policy.failures) == (S.BACKOFF, 12.0, 1)
    handle.stopped()
    assert handle.state is S.STOPPED
    with pytest.raises(IllegalTransitionError):
        handle.started(process, None, 12.0)  # type: ignore[arg-type]
    assert handle.process is None, "a refused move writes no field"


def test_only_a_live_worker_can_be_hung() -> None:
    for state in WorkerState:
        handle = reach(state)
        handle.heartbeat_s = 1.0
        assert (handle.hung(100.0) is not None) == (state in (S.STARTING, S.RUNNING)), state


def test_each_state_is_counted_under_one_of_the_four_reported_states() -> None:
    assert REPORTED_STATES == ("starting", "running", "stopping", "backoff")
    assert {s.reported for s in WorkerState} == set(REPORTED_STATES)
    for state in ("starting", "running", "stopping", "backoff"):
        assert WorkerState(state).reported == state


@pytest.mark.parametrize(
    ("reason", "exit_code", "then", "cause"),
    [
        (StopReason.SCOPE, 0, Then.FORGET, ""),
        (StopReason.SCOPE, EXIT_FENCED, Then.FORGET, ""),
        (StopReason.SHUTDOWN, -9, Then.STAY_STOPPED, ""),
        (StopReason.SHUTDOWN, EXIT_FENCED, Then.STAY_STOPPED, ""),
        (None, EXIT_FENCED, Then.START_AGAIN, ""),
        (None, 70, Then.BACK_OFF, "died"),
        (None, -9, Then.BACK_OFF, "died"),  # an OOM kill too: how it is told differs
        (None, None, Then.BACK_OFF, "died"),
        (StopReason.HEARTBEAT, -9, Then.BACK_OFF, "unresponsive, killed"),
        (StopReason.HEARTBEAT, EXIT_FENCED, Then.BACK_OFF, "unresponsive, killed"),
        (StopReason.PROTOCOL, -15, Then.BACK_OFF, "sent a corrupt message, stopped"),
        (StopReason.PROTOCOL, EXIT_FENCED, Then.BACK_OFF, "sent a corrupt message, stopped"),
    ],
)
def test_the_restart_decision(
    reason: StopReason | None, exit_code: int | None, then: Then, cause: str
) -> None:
    decision = after_exit(reason, exit_code)
    assert (decision.then, decision.cause) == (then, cause)


def test_the_restart_decision_has_a_row_for_every_reason_and_way_of_exiting() -> None:
    assert set(AFTER_EXIT) == set(itertools.product([None, *StopReason], [False, True]))
