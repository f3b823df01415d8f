"""The statuses the supervisor writes when no worker can speak for a node."""

from __future__ import annotations

import pytest

from agentpool.config.settings import load_settings
from agentpool.results import Backend, Result
from agentpool.supervisor import statuses

POOL = {"AGENT_MODE": "pool"}


@pytest.mark.parametrize(
    ("env", "problems", "result", "message"),
    [
        ({}, None, Result.NONE, "agent stopped; host limits restored"),
        ({"RESTORE_ON_EXIT": "false"}, None, Result.NONE, "agent stopped; limits left as set"),
        ({"SIMULATE_ONLY": "true"}, None, Result.NONE, "agent stopped; limits left as set"),
        ({}, ("x: EPERM",), Result.ERROR, "agent stopped; could not restore: x: EPERM"),
    ],
)
def test_agent_stopped(
    env: dict[str, str], problems: tuple[str, ...] | None, result: Result, message: str
) -> None:
    status = statuses.agent_stopped(load_settings({**POOL, **env}), problems)
    assert (status.backend, status.result, status.message) == (Backend.NONE, result, message)


def test_not_controlled_and_restarting() -> None:
    settings = load_settings(POOL)
    assert statuses.not_controlled(settings, ()).message == (
        "not controlled: node deleted or no longer selected; host limits restored"
    )
    restarting = statuses.restarting("died", "killed by SIGKILL", 3, 4.2)
    assert restarting.result is Result.ERROR
    assert restarting.message == (
        "controller restarting: worker died (killed by SIGKILL); restart 3 in 4s"
    )


def test_a_crash_looping_node_says_so_with_its_reason_count_and_next_attempt() -> None:
    looping = statuses.restarting("died", "exited with code 70", 4, 8.2,
                                  reason="crashed: KeyError: 'spec'", failures=4,
                                  next_at="2026-01-01T00:00:08Z")
    assert looping.message == (
        "controller restarting: worker died (exited with code 70): crashed: KeyError: 'spec'; "
        "crash-looping: 4 failures in a row; restart 4 in 8s (at 2026-01-01T00:00:08Z)"
    )
    assert looping.observed == {"crashLooping": True, "failures": 4, "restart": 4,
                                "nextAttempt": "2026-01-01T00:00:08Z",
                                "reason": "crashed: KeyError: 'spec'"}
    once = statuses.restarting("died", "exited with code 70", 1, 1.0, failures=1)
    assert "crash-looping" not in once.message
    assert once.observed["crashLooping"] is False
