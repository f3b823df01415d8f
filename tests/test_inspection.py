"""``agentpool inspect``: the real command on sysfs-shaped trees; exit 0 and nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentpool.sim.sysfs.trees import amd_no_writable_limits, intel_2socket, no_rapl, read_only_rapl
from tests.support.sysfs import snapshot


def inspect(root: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "agentpool", "inspect", "--sysfs-root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_two_sockets_with_a_percent_cap(tmp_path: Path) -> None:
    with intel_2socket(tmp_path, min_watts=40.0):
        before = snapshot(tmp_path)
        out = inspect(tmp_path, "--pct", "60")
        assert snapshot(tmp_path) == before
    assert "  intel-rapl:0: PL1 165 W (min 40 W, max 165 W), writable" in out
    assert "cpufreq policies: 4 (driver intel_pstate)" in out
    # A percent of one package's maximum, written to every package.
    assert "60% of max 165 W (per-package PL1 max of intel-rapl:0, intel-rapl:1) = 99.0 W" in out
    assert "cap 99 W per package: RAPL PL1 intel-rapl:0 99 W, intel-rapl:1 99 W" in out
    assert out.endswith("(inspect only reads; nothing was written)\n")


def test_locked_limits_are_only_announced(tmp_path: Path) -> None:
    # A BIOS lock shows only when writing, and inspect never writes: it says what follows.
    with read_only_rapl(tmp_path):
        before = snapshot(tmp_path)
        out = inspect(tmp_path, "--cap", "500", "--pct", "10")
        assert snapshot(tmp_path) == before
    assert "10% of max not planned: watts win over percent" in out
    assert "cap 500 W per package: RAPL PL1 intel-rapl:0 165 W, intel-rapl:1 165 W" in out
    assert "if a limit does not stick (BIOS lock), DVFS on cpufreq instead" in out


def test_amd_without_limits_plans_dvfs(tmp_path: Path) -> None:
    with amd_no_writable_limits(tmp_path):
        before = snapshot(tmp_path)
        out = inspect(tmp_path, "--cap", "150")
        assert snapshot(tmp_path) == before
    assert "cpufreq policies: 8 (driver amd-pstate)" in out
    assert "warning: no RAPL package zone under powercap" not in out
    assert "cap 150 W: no writable RAPL limit; DVFS would throttle the 8 cpufreq policies" in out


def test_two_packages_without_limits_plan_dvfs_for_both(tmp_path: Path) -> None:
    # The cap is each package's: DVFS holds the packages' summed power under it times two.
    with amd_no_writable_limits(tmp_path, packages=2):
        out = inspect(tmp_path, "--cap", "100")
    assert "RAPL package zones: 2" in out
    assert "keep package power under 200 W (100 W per package x 2)" in out


def test_no_rapl_and_an_unknown_maximum(tmp_path: Path) -> None:
    with no_rapl(tmp_path):
        out = inspect(tmp_path, "--pct", "70")
    assert "RAPL package zones: 0" in out
    assert "70% of max: maximum unknown (no RAPL package zone with a PL1 limit)" in out
    assert "throttle CPUs by 30% on 4 cpufreq policies" in out


def test_a_bad_cap_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentpool", "inspect", "--sysfs-root", str(tmp_path), "--cap", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--cap" in done.stderr
