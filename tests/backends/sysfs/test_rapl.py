"""RAPL host backend against sysfs trees shaped like real machines (rules: sysfs/rapl.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentpool.backends.sysfs.files import Originals
from agentpool.backends.sysfs.rapl import (
    MAX_LIMIT_UW,
    EnergyMeter,
    PackageZones,
    RaplHost,
    discover_package_zones,
    stuck,
)
from agentpool.errors import JournalError, RaplUnavailableError
from agentpool.sim.sysfs.dynamics import LiveModel, LiveSysfs
from agentpool.sim.sysfs.trees import (
    LockMode,
    SysfsTree,
    amd_no_writable_limits,
    intel_2socket,
    no_rapl,
    read_only_rapl,
    write_value,
)
from tests.support.sysfs import changes, lock, snapshot

POWERCAP = "devices/virtual/powercap/intel-rapl"
PKG0 = f"{POWERCAP}/intel-rapl:0"
PKG1 = f"{POWERCAP}/intel-rapl:1"
PL1_0 = f"{PKG0}/constraint_0_power_limit_uw"
PL1_1 = f"{PKG1}/constraint_0_power_limit_uw"
TDP_UW = 165_000_000  # constraint_0_max_power_uw and the initial PL1 of each Intel package


@pytest.fixture
def intel(tmp_path: Path) -> Iterator[SysfsTree]:
    with intel_2socket(tmp_path / "sys") as tree:
        yield tree


def test_discovery_on_intel_2socket(intel: SysfsTree) -> None:
    zones = discover_package_zones(intel.root)
    # Two packages: not core/uncore/dram, not the mmio duplicate, not psys, and each
    # package once although both class/powercap and devices/virtual/powercap list it.
    assert [z.label for z in zones] == ["intel-rapl:0", "intel-rapl:1"]
    assert [z.path for z in zones] == [(intel.root / PKG0).resolve(), (intel.root / PKG1).resolve()]
    for zone in zones:
        assert zone.limit_file == zone.path / "constraint_0_power_limit_uw"
        assert zone.max_file == zone.path / "constraint_0_max_power_uw"


def test_the_cap_is_written_to_every_package_exact_files_and_restore(intel: SysfsTree) -> None:
    # packagePowerCapWatts is each package's limit, as Joulie's agent writes it: on two
    # sockets 100 W is 100 W on each package zone (not 50 W each).
    root = intel.root
    before = snapshot(root)
    host = RaplHost(root, Originals())
    assert host.apply(100) == {"intel-rapl:0": 100_000_000, "intel-rapl:1": 100_000_000}
    after = snapshot(root)
    # Only PL1 of the two packages: short_term, subzones, mmio and psys untouched.
    assert changes(before, after) == {PL1_0: "100000000\n", PL1_1: "100000000\n"}

    assert host.apply(75.25) == {"intel-rapl:0": 75_250_000, "intel-rapl:1": 75_250_000}
    assert changes(before, snapshot(root)) == {PL1_0: "75250000\n", PL1_1: "75250000\n"}

    assert host.restore() == []
    assert snapshot(root) == before


def test_cap_is_clamped_to_max_power(intel: SysfsTree) -> None:
    before = snapshot(intel.root)
    host = RaplHost(intel.root, Originals())
    host.apply(100)
    # 500 W per package is above the 165 W constraint_0_max_power_uw.
    assert host.apply(500) == {"intel-rapl:0": TDP_UW, "intel-rapl:1": TDP_UW}
    assert changes(before, snapshot(intel.root)) == {}  # 165 W was the original PL1 too
    host.restore()
    assert snapshot(intel.root) == before


def test_four_packages(tmp_path: Path) -> None:
    with intel_2socket(tmp_path, packages=4) as tree:
        before = snapshot(tree.root)
        applied = RaplHost(tree.root, Originals()).apply(75)
        assert applied == {f"intel-rapl:{n}": 75_000_000 for n in range(4)}
        assert changes(before, snapshot(tree.root)) == {
            f"{POWERCAP}/intel-rapl:{n}/constraint_0_power_limit_uw": "75000000\n" for n in range(4)
        }


def test_disabled_zone_does_not_count(tmp_path: Path) -> None:
    with intel_2socket(tmp_path, disabled=frozenset({1})) as tree:
        before = snapshot(tree.root)
        assert [z.label for z in discover_package_zones(tree.root)] == ["intel-rapl:0"]
        # The cap goes to the one enabled package; package 1 is left alone.
        assert RaplHost(tree.root, Originals()).apply(120) == {"intel-rapl:0": 120_000_000}
        assert changes(before, snapshot(tree.root)) == {PL1_0: "120000000\n"}


def test_unnamed_constraints_fall_back_to_constraint_0(tmp_path: Path) -> None:
    with intel_2socket(tmp_path, named_constraints=False) as tree:
        assert not list(tree.root.glob(f"{PKG0}/constraint_*_name"))
        before = snapshot(tree.root)
        RaplHost(tree.root, Originals()).apply(45)
        assert changes(before, snapshot(tree.root)) == {PL1_0: "45000000\n", PL1_1: "45000000\n"}


def test_pl1_is_found_by_name_not_by_index(intel: SysfsTree) -> None:
    # Swap the names: long_term is now constraint_1, so that is the file to write.
    for zone in intel.packages:
        write_value(zone.path / "constraint_0_name", "short_term")
        write_value(zone.path / "constraint_1_name", "long_term")
    before = snapshot(intel.root)
    RaplHost(intel.root, Originals()).apply(100)
    assert changes(before, snapshot(intel.root)) == {
        f"{PKG0}/constraint_1_power_limit_uw": "100000000\n",
        f"{PKG1}/constraint_1_power_limit_uw": "100000000\n",
    }


def test_named_constraints_without_long_term_are_not_guessed(intel: SysfsTree) -> None:
    for zone in intel.packages:
        write_value(zone.path / "constraint_0_name", "peak_power")
    before = snapshot(intel.root)
    with pytest.raises(RaplUnavailableError, match="no RAPL package zone with a PL1"):
        RaplHost(intel.root, Originals()).apply(200)
    assert snapshot(intel.root) == before


def test_read_only_rapl_is_unavailable_and_nothing_is_written(tmp_path: Path) -> None:
    with read_only_rapl(tmp_path) as tree:
        before = snapshot(tree.root)
        originals = Originals()
        host = RaplHost(tree.root, originals)
        with pytest.raises(RaplUnavailableError, match="write of 100000000 failed"):
            host.apply(100)
        assert snapshot(tree.root) == before
        # Nothing changed, so nothing is owed at exit: restore must not trip on the locked file.
        assert originals.items() == []
        assert host.restore() == []


def test_second_package_locked_rolls_back_the_first(intel: SysfsTree) -> None:
    lock(intel, intel.root / PL1_1)
    before = snapshot(intel.root)
    originals = Originals()
    host = RaplHost(intel.root, originals)
    with pytest.raises(RaplUnavailableError, match=r"intel-rapl:1/constraint_0_power_limit_uw"):
        host.apply(100)
    # Package 0 had been written before package 1 refused: it is back at 165 W.
    assert snapshot(intel.root) == before
    assert (intel.root / PL1_0).read_text() == f"{TDP_UW}\n"
    assert originals.items() == []
    assert host.restore() == []


def test_failed_apply_keeps_the_originals_of_an_earlier_cap(intel: SysfsTree) -> None:
    originals = Originals()
    host = RaplHost(intel.root, originals)
    before = snapshot(intel.root)
    host.apply(100)
    lock(intel, intel.root / PL1_1)  # package 1 locks at 100 W after the first cap
    with pytest.raises(RaplUnavailableError):
        host.apply(75)
    # Rolled back to the earlier cap, and still owed the values found at start.
    assert changes(before, snapshot(intel.root)) == {PL1_0: "100000000\n", PL1_1: "100000000\n"}
    assert [v for _, v in originals.items()] == [TDP_UW, TDP_UW]
    problems = host.restore()
    assert len(problems) == 1
    assert "intel-rapl:1/constraint_0_power_limit_uw" in problems[0]  # locked: reported
    assert (intel.root / PL1_0).read_text() == f"{TDP_UW}\n"


def test_amd_with_no_writable_limits(tmp_path: Path) -> None:
    with amd_no_writable_limits(tmp_path) as tree:
        zones = discover_package_zones(tree.root)
        assert [(z.label, z.limit_file) for z in zones] == [("intel-rapl:0", None)]
        before = snapshot(tree.root)
        with pytest.raises(RaplUnavailableError):
            RaplHost(tree.root, Originals()).apply(150)
        assert snapshot(tree.root) == before


def test_no_powercap_at_all(tmp_path: Path) -> None:
    with no_rapl(tmp_path) as tree:
        assert discover_package_zones(tree.root) == []
        with pytest.raises(RaplUnavailableError):
            RaplHost(tree.root, Originals()).apply(150)


def test_unchanged_limit_is_not_rewritten_or_journalled(intel: SysfsTree) -> None:
    originals = Originals()
    RaplHost(intel.root, originals).apply(165)  # what each package has already
    assert originals.items() == []


@pytest.mark.parametrize(
    ("wanted", "read_back", "ok"),
    [
        (100_000_000, 100_000_000, True),
        (100_000_000, 99_875_000, True),  # rounded to the 1/8 W power unit
        (100_000_000, 100_500_000, True),  # 0.5 %
        (100_000_000, 100_500_001, False),
        (100_000_000, 165_000_000, False),  # a locked register reads back the old value
        (1_000_000, 1_250_000, True),  # 0.25 W floor for small limits
        (1_000_000, 1_250_001, False),
    ],
)
def test_read_back_tolerance(wanted: int, read_back: int, ok: bool) -> None:
    assert stuck(wanted, read_back) is ok


def test_journal_lets_a_new_host_restore_the_true_originals_after_a_crash(
    intel: SysfsTree, tmp_path: Path
) -> None:
    journal = tmp_path / "state" / "originals.json"
    before = snapshot(intel.root)
    RaplHost(intel.root, Originals(journal)).apply(100)
    pl1 = [str(z.path / "constraint_0_power_limit_uw") for z in intel.packages]
    # The journal is on disk before the write, holding the values found at start.
    assert json.loads(journal.read_text()) == {key: ["rapl", TDP_UW] for key in pl1}
    # "Crash": the first host is gone without restoring; a successor starts from the journal.
    successor = RaplHost(intel.root, Originals(journal))
    successor.apply(60)
    assert changes(before, snapshot(intel.root)) == {PL1_0: "60000000\n", PL1_1: "60000000\n"}
    assert json.loads(journal.read_text()) == {key: ["rapl", TDP_UW] for key in pl1}  # not 100 W
    assert successor.restore() == []
    assert snapshot(intel.root) == before
    assert json.loads(journal.read_text()) == {}


def _journal_that_cannot_be_written(journal: Path) -> None:
    """Its name taken by a directory: every rewrite (temp file, then rename) fails, as on a
    full STATE_DIR (tests/faults/test_disk.py has the real ENOSPC)."""
    journal.unlink(missing_ok=True)
    (journal / "in-the-way").mkdir(parents=True)


def test_an_original_that_cannot_be_journaled_is_not_written(
    intel: SysfsTree, tmp_path: Path
) -> None:
    journal = tmp_path / "state" / "originals.json"
    _journal_that_cannot_be_written(journal)
    before = snapshot(intel.root)
    originals = Originals(journal)
    host = RaplHost(intel.root, originals)
    # Not RAPL's failure (no fallback to DVFS, which would need a journal just the same).
    with pytest.raises(JournalError, match="nothing written to the host"):
        host.apply(100)
    assert snapshot(intel.root) == before
    assert originals.items() == []
    assert [p.name for p in journal.parent.iterdir()] == ["originals.json"]  # no temp file
    shutil.rmtree(journal)  # space freed: the next tick caps
    host.apply(100)
    pl1 = [str(z.path / "constraint_0_power_limit_uw") for z in intel.packages]
    assert json.loads(journal.read_text()) == {key: ["rapl", TDP_UW] for key in pl1}


def test_a_restore_needs_no_room_in_the_journal(intel: SysfsTree, tmp_path: Path) -> None:
    journal = tmp_path / "state" / "originals.json"
    before = snapshot(intel.root)
    host = RaplHost(intel.root, Originals(journal))
    host.apply(100)
    _journal_that_cannot_be_written(journal)
    assert host.restore() == []
    assert snapshot(intel.root) == before


def test_torn_journal_is_ignored(tmp_path: Path) -> None:
    journal = tmp_path / "originals.json"
    journal.write_text('{"/sys/x": 12')
    assert Originals(journal).items() == []


# -- EnergyMeter --------------------------------------------------------------------------------


def test_energy_meter_primes_then_reports_delta_over_elapsed(intel: SysfsTree) -> None:
    live = LiveSysfs(intel, LiveModel(demand_watts=(120.0, 80.0), idle_watts=25.0))
    meter = EnergyMeter(intel.root)
    first = meter.sample(100.0)
    assert first.power_w == {}
    assert first.total_w is None
    assert first.energy_uj == {
        "intel-rapl:0": live.energy_uj("intel-rapl:0"),
        "intel-rapl:1": live.energy_uj("intel-rapl:1"),
    }
    live.step(10.0)
    second = meter.sample(110.0)
    assert second.power_w == pytest.approx({"intel-rapl:0": 120.0, "intel-rapl:1": 80.0})
    assert second.total_w == pytest.approx(200.0)  # packages only: no subzone, mmio or psys
    assert second.energy_uj["intel-rapl:0"] == live.energy_uj("intel-rapl:0")
    live.step(4.0)
    assert meter.sample(114.0).power_w == pytest.approx(
        {"intel-rapl:0": 120.0, "intel-rapl:1": 80.0}
    )


def test_energy_meter_same_instant_gives_no_power(intel: SysfsTree) -> None:
    meter = EnergyMeter(intel.root)
    meter.sample(5.0)
    assert meter.sample(5.0).power_w == {}


def test_energy_counter_wrap_adds_max_energy_range(tmp_path: Path) -> None:
    span = 2_000_000_000
    with intel_2socket(
        tmp_path, max_energy_range_uj=span, energy_start_uj=(1_500_000_000, 10)
    ) as tree:
        live = LiveSysfs(tree, LiveModel(demand_watts=120.0))
        meter = EnergyMeter(tree.root)
        meter.sample(0.0)
        live.step(10.0)  # +1.2e9 uJ: package 0 wraps past 2e9, package 1 does not
        sample = meter.sample(10.0)
        assert sample.energy_uj["intel-rapl:0"] == 700_000_000
        assert sample.power_w == pytest.approx({"intel-rapl:0": 120.0, "intel-rapl:1": 120.0})


def test_wrap_with_zero_range_drops_only_that_zone(tmp_path: Path) -> None:
    with intel_2socket(tmp_path, max_energy_range_uj=0) as tree:
        meter = EnergyMeter(tree.root)
        p0, p1 = (z.energy_file for z in tree.packages)
        write_value(p0, 5_000_000)
        write_value(p1, 5_000_000)
        meter.sample(0.0)
        write_value(p0, 1_000_000)  # went backwards, and the range reads 0: cannot undo
        write_value(p1, 55_000_000)
        sample = meter.sample(1.0)
        assert sample.energy_uj == {"intel-rapl:0": 1_000_000, "intel-rapl:1": 55_000_000}
        assert sample.power_w == {"intel-rapl:1": 50.0}
        assert sample.total_w == 50.0
        write_value(p0, 3_000_000)  # the dropped sample still re-primed the zone
        assert meter.sample(2.0).power_w == {"intel-rapl:0": 2.0, "intel-rapl:1": 0.0}


def test_energy_meter_on_amd_and_on_read_only_rapl(tmp_path: Path) -> None:
    # Energy counters are readable where limits are not.
    for name, builder in (("amd", amd_no_writable_limits), ("ro", read_only_rapl)):
        with builder(tmp_path / name) as tree:
            live = LiveSysfs(tree, LiveModel(demand_watts=100.0))
            meter = EnergyMeter(tree.root)
            meter.sample(0.0)
            live.step(2.0)
            sample = meter.sample(2.0)
            assert sample.total_w == pytest.approx(100.0 * len(tree.packages)), name


def test_energy_meter_counts_a_disabled_zone_out(tmp_path: Path) -> None:
    with intel_2socket(tmp_path, disabled=frozenset({0})) as tree:
        live = LiveSysfs(tree, LiveModel(demand_watts=100.0))
        meter = EnergyMeter(tree.root)
        meter.sample(0.0)
        live.step(1.0)
        assert meter.sample(1.0).power_w == pytest.approx({"intel-rapl:1": 100.0})


def test_revert_lock_mode_is_read_back_on_the_next_apply(tmp_path: Path) -> None:
    # REVERT: the write is accepted and later undone by the "firmware" (a live step);
    # the next apply notices the limit moved and writes it again.
    with read_only_rapl(tmp_path, lock=LockMode.REVERT) as tree:
        host = RaplHost(tree.root, Originals())
        host.apply(100)
        assert (tree.root / PL1_0).read_text() == "100000000\n"
        assert tree.revert_locked() == 2
        assert (tree.root / PL1_0).read_text() == f"{TDP_UW}\n"
        host.apply(100)
        assert (tree.root / PL1_0).read_text() == "100000000\n"
        host.restore()
        assert (tree.root / PL1_0).read_text() == f"{TDP_UW}\n"


def test_zones_are_kept_once_found_and_looked_for_again_when_one_vanishes(
    tmp_path: Path,
) -> None:
    with intel_2socket(tmp_path / "sys") as tree:
        zones = PackageZones(tree.root)
        host = RaplHost(tree.root, Originals(), zones)
        meter = EnergyMeter(tree.root, zones)
        found = zones.get()
        assert [z.label for z in found] == ["intel-rapl:0", "intel-rapl:1"]
        assert host.zones() is found  # kept: no directory walk per call
        meter.sample(1.0)
        assert zones.get() is found  # a successful read keeps them too

        # Package 1 disappears (driver unbound): the meter notices and the next use
        # discovers again, finding only package 0.
        shutil.rmtree(tree.root / PKG1)
        for link in (tree.root / "class/powercap").iterdir():
            if link.name == "intel-rapl:1":
                link.unlink()
        sample = meter.sample(2.0)
        assert list(sample.energy_uj) == ["intel-rapl:0"]
        assert [z.label for z in zones.get()] == ["intel-rapl:0"]
        assert host.apply(100) == {"intel-rapl:0": 100_000_000}


def test_no_zones_is_not_kept_so_a_late_driver_is_found(tmp_path: Path) -> None:
    with no_rapl(tmp_path / "bare") as bare, intel_2socket(tmp_path / "sys") as intel:
        zones = PackageZones(bare.root)
        assert zones.get() == []
        # The powercap driver appears after start: the tree now has zones.
        shutil.copytree(intel.root / POWERCAP, bare.root / POWERCAP, symlinks=True)
        assert [z.label for z in zones.get()] == ["intel-rapl:0", "intel-rapl:1"]


# -- shrunk examples of tests/properties/test_host.py, kept as regressions -------------------


def test_a_cap_of_1e308_w_is_clamped_to_the_zone_max(intel: SysfsTree) -> None:
    # 1e308 W is a finite number >= 1, so the CRD accepts it; in microwatts it is infinite,
    # and int() of it raised OverflowError, crash-looping the worker (issue 28).
    host = RaplHost(intel.root, Originals())
    assert host.apply(1e308) == {"intel-rapl:0": TDP_UW, "intel-rapl:1": TDP_UW}


def test_a_cap_of_1e308_w_without_a_max_file_is_the_largest_attribute_value(
    tmp_path: Path,
) -> None:
    # The shrunk example: one package, no constraint_N_max_power_uw.
    with intel_2socket(tmp_path, packages=1, mmio=False, psys=False, subzones=(),
                       named_constraints=False, max_files=False) as tree:
        applied = RaplHost(tree.root, Originals()).apply(1e308)
        assert applied == {"intel-rapl:0": MAX_LIMIT_UW}
        assert read_value(tree.root / PL1_0) == MAX_LIMIT_UW


def test_a_cap_below_the_zone_min_is_raised_to_it(tmp_path: Path) -> None:
    with intel_2socket(tmp_path, min_watts=10.0) as tree:
        # 1 W is below the packages' 10 W constraint_0_min_power_uw.
        applied = RaplHost(tree.root, Originals()).apply(1)
        assert applied == {"intel-rapl:0": 10_000_000, "intel-rapl:1": 10_000_000}


@pytest.mark.parametrize("junk", ["-5", "0", "abc", "9" * 30])
def test_a_junk_max_file_is_no_ceiling(intel: SysfsTree, junk: str) -> None:
    # A negative max was taken as the ceiling and written as the limit.
    (intel.root / PKG0 / "constraint_0_max_power_uw").write_text(junk + "\n")
    applied = RaplHost(intel.root, Originals()).apply(50)
    assert applied == {"intel-rapl:0": 50_000_000, "intel-rapl:1": 50_000_000}


def read_value(path: Path) -> int:
    return int(path.read_text())
