"""The DVFS fallback state machine (controller/dvfs/joulie.py), fed scripted power sequences."""

from __future__ import annotations

import pytest

from agentpool.config.settings import DvfsSettings
from agentpool.controller.dvfs.joulie import DvfsAction, DvfsController, DvfsState

UP, DOWN = DvfsAction.THROTTLE_UP, DvfsAction.THROTTLE_DOWN
CAP = 100.0  # upper = 110 (high margin 10), lower = 85 (low margin 15)

# One tick every 10 s; cooldown 20 s. Columns: t, observed, then what the step must
# leave behind: action, throttle, above, below, ema. alpha 0.5 keeps every EMA exact.
SCRIPT: list[tuple[float, float | None, DvfsAction | None, int, int, int, float | None]] = [
    (0, None, None, 0, 0, 0, None),  # no reading yet: nothing at all
    (10, 200, None, 0, 1, 0, 200.0),  # the first reading initialises the EMA
    (20, 200, UP, 10, 0, 0, 200.0),  # second "above": act, reset the count, cool down to 40
    (30, 100, None, 10, 0, 0, 150.0),  # cooldown: the EMA moves, nothing is counted
    (40, 100, None, 10, 1, 0, 125.0),  # cooldown over (40 is not < 40): above again
    (50, None, None, 10, 1, 0, 125.0),  # no reading: hold, EMA and counts included
    (60, 100, UP, 20, 0, 0, 112.5),  # still above 110: second step, cooldown to 80
    (70, 60, None, 20, 0, 0, 86.25),
    (80, 60, None, 20, 0, 1, 73.125),  # below 85
    (90, 100, None, 20, 0, 0, 86.5625),  # in between: both counts zeroed
    (100, 60, None, 20, 0, 1, 73.28125),
    (110, 60, DOWN, 10, 0, 0, 66.640625),  # second "below": step down, cooldown to 130
    (120, 60, None, 10, 0, 0, 63.3203125),
    (130, 60, None, 10, 0, 1, 61.66015625),
    (140, 60, DOWN, 0, 0, 0, 60.830078125),
    (160, 60, None, 0, 0, 1, 60.4150390625),
    # At 0 a trip still resets the count and starts a cooldown, but there is nothing to give.
    (170, 60, None, 0, 0, 0, 60.20751953125),
    (180, 160, None, 0, 0, 0, 110.103759765625),  # cooldown (until 190)
    (190, 160, None, 0, 1, 0, 135.0518798828125),  # above
    (200, 110, UP, 10, 0, 0, 122.52593994140625),  # EMA lags: still above 110, step up
]


def controller(**overrides: float) -> DvfsController:
    settings = DvfsSettings(
        ema_alpha=0.5, high_margin_w=10, low_margin_w=15, trip_count=2, cooldown_s=20, step_pct=10
    )
    return DvfsController(DvfsSettings(**{**settings.__dict__, **overrides}))


def test_scripted_trajectory() -> None:
    dvfs = controller()
    for t, observed, action, throttle, above, below, ema in SCRIPT:
        got = dvfs.step(observed, CAP, float(t))
        s = dvfs.state
        assert (got, s.throttle_pct, s.above, s.below, s.ema) == (
            action,
            throttle,
            above,
            below,
            ema,
        ), f"t={t}"
        if observed is not None:
            assert s.observed == observed


def test_default_tunables_and_alpha_0_3() -> None:
    # The contract defaults: alpha 0.30, margins 10/15, trip 2, cooldown 20 s, step 10.
    dvfs = DvfsController(DvfsSettings())
    assert dvfs.step(150.0, 120.0, 0.0) is None
    assert dvfs.state.ema == 150.0
    assert dvfs.state.above == 1  # 150 > 120 + 10
    # 0.3 * 100 + 0.7 * 150 = 135, still above 130: the second "above" steps up by 10.
    assert dvfs.step(100.0, 120.0, 20.0) is UP
    assert dvfs.state.ema == pytest.approx(135.0)
    assert dvfs.state.throttle_pct == 10
    assert dvfs.state.cooldown_until == 40.0  # now + 20 s
    assert dvfs.step(10.0, 120.0, 39.9) is None  # cooling down: not even counted
    assert (dvfs.state.above, dvfs.state.below) == (0, 0)


def test_throttle_saturates_at_100_and_floors_at_0() -> None:
    dvfs = controller(ema_alpha=1.0, step_pct=30, cooldown_s=0, trip_count=1)
    ups = [dvfs.step(500.0, CAP, float(t)) for t in range(6)]
    assert ups == [UP, UP, UP, UP, None, None]
    assert dvfs.state.throttle_pct == 100  # 30, 60, 90, then 100, not 120
    downs = [dvfs.step(0.0, CAP, float(t)) for t in range(10, 16)]
    assert downs == [DOWN, DOWN, DOWN, DOWN, None, None]
    assert dvfs.state.throttle_pct == 0  # 70, 40, 10, 0, not -20


def test_boundaries_are_strict() -> None:
    dvfs = controller(ema_alpha=1.0, trip_count=1)
    assert dvfs.step(110.0, CAP, 0.0) is None  # == upper is not above
    assert dvfs.step(85.0, CAP, 1.0) is None  # == lower is not below
    assert (dvfs.state.above, dvfs.state.below) == (0, 0)
    assert dvfs.step(110.001, CAP, 2.0) is UP


def test_above_and_below_reset_each_other() -> None:
    dvfs = controller(ema_alpha=1.0, trip_count=3)
    for t, watts in enumerate([200, 200, 10, 200, 200, 10, 10]):
        assert dvfs.step(float(watts), CAP, float(t)) is None
    assert (dvfs.state.above, dvfs.state.below) == (0, 2)
    assert dvfs.step(10.0, CAP, 7.0) is None  # below #3 at throttle 0: nothing to give back
    assert dvfs.state.below == 0


def test_cap_change_moves_the_band() -> None:
    dvfs = controller(ema_alpha=1.0)
    assert dvfs.step(150.0, 200.0, 0.0) is None  # in band for a 200 W cap
    assert dvfs.step(150.0, 120.0, 1.0) is None  # above 130 for a 120 W cap: #1
    assert dvfs.step(150.0, 120.0, 2.0) is UP


def test_reset_forgets_everything() -> None:
    dvfs = controller(ema_alpha=1.0, trip_count=1)
    dvfs.step(500.0, CAP, 0.0)
    assert dvfs.state.throttle_pct == 10
    dvfs.reset()
    assert dvfs.state == DvfsState()
    assert dvfs.step(500.0, CAP, 1.0) is UP  # no cooldown left over

