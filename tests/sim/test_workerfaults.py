"""Deliberate worker faults and the memory probe: the worker hooks of the simulation kit."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentpool.sim import memprobe, workerfaults
from agentpool.sim.workerfaults import InjectedFault


def tick() -> str:
    return "ticked"


def test_a_node_without_faults_keeps_its_tick() -> None:
    assert workerfaults.faults("")("a") is None
    assert workerfaults.faults("raise-in-tick:b,hang-in-tick:c")("a") is None


def test_faults_apply_to_their_node_only() -> None:
    hook = workerfaults.faults("raise-in-tick:b, crash-at-start:c")
    assert workerfaults.parse("raise-in-tick:b, crash-at-start:c")["b"] == {"raise-in-tick"}
    wrap = hook("b")
    assert wrap is not None
    faulty = wrap(tick)
    with pytest.raises(InjectedFault, match="raise-in-tick"):
        faulty()
    crashing = hook("c")
    assert crashing is not None
    with pytest.raises(InjectedFault, match="crash-at-start"):
        crashing(tick)


def test_unknown_kinds_are_refused_loudly() -> None:
    with pytest.raises(ValueError, match="unknown fault 'explode'"):
        workerfaults.faults("explode:a")


def test_the_environment_names_the_hook_and_its_faults() -> None:
    assert workerfaults.env("idle:n1,idle:n2") == {
        "AGENTPOOL_WORKER_HOOK": "agentpool.sim.workerfaults:faults=idle:n1,idle:n2"}


def test_the_probe_records_each_stage_of_a_worker(tmp_path: Path) -> None:
    wrap = memprobe.probe(str(tmp_path))("node/1")
    probed = wrap(tick)
    for _ in range(10):
        assert probed() == "ticked"
    lines = (tmp_path / "node_1").read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["fork", "setup", "tick1", "tick2", "tick10"]
    assert all("pss=" in line and "uss=" in line for line in lines)


def test_the_probe_needs_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        memprobe.probe(str(tmp_path / "missing"))
