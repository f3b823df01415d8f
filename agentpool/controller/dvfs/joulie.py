"""Joulie's DVFS fallback controller: EMA, hysteresis, trip count and cooldown.

Pure state machine, no I/O: it is fed one power reading per tick (or None)
and answers whether to step the throttle. Keeping it pure lets a test script
a power sequence and check the exact trajectory.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from agentpool.config.settings import DvfsSettings


class DvfsAction(enum.StrEnum):
    THROTTLE_UP = "throttle_up"
    """Power stayed above cap + high margin: lower the frequency ceiling."""
    THROTTLE_DOWN = "throttle_down"
    """Power stayed below cap - low margin: give frequency back."""


@dataclass
class DvfsState:
    observed: float | None = None
    ema: float | None = None
    above: int = 0
    below: int = 0
    throttle_pct: int = 0
    cooldown_until: float = float("-inf")


class DvfsController:
    """One node's DVFS state, kept across ticks. Not thread safe."""

    def __init__(self, settings: DvfsSettings) -> None:
        self.settings = settings
        self.state = DvfsState()

    def band(self, cap_watts: float) -> tuple[float, float]:
        """Power outside this range means the cap is not held (what the status reports)."""
        return cap_watts - self.settings.low_margin_w, cap_watts + self.settings.high_margin_w

    def step(self, observed: float | None, cap_watts: float, now: float) -> DvfsAction | None:
        """Feed one reading taken at ``now`` (monotonic seconds); maybe act."""
        s, cfg = self.state, self.settings
        if observed is None:
            return None  # no reading: hold everything, including the EMA
        s.observed = observed
        ema = observed if s.ema is None else cfg.ema_alpha * observed + (1 - cfg.ema_alpha) * s.ema
        # Two readings near the float maximum sum past it: an infinite EMA would poison every
        # later tick and make the status unwritable, so the newest reading stands in for it.
        s.ema = ema if math.isfinite(ema) else observed
        if now < s.cooldown_until:
            return None  # let the last step take effect before judging again
        upper = cap_watts + cfg.high_margin_w
        lower = cap_watts - cfg.low_margin_w
        if s.ema > upper:
            s.above += 1
            s.below = 0
        elif s.ema < lower:
            s.below += 1
            s.above = 0
        else:
            s.above = s.below = 0
        if s.above >= cfg.trip_count:
            s.above = 0
            s.cooldown_until = now + cfg.cooldown_s
            before, s.throttle_pct = s.throttle_pct, min(100, s.throttle_pct + cfg.step_pct)
            return DvfsAction.THROTTLE_UP if s.throttle_pct != before else None
        if s.below >= cfg.trip_count:
            s.below = 0
            s.cooldown_until = now + cfg.cooldown_s
            before, s.throttle_pct = s.throttle_pct, max(0, s.throttle_pct - cfg.step_pct)
            return DvfsAction.THROTTLE_DOWN if s.throttle_pct != before else None
        return None

    def set_levels(self, levels: int | None) -> None:
        """Ignored: Joulie's steps are fixed, whatever the actuator's resolution."""

    def reset(self) -> None:
        """Forget everything (RAPL took over, or the cap went away)."""
        self.state = DvfsState()
