"""Stale desired state (SPEC_READ_TIMEOUT): the wording of each case.

When the desired-state watch has failed for SPEC_READ_TIMEOUT the agent no
longer trusts what it last saw. ``relax`` gives the node back what it had
before the agent (host values found at start, no HTTP throttle); ``keep``
goes on enforcing the last desired state. Either way the status says so, and
says so again once when the API confirms the desired state. The relaxing
itself is :func:`agentpool.controller.release.give_back`'s, as for a removed cap.
"""

from __future__ import annotations

from agentpool.controller.release import Released
from agentpool.durations import format_duration
from agentpool.results import Backend, Result, TickResult


def why(timeout_s: float) -> str:
    return (
        f"desired state not confirmed from the API for {format_duration(timeout_s)} "
        "(watches failing)"
    )


def prefixed(result: TickResult, prefix: str) -> TickResult:
    return TickResult(result.backend, result.result, f"{prefix}{result.message}", result.observed)


def kept(result: TickResult, timeout_s: float) -> TickResult:
    return prefixed(result, f"{why(timeout_s)}; SPEC_STALE_ACTION=keep: ")


def confirmed_again(result: TickResult) -> TickResult:
    return prefixed(result, "desired state confirmed again after a stale period: ")


def relaxed_simulated(timeout_s: float) -> TickResult:
    message = f"{why(timeout_s)}; SPEC_STALE_ACTION=relax: simulate-only, nothing written"
    return TickResult(Backend.NONE, Result.NONE, message)


def relax(released: Released, timeout_s: float) -> TickResult:
    """The status of relaxing (:func:`agentpool.controller.release.give_back` did it)."""
    if released.problems:
        message = f"{why(timeout_s)}; could not relax: {'; '.join(released.problems)}"
        return TickResult(Backend.NONE, Result.ERROR, message)
    message = f"{why(timeout_s)}; SPEC_STALE_ACTION=relax: host limits restored, throttle released"
    return TickResult(Backend.NONE, Result.NONE, message)
