"""cpufreq host backend: per-policy throttling on trees with shared and per-CPU policies."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentpool.backends.sysfs.cpufreq import CpufreqHost, FreqReading, discover_policies
from agentpool.backends.sysfs.files import Originals
from agentpool.errors import SysfsError
from agentpool.sim.sysfs.trees import CpufreqSpec, SysfsTree, build, no_rapl, write_value
from tests.support.sysfs import changes, lock, snapshot

POLICIES = "devices/system/cpu/cpufreq"
MAX_KHZ = 3_500_000
MIN_KHZ = 800_000
THROTTLED = 1_500_000  # DVFS_MIN_FREQ_KHZ default, inside [800 MHz, 3.5 GHz]


def smax(index: int) -> str:
    return f"{POLICIES}/policy{index}/scaling_max_freq"


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[SysfsTree]:
    """8 CPUs, SMT siblings sharing a policy: policy0..3 govern (0,4) (1,5) (2,6) (3,7)."""
    with no_rapl(tmp_path / "sys") as tree:
        yield tree


def test_policies_are_deduplicated_and_carry_their_cpus(shared: SysfsTree) -> None:
    # Every cpuY/cpufreq is a link to one of four policies: four units, not eight.
    found = discover_policies(shared.root)
    assert [(p.index, p.cpus) for p in found] == [
        (0, (0, 4)),
        (1, (1, 5)),
        (2, (2, 6)),
        (3, (3, 7)),
    ]
    assert [(p.cpuinfo_min, p.cpuinfo_max) for p in found] == [(MIN_KHZ, MAX_KHZ)] * 4


@pytest.mark.parametrize(
    ("pct", "throttled"),
    [(0, 0), (1, 1), (10, 1), (25, 1), (26, 2), (50, 2), (51, 3), (75, 3), (99, 4), (100, 4)],
)
def test_first_ceil_count_pct_policies_are_throttled(
    shared: SysfsTree, pct: int, throttled: int
) -> None:
    before = snapshot(shared.root)
    host = CpufreqHost(shared.root, Originals(), THROTTLED)
    result = host.apply(pct)
    assert result == {f"policy{i}": THROTTLED if i < throttled else MAX_KHZ for i in range(4)}
    assert changes(before, snapshot(shared.root)) == {
        smax(i): f"{THROTTLED}\n" for i in range(throttled)
    }


def test_trajectory_up_and_down_then_zero_restores_every_policy(shared: SysfsTree) -> None:
    before = snapshot(shared.root)
    host = CpufreqHost(shared.root, Originals(), THROTTLED)
    for pct, throttled in [(10, 1), (30, 2), (60, 3), (100, 4), (40, 2), (10, 1)]:
        host.apply(pct)
        assert changes(before, snapshot(shared.root)) == {
            smax(i): f"{THROTTLED}\n" for i in range(throttled)
        }, pct
    host.apply(0)
    assert snapshot(shared.root) == before


def test_throttled_frequency_respects_scaling_min_and_cpuinfo_range(shared: SysfsTree) -> None:
    # A user raised policy1's floor above DVFS_MIN_FREQ_KHZ: never write below it.
    write_value(shared.root / f"{POLICIES}/policy1/scaling_min_freq", 2_000_000)
    before = snapshot(shared.root)
    CpufreqHost(shared.root, Originals(), THROTTLED).apply(100)
    assert changes(before, snapshot(shared.root)) == {
        smax(0): "1500000\n",
        smax(1): "2000000\n",
        smax(2): "1500000\n",
        smax(3): "1500000\n",
    }


@pytest.mark.parametrize(
    ("min_freq", "written"),
    [(5_000_000, None), (400_000, "800000\n"), (2_400_000, "2400000\n")],
)
def test_dvfs_min_freq_is_clamped_to_the_cpuinfo_range(
    shared: SysfsTree, min_freq: int, written: str | None
) -> None:
    before = snapshot(shared.root)
    CpufreqHost(shared.root, Originals(), min_freq).apply(25)
    # Above cpuinfo_max the "throttled" value is the max itself: nothing changes.
    expected = {} if written is None else {smax(0): written}
    assert changes(before, snapshot(shared.root)) == expected


def test_policy_order_is_numeric(tmp_path: Path) -> None:
    with build(tmp_path, rapl=None, cpufreq=CpufreqSpec(cpus=24, cpus_per_policy=2)) as tree:
        host = CpufreqHost(tree.root, Originals(), THROTTLED)
        assert [p.index for p in host.policies()] == list(range(12))
        before = snapshot(tree.root)
        host.apply(10)  # ceil(12 * 0.1) = 2: policy0 and policy1, not policy10
        assert changes(before, snapshot(tree.root)) == {
            smax(0): f"{THROTTLED}\n",
            smax(1): f"{THROTTLED}\n",
        }


def test_one_policy_per_cpu(tmp_path: Path) -> None:
    spec = CpufreqSpec(cpus=8, cpus_per_policy=1, max_khz=3_700_000)
    with build(tmp_path, rapl=None, cpufreq=spec) as tree:
        before = snapshot(tree.root)
        CpufreqHost(tree.root, Originals(), THROTTLED).apply(30)  # ceil(2.4) = 3
        assert changes(before, snapshot(tree.root)) == {smax(i): "1500000\n" for i in range(3)}


def test_legacy_per_cpu_directories_without_policies(tmp_path: Path) -> None:
    spec = CpufreqSpec(cpus=8, cpus_per_policy=2, interleave=False, legacy=True)
    with build(tmp_path, rapl=None, cpufreq=spec) as tree:
        assert not (tree.root / POLICIES).exists()
        host = CpufreqHost(tree.root, Originals(), THROTTLED)
        # cpu1/cpufreq links to cpu0/cpufreq: one unit per owner, found through the links.
        assert [(p.index, p.cpus) for p in host.policies()] == [
            (0, (0, 1)),
            (2, (2, 3)),
            (4, (4, 5)),
            (6, (6, 7)),
        ]
        before = snapshot(tree.root)
        host.apply(50)
        assert changes(before, snapshot(tree.root)) == {
            "devices/system/cpu/cpu0/cpufreq/scaling_max_freq": "1500000\n",
            "devices/system/cpu/cpu2/cpufreq/scaling_max_freq": "1500000\n",
        }
        assert host.restore() == []
        assert snapshot(tree.root) == before


def test_policies_without_cpuinfo_limits_are_skipped(shared: SysfsTree) -> None:
    (shared.root / f"{POLICIES}/policy0/cpuinfo_max_freq").unlink()
    write_value(shared.root / f"{POLICIES}/policy2/cpuinfo_min_freq", "<unsupported>")
    host = CpufreqHost(shared.root, Originals(), THROTTLED)
    assert [p.index for p in host.policies()] == [1, 3]
    before = snapshot(shared.root)
    host.apply(50)  # ceil(2 * 0.5) = 1 of the two usable policies
    assert changes(before, snapshot(shared.root)) == {smax(1): "1500000\n"}


def test_no_cpufreq_driver(tmp_path: Path) -> None:
    with no_rapl(tmp_path, cpufreq=None) as tree:
        host = CpufreqHost(tree.root, Originals(), THROTTLED)
        assert not host.available()
        assert host.apply(50) == {}
        assert host.readings() == []


def test_restore_puts_back_values_found_at_start_not_defaults(shared: SysfsTree) -> None:
    # The admin had capped policy3 at 2.8 GHz before the agent started: that is its original.
    write_value(shared.root / smax(3), 2_800_000)
    before = snapshot(shared.root)
    host = CpufreqHost(shared.root, Originals(), THROTTLED)
    host.apply(100)
    host.apply(50)
    assert changes(before, snapshot(shared.root)) == {smax(0): "1500000\n", smax(1): "1500000\n"}
    host.apply(100)
    assert host.restore() == []
    assert snapshot(shared.root) == before


def test_journal_survives_a_crash(shared: SysfsTree, tmp_path: Path) -> None:
    journal = tmp_path / "originals.json"
    before = snapshot(shared.root)
    CpufreqHost(shared.root, Originals(journal), THROTTLED).apply(50)
    # Each entry: the file -> [the backend that owns it, its original value].
    assert json.loads(journal.read_text()) == {
        str(shared.policies[i].scaling_max_freq): ["cpufreq", MAX_KHZ] for i in range(2)
    }
    # A restarted worker sees policy0/1 at 1.5 GHz; the journal says that is not the original.
    successor = CpufreqHost(shared.root, Originals(journal), THROTTLED)
    successor.apply(0)
    assert snapshot(shared.root) == before
    successor.apply(100)
    assert successor.restore() == []
    assert snapshot(shared.root) == before


def test_without_the_journal_a_successor_would_keep_the_throttle(shared: SysfsTree) -> None:
    # Why the journal exists: a fresh Originals takes the throttled value as the original.
    CpufreqHost(shared.root, Originals(), THROTTLED).apply(50)
    successor = CpufreqHost(shared.root, Originals(), THROTTLED)
    successor.apply(0)
    assert (shared.root / smax(0)).read_text() == "1500000\n"


def test_failed_write_rolls_back_the_policies_already_changed(shared: SysfsTree) -> None:
    lock(shared, shared.root / smax(2))
    before = snapshot(shared.root)
    originals = Originals()
    host = CpufreqHost(shared.root, originals, THROTTLED)
    with pytest.raises(SysfsError, match="policy2/scaling_max_freq"):
        host.apply(100)
    assert snapshot(shared.root) == before
    assert originals.items() == []
    assert host.restore() == []


def test_readings_per_cpu(shared: SysfsTree) -> None:
    host = CpufreqHost(shared.root, Originals(), THROTTLED)
    host.apply(25)
    write_value(shared.root / f"{POLICIES}/policy0/scaling_cur_freq", 1_400_000)
    readings = host.readings()
    assert readings[:2] == [
        FreqReading("0", 1_400_000, THROTTLED),
        FreqReading("4", 1_400_000, THROTTLED),
    ]
    assert sorted(r.cpu for r in readings) == sorted(str(i) for i in range(8))
    assert {r.max_khz for r in readings[2:]} == {MAX_KHZ}
