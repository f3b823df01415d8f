"""The wording of stale desired state (SPEC_READ_TIMEOUT): each case says what was done."""

from __future__ import annotations

from agentpool.controller import stale
from agentpool.controller.release import Released
from agentpool.results import Backend, Result, TickResult

WHY = "desired state not confirmed from the API for 5m (watches failing)"


def test_why_names_the_timeout_as_configured() -> None:
    assert stale.why(300) == WHY
    assert stale.why(90) == "desired state not confirmed from the API for 90s (watches failing)"


def test_keep_goes_on_enforcing_and_says_so() -> None:
    enforced = TickResult(Backend.RAPL, Result.APPLIED, "RAPL PL1 120 W", {"capWatts": 120})
    kept = stale.kept(enforced, 300)
    assert (kept.backend, kept.result, kept.observed) == (
        Backend.RAPL, Result.APPLIED, {"capWatts": 120}
    )
    assert kept.message == f"{WHY}; SPEC_STALE_ACTION=keep: RAPL PL1 120 W"
    again = stale.confirmed_again(enforced)
    assert again.message == "desired state confirmed again after a stale period: RAPL PL1 120 W"


def test_relaxing_says_whether_every_value_came_back() -> None:
    relaxed = stale.relax(Released(("host limits restored",)), 300)
    assert (relaxed.backend, relaxed.result) == (Backend.NONE, Result.NONE)
    assert relaxed.message == (
        f"{WHY}; SPEC_STALE_ACTION=relax: host limits restored, throttle released"
    )
    failed = stale.relax(
        Released(problems=("intel-rapl:0: EPERM", "releasing the HTTP throttle: 503")), 300
    )
    assert failed.result is Result.ERROR
    assert failed.message == (
        f"{WHY}; could not relax: intel-rapl:0: EPERM; releasing the HTTP throttle: 503"
    )
    simulated = stale.relaxed_simulated(300)
    assert simulated.message == f"{WHY}; SPEC_STALE_ACTION=relax: simulate-only, nothing written"
