"""SPEC_READ_TIMEOUT counts from the API's last confirmation of the desired state, on a fake
clock: not from when the loop noticed the watch failing (a silent watch fails only at its
read deadline, a minute or more after its last byte)."""

from __future__ import annotations

from tests.support.fakeworkers import Loop

TIMEOUT_S = 300.0


def test_the_desired_state_goes_stale_its_timeout_after_it_was_last_confirmed() -> None:
    confirmed: list[float | None] = [None]  # None: its watch works

    def confirmed_at(now: float) -> float:
        return now if confirmed[0] is None else confirmed[0]

    with Loop(loop_period_s=1.0, spec_read_timeout_s=TIMEOUT_S,
              spec_confirmed_at=confirmed_at) as loop:
        for _ in range(3 * int(TIMEOUT_S)):  # a working watch never goes stale
            loop.turn(1.0)
        assert not loop.supervisor.view.spec_stale
        # Its watch hears nothing from now on, and fails at its read deadline, 70 s later.
        confirmed[0] = loop.clock.now
        for _ in range(70):
            loop.turn(1.0)
        assert not loop.supervisor.view.spec_stale
        while loop.clock.now - confirmed[0] <= TIMEOUT_S - 1.0:
            loop.turn(1.0)
            assert not loop.supervisor.view.spec_stale
        loop.turn(1.0)
        loop.turn(1.0)
        assert loop.supervisor.view.spec_stale  # 5 minutes after the last byte, not 6m10s
        confirmed[0] = None  # the watch works again
        loop.turn(1.0)
        loop.turn(1.0)
        assert not loop.supervisor.view.spec_stale
