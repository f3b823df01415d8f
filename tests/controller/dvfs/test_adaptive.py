"""The adaptive DVFS controller's rules, fed scripted readings; numbers worked out by hand."""

from __future__ import annotations

import pytest

from agentpool.config.settings import DvfsSettings
from agentpool.controller.dvfs.adaptive import K_MAX, K_PRIOR, WINDOW, AdaptiveDvfsController
from agentpool.controller.dvfs.joulie import DvfsAction, DvfsController

UP, DOWN = DvfsAction.THROTTLE_UP, DvfsAction.THROTTLE_DOWN
CAP = 120.0  # defaults: target 96% = 115.2 W, hold band 111.0 .. 119.4 W, max step 50


def controller(**overrides: float) -> AdaptiveDvfsController:
    return AdaptiveDvfsController(DvfsSettings(**overrides))  # type: ignore[arg-type]


def test_first_step_goes_where_the_prior_puts_the_target() -> None:
    dvfs = controller()
    # 150 W unthrottled, prior k = 0.005: (1 - 115.2/150) / 0.005 = 46.4 -> 46 %.
    assert dvfs.step(150.0, CAP, 0.0) is UP
    assert dvfs.state.throttle_pct == 46
    assert dvfs.state.anchor == (0, 150.0)


def test_a_step_is_clamped_to_max_step() -> None:
    dvfs = controller()
    assert dvfs.step(200.0, CAP, 0.0) is UP  # the model wants 84.8 %
    assert dvfs.state.throttle_pct == 50
    wider = controller(max_step_pct=100)
    assert wider.step(200.0, CAP, 0.0) is UP
    assert wider.state.throttle_pct == 85


def test_coarse_actuator_levels_are_all_it_commands() -> None:
    dvfs = controller()
    dvfs.set_levels(3)  # three cpufreq policies: 0, 33, 66 or 100 % are distinct
    assert dvfs.step(200.0, CAP, 0.0) is UP  # the model wants 84.8 %, clamped to 50 %
    assert dvfs.state.throttle_pct == 66  # the level at or above 50 %: two policies
    dvfs.set_levels(None)
    fine = controller()
    fine.set_levels(None)
    assert fine.step(200.0, CAP, 0.0) is UP
    assert fine.state.throttle_pct == 50


def test_coarse_actuator_releases_only_to_a_level_that_holds_the_cap() -> None:
    dvfs = controller()
    dvfs.set_levels(4)
    dvfs.step(200.0, CAP, 0.0)  # -> 50 %: two policies of four
    # 100 W is below the band. Secant (200 - 100) / (200 * 50) = 0.01 -> K_MAX: k 0.0074;
    # unthrottled 100 / 0.63 = 158.7 W, so the target needs 37 %: still two policies.
    # Releasing one (25 %) would overshoot the band, so it holds: no hunting.
    assert dvfs.step(100.0, CAP, 1.0) is None
    assert (dvfs.state.throttle_pct, dvfs.state.below) == (50, 1)
    assert dvfs.state.sensitivity == pytest.approx(0.0074)
    # The load falls: 70 W at 50 % means 111 W unthrottled, under the target: all of it goes.
    assert dvfs.step(70.0, CAP, 2.0) is DOWN
    assert dvfs.state.throttle_pct == 0


def test_waits_a_tick_when_still_above_after_throttling_then_learns() -> None:
    dvfs = controller()
    dvfs.step(200.0, CAP, 0.0)  # -> 50 %
    # Still above the band: a lagging response or a step too small; wait and see.
    assert dvfs.step(150.0, CAP, 20.0) is None
    assert (dvfs.state.throttle_pct, dvfs.state.sensitivity) == (50, K_PRIOR)
    # Secant through (0, 200) and (50, 130): k = 70 / 10000 = 0.007, blended 0.6 -> 0.0062.
    # Unthrottled 130 / (1 - 0.31) = 188.4 W: (1 - 115.2/188.4) / 0.0062 = 62.7 -> 63 %.
    assert dvfs.step(130.0, CAP, 40.0) is UP
    assert dvfs.state.sensitivity == pytest.approx(0.0062)
    assert dvfs.state.throttle_pct == 63


def test_no_wait_when_the_change_landed_in_or_past_the_band() -> None:
    dvfs = controller()
    dvfs.step(200.0, CAP, 0.0)  # -> 50 %
    # 90 W is below the band: too much, and lag would only hide more of it. Act now.
    # k: secant (200 - 90) / (200 * 50) = 0.011, clamped to K_MAX 0.009, blended -> 0.0074.
    assert dvfs.step(90.0, CAP, 20.0) is DOWN
    assert dvfs.state.sensitivity == pytest.approx(K_PRIOR + 0.6 * (K_MAX - K_PRIOR))
    # Unthrottled 90 / (1 - 0.37) = 142.857: (1 - 115.2/142.857) / 0.0074 = 26.2 -> 26 %.
    assert dvfs.state.throttle_pct == 26


def test_holds_inside_the_band_and_averages_readings() -> None:
    dvfs = controller()
    readings = [112.0, 119.0, 111.5, 118.5, 115.0, 119.3, 111.1]  # noise inside 111.0 .. 119.4
    assert [dvfs.step(p, CAP, float(t)) for t, p in enumerate(readings)] == [None] * 7
    assert (dvfs.state.throttle_pct, dvfs.state.above, dvfs.state.below) == (0, 0, 0)
    assert list(dvfs.state.recent) == readings[-WINDOW:]
    assert dvfs.state.ema == pytest.approx(sum(readings[-WINDOW:]) / WINDOW)


def test_one_noisy_reading_does_not_move_a_held_throttle() -> None:
    dvfs = controller()
    for t in range(4):
        dvfs.step(116.0, CAP, float(t))
    # 124 W alone is out of band, but the mean of five (117.6) is not.
    assert dvfs.step(124.0, CAP, 5.0) is None
    assert dvfs.state.ema == pytest.approx(117.6)


def test_a_load_step_drops_the_stale_readings() -> None:
    dvfs = controller()
    for t in range(4):
        dvfs.step(116.0, CAP, float(t))
    # 100 W is 16 W from the mean: more than twice the 4.2 W half band, so the load moved.
    assert dvfs.step(100.0, CAP, 5.0) is None  # below the band but throttle is already 0
    assert list(dvfs.state.recent) == [100.0]
    assert dvfs.state.below == 1


def test_release_when_the_load_falls() -> None:
    dvfs = controller()
    dvfs.step(200.0, CAP, 0.0)  # -> 50 %
    dvfs.step(150.0, CAP, 1.0)  # wait
    dvfs.step(130.0, CAP, 2.0)  # -> 63 %, k 0.0062
    dvfs.step(116.0, CAP, 3.0)  # in band; learns k from (50, 130) -> (63, 116)
    k = dvfs.state.sensitivity
    assert k == pytest.approx(0.0062 + 0.6 * (14 / 2390 - 0.0062))
    # The load halves: the model's unthrottled power falls below the target, so the
    # throttle goes down by the largest step, and on to 0 without waiting (far below).
    assert dvfs.step(60.0, CAP, 4.0) is DOWN
    assert dvfs.state.throttle_pct == 13
    assert dvfs.step(75.0, CAP, 5.0) is DOWN
    assert dvfs.state.throttle_pct == 0
    assert dvfs.step(80.0, CAP, 6.0) is None  # nothing left to give back


def test_pinned_at_full_throttle_reports_no_action() -> None:
    dvfs = controller(max_step_pct=100)
    assert dvfs.step(1000.0, CAP, 0.0) is UP
    assert dvfs.state.throttle_pct == 100
    assert dvfs.step(900.0, CAP, 1.0) is None  # wait (still above)
    assert dvfs.step(900.0, CAP, 2.0) is None  # cannot go higher
    assert dvfs.state.above == 2  # but it says it is above, for metrics and status


def test_a_zero_reading_releases_instead_of_dividing_by_zero() -> None:
    # Regression: an energy counter that did not move reads 0 W; the model's unthrottled
    # power was then 0 and the target / 0 crashed the worker.
    dvfs = controller()
    assert dvfs.step(0.0, CAP, 0.0) is None  # below the band at throttle 0: nothing to do
    dvfs.step(200.0, CAP, 1.0)  # -> 50 %
    assert dvfs.step(0.0, CAP, 2.0) is DOWN
    assert dvfs.state.throttle_pct == 0


def test_no_reading_holds_everything() -> None:
    dvfs = controller()
    dvfs.step(200.0, CAP, 0.0)
    before = (dvfs.state.throttle_pct, dvfs.state.since_change, list(dvfs.state.recent))
    assert dvfs.step(None, CAP, 1.0) is None
    assert (dvfs.state.throttle_pct, dvfs.state.since_change, list(dvfs.state.recent)) == before


def test_reset_forgets_what_was_learnt() -> None:
    dvfs = controller()
    dvfs.step(200.0, CAP, 0.0)
    dvfs.step(90.0, CAP, 1.0)
    dvfs.reset()
    assert (dvfs.state.throttle_pct, dvfs.state.sensitivity, dvfs.state.anchor) == (
        0,
        K_PRIOR,
        None,
    )


def test_status_bands_of_both_controllers() -> None:
    assert controller().band(CAP) == pytest.approx((108.0, 123.6))  # 0.90 .. 1.03 x cap
    # A hold band wider than that widens what counts as held.
    assert controller(target_pct=90, hold_band_pct=15).band(100.0) == pytest.approx((75.0, 105.0))
    assert DvfsController(DvfsSettings()).band(CAP) == (105.0, 130.0)  # cap - 15, cap + 10


def test_settles_on_a_linear_node_and_then_stays_put() -> None:
    # A node like the power simulator's: 60 W idle + 150 W dynamic, 70% of it throttleable.
    def power(throttle: int) -> float:
        return 60.0 + 150.0 * (1 - 0.007 * throttle)

    dvfs = controller()
    throttles = []
    for t in range(30):
        dvfs.step(power(dvfs.state.throttle_pct), CAP, float(t))
        throttles.append(dvfs.state.throttle_pct)
    # 210 W -> 50 % (prior, clamped); 157.5 W still above: wait. The secant through
    # (0, 210) and (50, 157.5) is k = 0.005: (1 - 115.2/210) / 0.005 = 90.3 -> 90 %,
    # which draws 115.5 W, and the throttle holds there.
    assert throttles[:4] == [50, 50, 90, 90]
    assert set(throttles[3:]) == {90}
    assert power(90) == pytest.approx(115.5)


def test_readings_near_the_float_maximum_keep_the_estimate_finite() -> None:
    # The shrunk example of tests/properties/test_host.py: the mean of these two summed to
    # infinity, and an infinite estimate made the status unwritable (JSON has no Infinity).
    dvfs = controller()
    for reading in (8.988465674311579e307, 8.98846567431158e307):
        dvfs.step(reading, 1e308, 0.0)
    assert dvfs.state.ema == pytest.approx(8.98846567431158e307)


def test_three_readings_at_the_float_maximum_keep_the_estimate_finite() -> None:
    # Shrunk by the campaign (round 2): a third of each summed rounded past the maximum.
    dvfs = controller()
    for _ in range(3):
        dvfs.step(1.7976931348623157e308, 1e308, 0.0)
    assert dvfs.state.ema == 1.7976931348623157e308
