"""What the supervisor itself writes into a node's status, as opposed to its worker.

When no worker can speak for a node (it is restarting, it left this pod's
scope, the agent is stopping), or the node's status moved to the other API's
object, the status must say so rather than keep claiming that a cap is
applied. The wording lives here, in one place.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from agentpool.config.settings import Settings
from agentpool.kube.api import Resource
from agentpool.spec.gpu import GpuBackend, GpuTickResult
from agentpool.spec.values import Backend, Result, TickResult


class StatusSink(Protocol):
    """Where the supervisor offers node statuses (the :class:`StatusWriter`)."""

    def offer(self, profile: str, node: str, result: TickResult, force: bool = False) -> bool: ...

    def flush(self, timeout: float) -> bool: ...


def with_gpu(result: TickResult, last: TickResult | None) -> TickResult:
    """The same words for ``control.gpu`` when the node's worker had reported one.

    Otherwise a stopped or restarting node's GPU status would keep claiming its cap.
    """
    if last is None or last.gpu is None:
        return result
    gpu = GpuTickResult(GpuBackend.NONE, result.result, result.message)
    return dataclasses.replace(result, gpu=gpu)


def _restore_outcome(settings: Settings, problems: tuple[str, ...] | None) -> tuple[Result, str]:
    if problems:
        return Result.ERROR, "could not restore: " + "; ".join(problems)
    if settings.restore_on_exit and not settings.simulate_only:
        return Result.NONE, "host limits restored"
    return Result.NONE, "limits left as set"


def restarting(cause: str, how: str, restart: int, delay_s: float) -> TickResult:
    """The worker died or was killed; the next start is scheduled."""
    return TickResult(
        Backend.NONE,
        Result.ERROR,
        f"controller restarting: worker {cause} ({how}); restart {restart} in {delay_s:.0f}s",
    )


def not_controlled(settings: Settings, problems: tuple[str, ...] | None) -> TickResult:
    """The node left every pod's scope (deleted, or no longer matching the selector).

    A filtered watch reports a node that stops matching as DELETED, so the two
    causes cannot be told apart.
    """
    result, restored = _restore_outcome(settings, problems)
    return TickResult(
        Backend.NONE, result, f"not controlled: node deleted or no longer selected; {restored}"
    )


def moved(target: tuple[Resource, str] | None) -> TickResult:
    """The node follows the other API now: its status is written in ``target`` instead."""
    if target is None:
        where = "no object carries its status now"
    elif target[0] is Resource.NODE_TWINS:
        where = f"its status is in NodeTwin {target[1]!r} (status.controlStatus)"
    else:
        where = f"its status is in TelemetryProfile {target[1]!r}"
    api = "NodeTwin" if target is not None and target[0] is Resource.NODE_TWINS else "profile"
    return TickResult(
        Backend.NONE, Result.NONE, f"not written here any more: the node follows the {api} "
        f"API now; {where}"
    )


def agent_stopped(settings: Settings, problems: tuple[str, ...] | None) -> TickResult:
    """The agent shut down gracefully."""
    result, restored = _restore_outcome(settings, problems)
    return TickResult(Backend.NONE, result, f"agent stopped; {restored}")
