"""DVFS as the fallback of one node: step the throttle by the power read, apply it, say so.

The node controller hands over here when RAPL cannot hold the cap. The
state machine (Joulie's or the adaptive one, :mod:`agentpool.controller.dvfs`)
decides the throttle; the node's CPU strategy applies it (cpufreq policies
on the host, a throttle posted to the control endpoint); this module owns
the sequence, the ``joulie_dvfs_*`` metrics of it and the wording of the
status, honest about a cap not held and stable while nothing changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from agentpool.config.settings import DvfsSettings
from agentpool.controller.dvfs.throttle import make_controller
from agentpool.controller.metrics import NodeMetrics
from agentpool.errors import HttpBackendError
from agentpool.results import Backend, Result, TickResult

log = logging.getLogger(__name__)


class Throttler(Protocol):
    """How a throttle reaches the node (the CPU strategy's side of DVFS)."""

    def dvfs_levels(self) -> int | None:
        """How many throttle levels there are (None: any percentage)."""
        ...

    def throttle(self, cap: float, pct: int, observed: dict[str, Any]) -> tuple[Result, str]:
        """Apply a throttle; (result, message when refused)."""
        ...


class DvfsFallback:
    """One node's DVFS fallback. Not thread safe; one per node controller."""

    def __init__(
        self, node: str, settings: DvfsSettings, metrics: NodeMetrics, clock: Callable[[], float]
    ) -> None:
        self.node = node
        self.metrics = metrics
        self.clock = clock
        self.controller = make_controller(settings)
        self._over_message: tuple[tuple[float, int, str], str] | None = None
        """(cap, throttle, reason) and the message of a hold above the band."""

    @property
    def throttling(self) -> bool:
        return self.controller.state.throttle_pct > 0

    def reset(self) -> None:
        """Another control holds the node now: a later DVFS episode starts afresh."""
        self.controller.reset()

    def episode_over(self) -> None:
        """The node left DVFS: a later episode starts its own message."""
        self._over_message = None

    def tick(
        self,
        cap: float,
        read_power: Callable[[], float | None],
        control: Throttler,
        observed: dict[str, Any],
        reason: str,
        shown: str | None = None,
    ) -> TickResult:
        """One step toward ``cap``; ``reason`` says why DVFS and not RAPL, ``shown`` how the
        messages write the cap (default ``cap`` W)."""
        self.metrics.set_backend(Backend.DVFS)
        try:
            power = read_power()
        except HttpBackendError as exc:
            self._export(cap)
            return TickResult(Backend.DVFS, Result.ERROR, f"telemetry: {exc}", observed)
        dvfs = self.controller
        before = dvfs.state.throttle_pct
        dvfs.set_levels(control.dvfs_levels())
        action = dvfs.step(power, cap, self.clock())
        state = dvfs.state
        if action is not None:
            self.metrics.count_action(action.value)
            log.info(
                "node %s: DVFS %s to %d%% (ema %.1f W, cap %g W)",
                self.node,
                action.value,
                state.throttle_pct,
                state.ema or 0.0,
                cap,
            )
        result, message = control.throttle(cap, state.throttle_pct, observed)
        self._export(cap)
        observed.update(
            {
                "throttlePct": state.throttle_pct,
                "observedPowerWatts": None if state.observed is None else round(state.observed, 3),
                "emaPowerWatts": None if state.ema is None else round(state.ema, 3),
            }
        )
        summary = self._summary(cap, before, reason, shown or f"{cap:g} W")
        if message and result is not Result.APPLIED:
            summary = f"{message}; {summary}"
        return TickResult(Backend.DVFS, result, summary, observed)

    def _summary(self, cap: float, before: int, reason: str, shown: str) -> str:
        """The status message: honest about a cap not held, stable while nothing changes.

        Inside the controller's band the message names no power (that goes in
        ``observed``) and so stays the same tick after tick: the supervisor
        writes the status only when the message changes. Above the band it
        says by how much; while the throttle then holds (pinned at 100 %, or
        waiting for a lagging node) it keeps the watts of the first such tick,
        so a node that cannot get under its cap rewrites its status once, not
        every tick. Below the band it speaks only of a release that happened.
        """
        s = self.controller.state
        low, high = self.controller.band(cap)
        held = before == s.throttle_pct
        move = f"holding {before}%" if held else f"{before}% -> {s.throttle_pct}%"
        if s.ema is not None and s.ema > high:
            key = (cap, s.throttle_pct, reason)
            if held and self._over_message is not None and self._over_message[0] == key:
                return self._over_message[1]
            message = f"throttling: {s.ema:.0f} W > cap {shown}, {move}; {reason}"
            self._over_message = (key, message) if held else None
            return message
        self._over_message = None
        if s.ema is not None and s.ema < low and not held:
            return f"releasing: {s.ema:.0f} W, under cap {shown}, {move}; {reason}"
        return f"DVFS throttle {s.throttle_pct}% for cap {shown}; {reason}"

    def _export(self, cap: float) -> None:
        s = self.controller.state
        self.metrics.set_dvfs(s.observed, s.ema, s.throttle_pct, s.above, s.below)
        self.metrics.set_cap_error(None if s.ema is None else s.ema - cap)
