"""A node's status from the supervisor: where it goes, and what the supervisor says itself.

Every status, a worker's tick result or the supervisor's own, goes to the
object that carries it (:class:`StatusRouter`). When no worker can speak
for a node (it is restarting, it left this pod's scope, the agent is
stopping), the status must say so rather than keep claiming that a cap is
applied. The wording lives here, in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

from agentpool.config.settings import Settings
from agentpool.kube.api import Resource
from agentpool.spec.values import Backend, GpuBackend, GpuTickResult, Result, TickResult


class StatusSink(Protocol):
    """Where the supervisor offers node statuses (the :class:`StatusWriter`)."""

    def offer(self, profile: str, node: str, result: TickResult, force: bool = False) -> bool: ...

    def flush(self, timeout: float) -> bool: ...


class StatusRouter:
    """A node's status goes to the object that carries it: its TelemetryProfile (profile
    API) or its NodeTwin, each through its own writer; a node without one has no status."""

    def __init__(
        self,
        target: Callable[[str], tuple[Resource, str] | None],
        profiles: StatusSink | None,
        twins: StatusSink | None,
    ) -> None:
        self._target = target
        self._profiles = profiles
        self._twins = twins

    def offer(self, node: str, result: TickResult, force: bool = False) -> None:
        target = self._target(node)
        if target is None:
            return
        resource, name = target
        writer = self._twins if resource is Resource.NODE_TWINS else self._profiles
        if writer is not None:
            writer.offer(name, node, result, force=force)

    def writers(self) -> list[StatusSink]:
        return [w for w in (self._profiles, self._twins) if w is not None]


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


def agent_stopped(settings: Settings, problems: tuple[str, ...] | None) -> TickResult:
    """The agent shut down gracefully."""
    result, restored = _restore_outcome(settings, problems)
    return TickResult(Backend.NONE, result, f"agent stopped; {restored}")
