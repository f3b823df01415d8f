"""A node's status from the supervisor: where it goes, and what the supervisor says itself.

Every status, a worker's tick result or the supervisor's own, goes to the
object that carries it (:class:`StatusRouter`). When no worker can speak
for a node (it is restarting, it left this pod's scope, the agent is
stopping), or the node's status moved to the other API's object, the status
must say so rather than keep claiming that a cap is applied. The wording lives here, in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

from agentpool.backoff import CRASH_LOOP_FAILURES
from agentpool.config.settings import Settings
from agentpool.kube.api import Resource
from agentpool.results import Backend, GpuBackend, GpuTickResult, Result, TickResult


class StatusSink(Protocol):
    """Where the supervisor offers node statuses (the :class:`StatusWriter`)."""

    def offer(self, profile: str, node: str, result: TickResult, force: bool = False) -> bool: ...

    def flush(self, timeout: float) -> bool: ...


class StatusHomes(Protocol):
    """Which object carries a node's status (the supervisor's cluster view)."""

    def status_target(self, node: str) -> tuple[Resource, str] | None: ...

    def targets(self, resource: Resource, name: str, node: str) -> bool: ...


class StatusRouter:
    """A node's status goes to the object that carries it: its TelemetryProfile (profile
    API) or its NodeTwin, each through its own writer; a node without one has no status.
    When that object changes (the node follows the other API now), the one it leaves
    gets a last word saying so (:func:`moved`). Not thread safe: the loop's."""

    def __init__(
        self, homes: StatusHomes, profiles: StatusSink | None, twins: StatusSink | None,
        holds: Callable[[str], bool] | None = None,
    ) -> None:
        self._view = homes
        self._profiles = profiles
        self._twins = twins
        self._holds = holds
        """Elastic pool: whether this pod holds a node now (else it does not speak for it)."""
        self._homes: dict[str, tuple[Resource, str]] = {}
        """Where each node's status was last offered."""

    def _writer(self, resource: Resource) -> StatusSink | None:
        return self._twins if resource is Resource.NODE_TWINS else self._profiles

    def offer(
        self, node: str, result: TickResult, force: bool = False, unowned: bool = False
    ) -> None:
        """In an elastic pool, only while this pod holds the node: a report read late (after
        a stall, say) must not overwrite what the node's new owner wrote. ``unowned``: no
        pod controls the node any more (it left every pod's selector)."""
        if not unowned and self._holds is not None and not self._holds(node):
            return
        target = self._view.status_target(node)
        previous = self._homes.get(node)
        if previous is not None and previous != target:
            self._hand_over(node, previous, target, result)
        if target is None:
            self._homes.pop(node, None)
            return
        self._homes[node] = target
        resource, name = target
        writer = self._writer(resource)
        if writer is not None:
            writer.offer(name, node, result, force=force)

    def _hand_over(
        self,
        node: str,
        previous: tuple[Resource, str],
        target: tuple[Resource, str] | None,
        last: TickResult,
    ) -> None:
        """The object the node's status leaves says so, rather than go on claiming what it
        last said. Not written to an object that is gone or that now targets another node
        (that node writes it)."""
        resource, name = previous
        writer = self._writer(resource)
        if writer is None or not self._view.targets(resource, name, node):
            return
        writer.offer(name, node, with_gpu(moved(target), last), force=True)

    def forget(self, node: str) -> None:
        """The node left this pod's scope."""
        self._homes.pop(node, None)

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


def restarting(
    cause: str,
    how: str,
    restart: int,
    delay_s: float,
    reason: str = "",
    failures: int = 1,
    next_at: str = "",
) -> TickResult:
    """The worker died or was killed (``reason``: its own last words, such as the
    exception that ended it); the next start is scheduled, at ``next_at`` (RFC 3339).
    After :data:`~agentpool.backoff.CRASH_LOOP_FAILURES` deaths in a row the node is
    crash-looping, and the status says so, with the count."""
    message = f"controller restarting: worker {cause} ({how})"
    if reason:
        message += f": {reason}"
    looping = failures >= CRASH_LOOP_FAILURES
    if looping:
        message += f"; crash-looping: {failures} failures in a row"
    message += f"; restart {restart} in {delay_s:.0f}s"
    observed: dict[str, object] = {"crashLooping": looping, "failures": failures,
                                   "restart": restart}
    if next_at:
        message += f" (at {next_at})"
        observed["nextAttempt"] = next_at
    if reason:
        observed["reason"] = reason
    return TickResult(Backend.NONE, Result.ERROR, message, observed)


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
