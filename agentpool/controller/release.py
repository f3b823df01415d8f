"""Giving a node back what it had before the agent capped it.

Two paths end here: a node's cap removed while the node stays managed (its
NodePowerProfile or NodeTwin deleted, or its cap field dropped), and
``SPEC_STALE_ACTION=relax``. Both do the same: the host values found at start
go back (RAPL limits, cpufreq ``scaling_max_freq``), an HTTP throttle is
released (``dvfs.set_throttle_pct`` 0), and a RAPL cap applied over HTTP is
raised to the node's maximum where one is known; the HTTP control protocol
has no action that removes a cap, so where no maximum is known the result
says that the endpoint keeps the last one.

A removed cap is released one tick late (:class:`CapRelease`): a node moving
between a NodePowerProfile and a NodeTwin has its two objects on two watches
whose events may reach the supervisor in either order, and releasing on the
first tick without a desired state would open a gap that the next event
closes again. The first tick says so; the second one releases.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from agentpool.backends import cpu_http, httpclient
from agentpool.backends.sysfs.cpufreq import CpufreqHost
from agentpool.backends.sysfs.rapl import RaplHost
from agentpool.controller.percent import Maximum
from agentpool.errors import HttpBackendError
from agentpool.resources.routing import HttpEndpoint
from agentpool.results import Result

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpHeld:
    """What the agent's HTTP control requests left in force at a node's endpoint."""

    endpoint: HttpEndpoint
    """Where they went (the routing may have changed since)."""
    throttle_pct: int = 0
    cap_watts: float | None = None
    """The RAPL cap last applied over HTTP; None when none is in force."""


@dataclass(frozen=True)
class Released:
    """What giving back did, what it could not do, and what stays as it is."""

    done: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    """Limits nothing can give back (a RAPL cap over HTTP with no known maximum)."""

    def summary(self) -> str:
        return "; ".join((*self.done, *self.kept)) or "nothing was capped"


def give_back(
    node: str,
    cpufreq: CpufreqHost,
    rapl: RaplHost,
    held: HttpHeld | None,
    maximum: Maximum | None,
    agent: str = httpclient.DEFAULT_USER_AGENT,
) -> Released:
    """Restore the host values, release an HTTP throttle, lift an HTTP RAPL cap."""
    done: list[str] = []
    kept: list[str] = []
    host = cpufreq.holds_originals() or rapl.holds_originals()
    problems = cpufreq.restore() + rapl.restore()
    if host and not problems:
        done.append("host limits restored")
    released, problem = release_throttle(node, held, agent)
    if released:
        done.append("HTTP throttle released")
    if problem is not None:
        problems.append(problem)
    if held is not None and held.cap_watts is not None:
        if maximum is None or maximum.watts is None:
            why = maximum.source if maximum is not None else "no maximum known"
            kept.append(
                f"the HTTP control endpoint keeps the RAPL cap of {held.cap_watts:g} W "
                f"(the protocol cannot remove a cap, and {why})"
            )
        else:
            try:
                answer = cpu_http.post_control(
                    held.endpoint, node, cpu_http.RAPL_ACTION, maximum.watts, -1, agent
                )
            except HttpBackendError as exc:
                problems.append(f"raising the HTTP RAPL cap to the maximum: {exc}")
            else:
                if answer.result is Result.APPLIED:
                    done.append(
                        f"RAPL cap over HTTP raised to the maximum {maximum.watts:g} W "
                        f"({maximum.source})"
                    )
                else:
                    problems.append(
                        f"raising the HTTP RAPL cap to the maximum: {answer.result.value}: "
                        f"{answer.message}"
                    )
    return Released(tuple(done), tuple(problems), tuple(kept))


def release_throttle(
    node: str, held: HttpHeld | None, agent: str = httpclient.DEFAULT_USER_AGENT
) -> tuple[bool, str | None]:
    """Post throttle 0 where a throttle of ours is in force: (released, the problem if any).

    Also what a graceful stop does (``NodeController.restore``): nobody else would,
    and the node would stay throttled with no agent watching it.
    """
    if held is None or held.throttle_pct == 0:
        return False, None
    try:
        cpu_http.post_control(held.endpoint, node, cpu_http.DVFS_ACTION, 0, 0, agent)
    except HttpBackendError as exc:
        return False, f"releasing the HTTP throttle: {exc}"
    return True, None


class CapRelease:
    """A removed cap, released at the second tick without one (module docstring).

    Used for the CPU cap and, with ``what="GPU cap"``, for GPU caps. Not thread
    safe; one per node controller and kind of cap.
    """

    def __init__(self, node: str, what: str = "cap") -> None:
        self.node = node
        self.what = what
        self._pending = False
        self._note: str | None = None
        """What the release did, repeated while the node stays without a cap, so the
        status keeps saying it rather than being rewritten to a bare "nothing to enforce"."""

    def step(self, why: str, holds: bool, release: Callable[[], Released]) -> tuple[Result, str]:
        """A tick with nothing to enforce (``why``); ``holds``: a cap of ours is in force.

        Returns the tick's result and what to add to its "nothing to enforce" message.
        """
        if not holds:
            self._pending = False
            return Result.NONE, f"; {self._note}" if self._note else ""
        if not self._pending:
            self._pending = True
            log.info("node %s: %s; the %s is released at the next tick unless a new desired "
                     "state arrives", self.node, why, self.what)
            return Result.NONE, (
                f"; the last {self.what} is released at the next tick unless a new desired "
                "state arrives"
            )
        released = release()
        if released.problems:
            problems = "; ".join(released.problems)
            log.error("node %s: %s; could not release the %s: %s", self.node, why, self.what,
                      problems)
            return Result.ERROR, f"; could not release the {self.what}: {problems}"
        self._pending = False
        self._note = f"{self.what} released: {released.summary()}"
        log.info("node %s: %s; %s", self.node, why, self._note)
        return Result.NONE, f"; {self._note}"

    def enforcing(self) -> None:
        """A desired state is enforced again: forget the pending release and its note."""
        self._pending = False
        self._note = None
