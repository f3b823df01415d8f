"""The adaptive DVFS controller: learn how power answers the throttle, then step by that.

Pure state machine, no I/O, like :mod:`agentpool.controller.dvfs.joulie`: fed one
power reading per tick (or None), it answers whether the throttle changed.
It counts ticks, not seconds, so its tunables need no rescaling when the
reconcile interval changes.

The plant model it assumes, at a given load::

    power(u) = P0 * (1 - k * u)          u: throttle in percent, 0..100

``P0`` is the unthrottled power (it moves with the load) and ``k`` the
*relative* sensitivity (share of the power one percent of throttle removes).
Keeping ``k`` relative is what makes a learnt value survive load changes: when
the load halves, so does the slope in watts, and the next step is still right.
Each tick the controller:

1. keeps the readings taken since the throttle last changed (at most
   :data:`WINDOW`) and estimates the power as their mean, so noise averages
   out while it holds; a reading far from the others (a load step) drops them;
2. waits one tick when the first reading after a change still lies beyond the
   band on the side the change came from: the node or its power sensor may
   lag, and stepping again at once would correct twice for one error;
3. on the first reading it judges after a change, re-estimates ``k`` from the
   power before the change and the estimate since: a secant of the model,
   clamped to [:data:`K_MIN`, :data:`K_MAX`] and blended with what it knew
   (weight :data:`LEARN_WEIGHT`), so one noisy or lagging pair cannot throw it
   far; a change that moved power less than the noise teaches nothing;
4. holds while the estimate is within ``target +- hold band`` (hysteresis:
   noise and slow drift inside the band cause no change), and otherwise moves
   the throttle to where the model puts the target, at most ``max_step``
   percent at once. When the load drops below what the cap needs, the model
   puts the target at a negative throttle, so the throttle is released in one
   or two steps instead of percent by percent.

Where the actuator is coarse (a host with a few cpufreq policies) it moves
only between the throttles the actuator can realise, and releases only to a
level the model says still holds the cap, so it cannot hunt between two levels
that straddle the band.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from agentpool.config.settings import DvfsSettings
from agentpool.controller.dvfs.joulie import DvfsAction

WINDOW = 5
"""Readings averaged while the throttle holds: +-3% noise becomes about +-0.8% (1 sd)."""
K_PRIOR = 0.005
"""Before anything is learnt: full throttle halves the package power."""
K_MIN, K_MAX = 0.001, 0.009
"""Full throttle removes at least 10% and at most 90% of the power (``k`` bounds)."""
LEARN_WEIGHT = 0.6
"""Share of a new secant estimate in ``k``; the rest is what was known before the change."""
MIN_LEARN_CHANGE = 0.02
"""A change that moved power by less than this share is lost in noise: nothing to learn."""
TOLERANCE = (0.90, 1.03)
"""Band, as fractions of the cap, outside which the status says the cap is not held."""


@dataclass
class AdaptiveState:
    """What the adaptive controller knows; the field names match Joulie's state where shared."""

    observed: float | None = None
    """The last reading."""
    ema: float | None = None
    """The power estimate: mean of the readings since the throttle last changed."""
    above: int = 0
    """Consecutive ticks whose estimate was above the hold band."""
    below: int = 0
    """Consecutive ticks whose estimate was below it."""
    throttle_pct: int = 0
    sensitivity: float = K_PRIOR
    """``k``: share of the power that one percent of throttle removes."""
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    """Readings since the last throttle change (newest last)."""
    anchor: tuple[int, float] | None = None
    """(throttle, estimated power) just before the last change, until a secant used it."""
    since_change: int = 0
    """Readings taken since the throttle last changed."""


def _mean(values: deque[float]) -> float:
    """Their mean, finite for any finite readings (a plain sum of two near the float
    maximum overflows to infinity, and an infinite estimate would poison every later tick)."""
    total = sum(values)
    if math.isfinite(total):
        return total / len(values)
    # A mean lies between the smallest and the largest value; summing shares can still round
    # past the float maximum (three readings at it), so the result is held in that range.
    shares = sum(v / len(values) for v in values)
    return max(min(values), min(max(values), shares))


class AdaptiveDvfsController:
    """One node's adaptive DVFS state, kept across ticks. Not thread safe."""

    def __init__(self, settings: DvfsSettings) -> None:
        self.settings = settings
        self.state = AdaptiveState()
        self.levels: int | None = None
        """Distinct throttle steps the actuator realises; None for any percentage."""

    def band(self, cap_watts: float) -> tuple[float, float]:
        """Power outside this range means the cap is not held (what the status reports)."""
        hold_low, hold_high = self._hold(cap_watts)
        return min(TOLERANCE[0] * cap_watts, hold_low), max(TOLERANCE[1] * cap_watts, hold_high)

    def _hold(self, cap_watts: float) -> tuple[float, float]:
        cfg = self.settings
        return (
            cap_watts * (cfg.target_pct - cfg.hold_band_pct) / 100.0,
            cap_watts * (cfg.target_pct + cfg.hold_band_pct) / 100.0,
        )

    def step(self, observed: float | None, cap_watts: float, now: float) -> DvfsAction | None:
        """Feed one reading (``now`` is unused: this controller counts ticks); maybe act."""
        s = self.state
        if observed is None:
            return None  # no reading: hold, and learn nothing
        s.observed = observed
        s.since_change += 1
        if s.since_change == 1 and self._lagging(observed, cap_watts):
            # Part of the last change's effect is still to come: judging now would
            # step again for what is already under way. Wait one tick, and do not
            # average this transient reading with the settled ones that follow.
            s.ema = observed
            s.recent.clear()
            return None
        self._remember(observed, cap_watts)
        s.ema = _mean(s.recent)
        if s.anchor is not None:
            self._learn(s.ema)
            s.anchor = None  # one secant per change
        low, high = self._hold(cap_watts)
        if low <= s.ema <= high:
            s.above = s.below = 0
            return None
        if s.ema > high:
            s.above, s.below = s.above + 1, 0
        else:
            s.above, s.below = 0, s.below + 1
        return self._move(self._wanted(s.ema, cap_watts))

    def _lagging(self, power: float, cap_watts: float) -> bool:
        """Whether the first reading after a change may not show all of its effect yet.

        Still beyond the band on the side the change came from means either a
        step too small or a response still under way (power sensors and the
        node lag); stepping again at once would correct twice for one error.
        Landing in the band, or beyond it on the other side, needs no wait:
        lag only ever hides part of a change. Neither does a release that left
        power far below the band (the load fell): performance comes first.
        """
        s = self.state
        if s.anchor is None:
            return False
        low, high = self._hold(cap_watts)
        if s.throttle_pct > s.anchor[0]:
            return power > high
        # Far below the band the load has fallen: release on, whatever is still to come.
        return low - (high - low) < power < low

    def _remember(self, reading: float, cap_watts: float) -> None:
        recent = self.state.recent
        if recent:
            mean = _mean(recent)
            # Noise of +-3% keeps two readings within ~6% of each other; a bigger jump
            # than twice the hold band is the load moving: the older readings are stale.
            if abs(reading - mean) > 2 * self.settings.hold_band_pct / 100.0 * cap_watts:
                recent.clear()
                self.state.anchor = None  # a secant across a load step would be wrong
        recent.append(reading)

    def _learn(self, power: float) -> None:
        s = self.state
        assert s.anchor is not None
        u0, p0 = s.anchor
        u1 = s.throttle_pct
        if abs(p0 - power) < MIN_LEARN_CHANGE * max(p0, power):
            return
        # power = P0 * (1 - k*u) through (u0, p0) and (u1, power), solved for k.
        denominator = p0 * u1 - power * u0
        if denominator == 0:
            return
        secant = min(K_MAX, max(K_MIN, (p0 - power) / denominator))
        s.sensitivity += LEARN_WEIGHT * (secant - s.sensitivity)

    def _wanted(self, power: float, cap_watts: float) -> float:
        """The throttle at which the model puts the target power."""
        s = self.state
        k = s.sensitivity
        unthrottled = power / (1.0 - k * s.throttle_pct)
        if unthrottled <= 0.0:
            # A counter that did not move (or a meter that reads 0 W): nothing draws
            # power, nothing to hold back.
            return -100.0
        target = cap_watts * self.settings.target_pct / 100.0
        return (1.0 - target / unthrottled) / k

    def _move(self, wanted: float) -> DvfsAction | None:
        s = self.state
        limit = self.settings.max_step_pct
        delta = max(-limit, min(limit, wanted - s.throttle_pct))
        # At least one percent in the needed direction: out of band means move.
        change = round(delta) or (1 if delta > 0 else -1)
        new = self._snap(max(0, min(100, s.throttle_pct + change)), up=change > 0)
        if new == s.throttle_pct:
            return None  # pinned at 0 or 100, or no coarser level to release to
        assert s.ema is not None
        s.anchor = (s.throttle_pct, s.ema)
        s.since_change = 0
        s.recent.clear()
        action = DvfsAction.THROTTLE_UP if new > s.throttle_pct else DvfsAction.THROTTLE_DOWN
        s.throttle_pct = new
        return action

    def _snap(self, pct: int, up: bool) -> int:
        """``pct`` moved onto a throttle the actuator can realise (see :meth:`set_levels`).

        Always the level at or above ``pct``: going up, that keeps power at or
        under the target; going down, it releases only as far as the model says
        the cap still holds, and if that is where the throttle already is, it
        stays: hunting between two levels that straddle the band is the limit
        cycle this avoids.
        """
        n = self.levels
        if n is None or n >= 100:
            return pct  # a 1% step is as fine as the actuator goes anyway
        level = math.ceil(pct * n / 100)
        if up:
            level = min(n, max(level, math.ceil(self.state.throttle_pct * n / 100) + 1))
        return 100 * level // n

    def set_levels(self, levels: int | None) -> None:
        """The actuator realises only ``levels`` equal steps (None: any percentage).

        Host cpufreq throttles whole policies: with ``n`` of them a throttle of
        ``p`` % caps ``ceil(n * p / 100)``, so only ``100 * j // n`` are distinct.
        """
        self.levels = levels if levels and levels > 0 else None

    def reset(self) -> None:
        """Forget everything (RAPL took over, or the cap went away)."""
        self.state = AdaptiveState()
