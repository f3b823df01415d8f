"""Deliberate worker faults (a test and demo hook): resolved once, free when unused."""

from __future__ import annotations

import pytest

from agentpool.worker.faults import InjectedFault, faults_for, tick_with_faults


def tick() -> str:
    return "ticked"


def test_a_node_without_faults_ticks_its_controller_directly() -> None:
    assert tick_with_faults("a", tick, raw="") is tick
    assert tick_with_faults("a", tick, raw="raise-in-tick:b,hang-in-tick:c") is tick


def test_faults_apply_to_their_node_only() -> None:
    assert faults_for("b", "raise-in-tick:b, crash-at-start:c") == {"raise-in-tick"}
    faulty = tick_with_faults("b", tick, raw="raise-in-tick:b")
    with pytest.raises(InjectedFault, match="raise-in-tick"):
        faulty()
    with pytest.raises(InjectedFault, match="crash-at-start"):
        tick_with_faults("c", tick, raw="crash-at-start:c")


def test_unknown_kinds_are_refused_loudly() -> None:
    with pytest.raises(ValueError, match="unknown fault 'explode'"):
        faults_for("a", "explode:a")
