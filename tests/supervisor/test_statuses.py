"""The statuses the supervisor writes when no worker can speak for a node."""

from __future__ import annotations

import pytest

from agentpool.config.settings import load_settings
from agentpool.spec.values import Backend, Result
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
