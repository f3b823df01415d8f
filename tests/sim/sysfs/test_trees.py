"""The sysfs-shaped trees, checked by walking them the way host code does."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentpool.sim.sysfs.dynamics import LiveModel, LiveSysfs
from agentpool.sim.sysfs.trees import (
    MAX_ENERGY_RANGE_UJ,
    CpufreqSpec,
    LockMode,
    SysfsTree,
    ZoneKind,
    amd_no_writable_limits,
    build,
    build_nodes,
    intel_2socket,
    no_rapl,
    read_int,
    read_only_rapl,
    write_value,
)

POWERCAP = "devices/virtual/powercap"


def package_zones(root: Path) -> list[Path]:
    """RAPL zone selection (backends/sysfs/rapl.py's docstring), written apart from the backend."""
    seen: dict[Path, None] = {}
    base = root / "class/powercap"
    if not base.is_dir():
        return []
    for entry in sorted(base.iterdir()):
        parts = entry.name.split(":")
        if parts[0] != "intel-rapl" or len(parts) != 2:
            continue
        if not (entry / "name").read_text().startswith("package"):
            continue
        if (entry / "enabled").read_text().strip() == "0":
            continue
        seen.setdefault(entry.resolve(strict=True))
    return list(seen)


def policies(root: Path) -> list[Path]:
    cpu = root / "devices/system/cpu"
    found = {p.resolve() for p in cpu.glob("cpufreq/policy*")}
    if not found:
        found = {p.resolve() for p in cpu.glob("cpu[0-9]*/cpufreq")}
    return sorted(found)


# -- the Intel box ------------------------------------------------------------------


def test_intel_class_links_resolve_into_devices_virtual_powercap(tmp_path: Path) -> None:
    tree = intel_2socket(tmp_path)
    cls = tmp_path / "class/powercap"
    assert sorted(p.name for p in cls.iterdir()) == [
        "intel-rapl", "intel-rapl-mmio", "intel-rapl-mmio:0",
        "intel-rapl:0", "intel-rapl:0:0", "intel-rapl:0:1", "intel-rapl:0:2",
        "intel-rapl:1", "intel-rapl:1:0", "intel-rapl:1:1", "intel-rapl:1:2",
        "intel-rapl:2",
    ]
    for entry in cls.iterdir():
        assert entry.is_symlink()
        assert not os.path.isabs(os.readlink(entry))  # relative, as the kernel makes them
    real = tmp_path / POWERCAP / "intel-rapl/intel-rapl:0"
    assert (cls / "intel-rapl:0").resolve() == real.resolve()
    assert (cls / "intel-rapl:0:1").resolve() == (real / "intel-rapl:0:1").resolve()
    assert (cls / "intel-rapl").resolve() == (tmp_path / POWERCAP / "intel-rapl").resolve()
    assert tree.zone("intel-rapl:0").path == real
    assert tree.zone("intel-rapl:0").link == cls / "intel-rapl:0"
    names = {z.label: z.name for z in tree.zones}
    assert names == {
        "intel-rapl:0": "package-0", "intel-rapl:0:0": "core", "intel-rapl:0:1": "uncore",
        "intel-rapl:0:2": "dram", "intel-rapl:1": "package-1", "intel-rapl:1:0": "core",
        "intel-rapl:1:1": "uncore", "intel-rapl:1:2": "dram", "intel-rapl:2": "psys",
        "intel-rapl-mmio:0": "package-0",
    }
    for zone in tree.zones:
        assert (zone.link / "name").read_text() == f"{zone.name}\n"


def test_intel_package_zone_files_have_exact_contents(tmp_path: Path) -> None:
    tree = intel_2socket(tmp_path, tdp_watts=150.0, pl1_watts=140.0)
    zone = tree.zone("intel-rapl:1")
    expected = {
        "name": "package-1", "enabled": "1", "energy_uj": str(123_456_789 * 2),
        "max_energy_range_uj": str(MAX_ENERGY_RANGE_UJ),
        "constraint_0_name": "long_term", "constraint_0_power_limit_uw": "140000000",
        "constraint_0_max_power_uw": "150000000", "constraint_0_time_window_us": "999424",
        "constraint_1_name": "short_term", "constraint_1_power_limit_uw": "180000000",
        "constraint_1_max_power_uw": "300000000", "constraint_1_time_window_us": "2440",
    }
    files = {p.name: p.read_text() for p in zone.path.iterdir() if p.is_file()}
    assert files == {k: v + "\n" for k, v in expected.items()}
    pl1 = zone.pl1
    assert pl1 is not None
    assert (pl1.name, pl1.original_uw) == ("long_term", 140_000_000)
    assert pl1.limit_file == zone.path / "constraint_0_power_limit_uw"
    assert pl1.max_file == zone.path / "constraint_0_max_power_uw"
    assert zone.kind is ZoneKind.PACKAGE
    assert zone.package == 1


def test_intel_limits_are_writable_regular_files(tmp_path: Path) -> None:
    tree = intel_2socket(tmp_path)
    assert tree.locked == {}
    for zone in tree.packages:
        pl1 = zone.pl1
        assert pl1 is not None
        assert stat.S_ISREG(os.lstat(pl1.limit_file).st_mode)
        (zone.link / "constraint_0_power_limit_uw").write_text("60000000\n")
        assert read_int(pl1.limit_file) == 60_000_000


def test_only_two_packages_count_mmio_psys_and_subzones_do_not(tmp_path: Path) -> None:
    tree = intel_2socket(tmp_path)
    found = package_zones(tmp_path)
    assert found == [z.path.resolve() for z in tree.packages]
    assert len(found) == 2
    mmio = tree.zone("intel-rapl-mmio:0")
    assert mmio.kind is ZoneKind.MMIO
    # Same name, same limits, but a different directory: only the label tells it apart.
    assert (mmio.link / "name").read_text() == "package-0\n"
    assert mmio.path.resolve() not in found
    assert mmio.path.parent.name == "intel-rapl-mmio"


def test_disabled_package_and_unnamed_constraints(tmp_path: Path) -> None:
    tree = intel_2socket(tmp_path, disabled=frozenset({1}), named_constraints=False)
    assert (tree.zone("intel-rapl:1").path / "enabled").read_text() == "0\n"
    assert package_zones(tmp_path) == [tree.zone("intel-rapl:0").path.resolve()]
    zone = tree.zone("intel-rapl:0")
    assert not list(zone.path.glob("constraint_*_name"))
    assert (zone.path / "constraint_0_power_limit_uw").read_text() == "165000000\n"
    assert zone.pl1 is not None
    assert zone.pl1.name is None


def test_more_sockets_and_no_extras(tmp_path: Path) -> None:
    tree = intel_2socket(tmp_path, packages=4, subzones=(), mmio=False, psys=False)
    assert [z.label for z in tree.zones] == [f"intel-rapl:{n}" for n in range(4)]
    assert not (tmp_path / POWERCAP / "intel-rapl-mmio").exists()


# -- locked and missing limits ----------------------------------------------------------


WRITE_IN_CHILD = """
import sys
try:
    with open(sys.argv[1], "w") as f:
        f.write("50000000\\n")
except OSError as exc:
    print(type(exc).__name__)
else:
    print("written")
print(open(sys.argv[1]).read().strip())
"""


def test_reject_lock_refuses_writes_even_from_root_in_another_process(tmp_path: Path) -> None:
    with read_only_rapl(tmp_path) as tree:
        assert tree.lock is LockMode.REJECT
        zone = tree.zone("intel-rapl:0")
        link_file = zone.link / "constraint_0_power_limit_uw"
        assert link_file.read_text() == "165000000\n"
        with pytest.raises(PermissionError):
            link_file.write_text("50000000\n")
        fd = os.open(link_file, os.O_WRONLY)  # opening without O_TRUNC works; writing does not
        try:
            with pytest.raises(PermissionError):
                os.write(fd, b"5")
        finally:
            os.close(fd)
        out = subprocess.run(
            [sys.executable, "-c", WRITE_IN_CHILD, str(link_file)],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.split()
        assert out == ["PermissionError", "165000000"]
        assert stat.S_IMODE(os.stat(link_file).st_mode) == 0o444
        locked = set(tree.locked)
        expected = {
            z.path / f"constraint_{i}_power_limit_uw"
            for z in tree.zones if z.kind in (ZoneKind.PACKAGE, ZoneKind.MMIO) for i in (0, 1)
        }
        assert locked == expected
        assert (tree.zone("intel-rapl:0:0").link / "constraint_0_power_limit_uw").stat()
        assert len(package_zones(tmp_path)) == 2  # still discoverable, just not writable
    assert not link_file.exists()  # closed: the link dangles, nothing leaks


def test_revert_lock_accepts_writes_until_reverted(tmp_path: Path) -> None:
    tree = read_only_rapl(tmp_path, lock=LockMode.REVERT)
    limit = tree.zone("intel-rapl:1").link / "constraint_0_power_limit_uw"
    limit.write_text("50000000\n")
    assert limit.read_text() == "50000000\n"
    assert tree.revert_locked() == 1
    assert limit.read_text() == "165000000\n"
    assert tree.revert_locked() == 0


def test_amd_counts_energy_but_has_no_limits(tmp_path: Path) -> None:
    tree = amd_no_writable_limits(tmp_path)
    assert [(z.label, z.name) for z in tree.zones] == [("intel-rapl:0", "package-0")]
    zone = tree.packages[0]
    assert sorted(p.name for p in zone.path.iterdir()) == [
        "enabled", "energy_uj", "max_energy_range_uj", "name",
    ]
    assert zone.pl1 is None
    assert package_zones(tmp_path) == [zone.path.resolve()]
    assert len(policies(tmp_path)) == 8
    assert (tree.policies[0].path / "scaling_driver").read_text() == "amd-pstate\n"


def test_amd_with_rejecting_limits(tmp_path: Path) -> None:
    with amd_no_writable_limits(tmp_path, lock=LockMode.REJECT) as tree:
        pl1 = tree.packages[0].pl1
        assert pl1 is not None
        with pytest.raises(PermissionError):
            pl1.limit_file.write_text("1\n")


def test_no_rapl_has_no_powercap_at_all(tmp_path: Path) -> None:
    tree = no_rapl(tmp_path)
    assert tree.zones == ()
    assert not (tmp_path / "class").exists()
    assert not (tmp_path / POWERCAP).exists()
    assert len(tree.policies) == 4


def test_neither_rapl_nor_cpufreq(tmp_path: Path) -> None:
    tree = no_rapl(tmp_path, cpufreq=None)
    assert tree.policies == ()
    assert len(tree.cpu_dirs) == 8
    assert not list((tmp_path / "devices/system/cpu").glob("**/cpufreq"))


# -- cpufreq ------------------------------------------------------------------------------


def test_policies_share_smt_siblings_and_cpu_links_resolve_to_them(tmp_path: Path) -> None:
    tree = intel_2socket(tmp_path)
    assert [(p.index, p.cpus) for p in tree.policies] == [
        (0, (0, 4)), (1, (1, 5)), (2, (2, 6)), (3, (3, 7)),
    ]
    cpu = tmp_path / "devices/system/cpu"
    for policy in tree.policies:
        assert policy.path == cpu / f"cpufreq/policy{policy.index}"
        for y in policy.cpus:
            link = cpu / f"cpu{y}" / "cpufreq"
            assert link.is_symlink()
            assert os.readlink(link) == f"../cpufreq/policy{policy.index}"
            assert link.resolve() == policy.path.resolve()
        files = {p.name: p.read_text().strip() for p in policy.path.iterdir()}
        listed = " ".join(map(str, policy.cpus))
        assert files == {
            "cpuinfo_min_freq": "800000", "cpuinfo_max_freq": "3500000",
            "cpuinfo_transition_latency": "10000",
            "scaling_min_freq": "800000", "scaling_max_freq": "3500000",
            "scaling_cur_freq": "3500000", "affected_cpus": listed, "related_cpus": listed,
            "scaling_driver": "intel_pstate", "scaling_governor": "powersave",
            "scaling_available_governors": "performance powersave",
        }
    assert policies(tmp_path) == [p.path.resolve() for p in tree.policies]
    assert (cpu / "online").read_text() == "0-7\n"


def test_neighbour_grouping_names_policies_by_first_cpu(tmp_path: Path) -> None:
    tree = no_rapl(tmp_path, cpufreq=CpufreqSpec(cpus=24, cpus_per_policy=2, interleave=False))
    assert [p.index for p in tree.policies] == list(range(0, 24, 2))
    assert tree.policies[5].cpus == (10, 11)
    # policy10 sorts before policy2 as a string: host code must sort by number.
    names = sorted(p.name for p in (tmp_path / "devices/system/cpu/cpufreq").iterdir())
    assert names[:3] == ["policy0", "policy10", "policy12"]


def test_legacy_per_cpu_directories_without_policies(tmp_path: Path) -> None:
    spec = CpufreqSpec(cpus=4, cpus_per_policy=1, legacy=True)
    tree = no_rapl(tmp_path, cpufreq=spec)
    cpu = tmp_path / "devices/system/cpu"
    assert not (cpu / "cpufreq").exists()
    for y in range(4):
        d = cpu / f"cpu{y}" / "cpufreq"
        assert d.is_dir()
        assert not d.is_symlink()
        assert (d / "affected_cpus").read_text() == f"{y}\n"
    assert [p.path for p in tree.policies] == [cpu / f"cpu{y}/cpufreq" for y in range(4)]
    shared = no_rapl(tmp_path / "shared", cpufreq=CpufreqSpec(cpus=4, legacy=True))
    cpu = tmp_path / "shared/devices/system/cpu"
    assert os.readlink(cpu / "cpu2/cpufreq") == "../cpu0/cpufreq"
    assert len(policies(tmp_path / "shared")) == len(shared.policies) == 2


def test_bad_grouping_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="do not split"):
        no_rapl(tmp_path, cpufreq=CpufreqSpec(cpus=6, cpus_per_policy=4))


def test_build_nodes_fills_a_sysfs_root_template(tmp_path: Path) -> None:
    trees = build_nodes(f"{tmp_path}/{{node}}", ["w0", "w1"], no_rapl)
    assert sorted(trees) == ["w0", "w1"]
    assert trees["w1"].root == tmp_path / "w1"
    assert (tmp_path / "w1/devices/system/cpu/cpufreq/policy0").is_dir()
    with pytest.raises(ValueError, match="placeholder"):
        build_nodes(str(tmp_path), ["x"])


# -- in-place writes -------------------------------------------------------------------------


def test_write_value_keeps_the_inode_and_handles_shrinking(tmp_path: Path) -> None:
    path = tmp_path / "energy_uj"
    path.write_text("123456789\n")
    inode = path.stat().st_ino
    with open(path) as held:
        write_value(path, 99)
        assert path.read_text() == "99\n"
        held.seek(0)
        assert held.read() == "99\n"  # a reader keeping the file open sees new values
        write_value(path, 1234567890123)
        held.seek(0)
        assert held.read() == "1234567890123\n"
    assert path.stat().st_ino == inode


# -- live mode -------------------------------------------------------------------------------


def energies(tree: SysfsTree) -> dict[str, int]:
    return {z.label: read_int(z.link / "energy_uj") for z in tree.zones}


def test_step_adds_power_times_time_to_every_counter(tmp_path: Path) -> None:
    tree = intel_2socket(tmp_path)
    live = LiveSysfs(tree, LiveModel(demand_watts=(120.0, 100.0), dram_watts=8.0))
    before = energies(tree)
    sample = live.step(2.0)
    after = energies(tree)
    delta = {k: after[k] - before[k] for k in after}
    assert sample.package_watts == (120.0, 100.0)
    assert sample.cap_watts == (165.0, 165.0)
    assert sample.total_watts == 220.0
    assert delta["intel-rapl:0"] == 240_000_000
    assert delta["intel-rapl:1"] == 200_000_000
    assert delta["intel-rapl-mmio:0"] == delta["intel-rapl:0"]  # the duplicate mirrors package 0
    assert delta["intel-rapl:0:0"] == 144_000_000  # core: 60 %
    assert delta["intel-rapl:1:1"] == 20_000_000  # uncore: 10 %
    assert delta["intel-rapl:0:2"] == 16_000_000  # dram: constant
    assert delta["intel-rapl:2"] == 2 * (220_000_000 + 30_000_000)  # psys: all + platform
    assert live.energy_uj("intel-rapl:1") == after["intel-rapl:1"]


def test_counter_wraps_at_max_energy_range(tmp_path: Path) -> None:
    near = MAX_ENERGY_RANGE_UJ - 50_000_000
    tree = intel_2socket(tmp_path, energy_start_uj=(near, 0), subzones=(), psys=False)
    live = LiveSysfs(tree, LiveModel(demand_watts=100.0))
    live.step(1.0)
    now = read_int(tree.zone("intel-rapl:0").energy_file)
    assert now == 50_000_000
    assert now - near + MAX_ENERGY_RANGE_UJ == 100_000_000  # the reader's correction
    assert (tree.zone("intel-rapl:0").energy_file.read_text()) == "50000000\n"


def test_lower_pl1_lowers_power_and_clock(tmp_path: Path) -> None:
    tree = intel_2socket(tmp_path)
    live = LiveSysfs(tree, LiveModel(demand_watts=145.0, idle_watts=25.0))
    assert live.step(1.0).package_watts == (145.0, 145.0)
    (tree.zone("intel-rapl:0").link / "constraint_0_power_limit_uw").write_text("85000000\n")
    before = read_int(tree.zone("intel-rapl:0").energy_file)
    sample = live.step(1.0)
    assert sample.package_watts == (85.0, 145.0)
    assert sample.cap_watts == (85.0, 165.0)
    assert read_int(tree.zone("intel-rapl:0").energy_file) - before == 85_000_000
    # PL1 removed half the dynamic power of the most limited package: clocks halve.
    assert {read_int(p.scaling_cur_freq) for p in tree.policies} == {1_750_000}


def test_lower_scaling_max_freq_lowers_power(tmp_path: Path) -> None:
    tree = intel_2socket(tmp_path)
    live = LiveSysfs(tree, LiveModel(demand_watts=125.0, idle_watts=25.0))
    for policy in tree.policies[:2]:  # half the CPUs to 1.75 GHz of 3.5
        policy.scaling_max_freq.write_text("1750000\n")
    sample = live.step(1.0)
    assert sample.freq_ratio == pytest.approx(0.75)
    assert sample.package_watts == pytest.approx((100.0, 100.0))
    assert [read_int(p.scaling_cur_freq) for p in tree.policies] == [
        1_750_000, 1_750_000, 3_500_000, 3_500_000,
    ]
    live.set_demand(25.0, package=1)
    assert live.step(1.0).package_watts == pytest.approx((100.0, 25.0))


def test_rejected_limits_leave_power_alone(tmp_path: Path) -> None:
    with read_only_rapl(tmp_path) as tree:
        live = LiveSysfs(tree, LiveModel(demand_watts=150.0))
        with pytest.raises(PermissionError):
            (tree.zone("intel-rapl:0").link / "constraint_0_power_limit_uw").write_text("5\n")
        assert live.step(1.0).package_watts == (150.0, 150.0)


def test_reverted_limits_stick_only_until_the_next_step(tmp_path: Path) -> None:
    tree = read_only_rapl(tmp_path, lock=LockMode.REVERT)
    live = LiveSysfs(tree, LiveModel(demand_watts=150.0))
    limit = tree.zone("intel-rapl:0").link / "constraint_0_power_limit_uw"
    limit.write_text("50000000\n")
    assert live.step(1.0).package_watts == (150.0, 150.0)
    assert limit.read_text() == "165000000\n"


def test_amd_and_no_cpufreq_trees_run_live(tmp_path: Path) -> None:
    amd = LiveSysfs(amd_no_writable_limits(tmp_path / "amd"), LiveModel(demand_watts=90.0))
    assert amd.step(0.5).package_watts == (90.0,)
    assert amd.step(0.5).cap_watts == (None,)
    bare = build(tmp_path / "bare", rapl=None, cpufreq=None)
    assert LiveSysfs(bare).step(1.0).package_watts == ()


def test_noise_is_seeded(tmp_path: Path) -> None:
    def run(seed: int, where: str) -> list[tuple[float, ...]]:
        live = LiveSysfs(intel_2socket(tmp_path / where), LiveModel(noise_watts=3, seed=seed))
        return [live.step(0.1).package_watts for _ in range(5)]

    assert run(1, "a") == run(1, "b")
    assert run(1, "c") != run(2, "d")


def test_background_thread_moves_counters_by_elapsed_time(tmp_path: Path) -> None:
    tree = intel_2socket(tmp_path)
    zone = tree.zone("intel-rapl:0")
    start = read_int(zone.energy_file)
    started = time.monotonic()
    with LiveSysfs(tree, LiveModel(demand_watts=100.0)).start(interval=0.01) as live:
        deadline = time.monotonic() + 5
        while read_int(zone.energy_file) - start < 20_000_000:  # 0.2 s at 100 W
            assert time.monotonic() < deadline, "counter did not move"
            time.sleep(0.01)
    elapsed = time.monotonic() - started
    gained = read_int(zone.energy_file) - start
    assert 20_000_000 <= gained <= elapsed * 100_000_000 + 1
    assert live.error is None


def test_readers_never_see_a_partial_number(tmp_path: Path) -> None:
    tree = intel_2socket(tmp_path, subzones=(), mmio=False, psys=False,
                         energy_start_uj=(MAX_ENERGY_RANGE_UJ - 1_000_000_000, 0))
    live = LiveSysfs(tree, LiveModel(demand_watts=1000.0))
    energy = tree.zone("intel-rapl:0").energy_file
    bad: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            text = energy.read_text()
            try:
                int(text)
            except ValueError:
                bad.append(text)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(2000):  # crosses the wrap, where the text gets shorter
            live.step(0.01)
    finally:
        done.set()
        thread.join(5)
    assert bad == []
    assert read_int(energy) < 10_000_000_000  # it did wrap (165 W PL1 * 20 s > 1,000 J)
