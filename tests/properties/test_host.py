"""Host control against any sysfs content, and any accepted cap against the host backends.

A sysfs-shaped tree (agentpool.sim.sysfs.trees: the kernel's layout, links
and all) is built per example, then some of the files the agent reads are
made junk, empty, huge, negative, missing or unreadable. A node controller
enforces an accepted cap on it (absurd values included: 1e308 W) for a
few ticks, and restores on stop. Whatever the tree holds:

- every tick returns a result (never an exception), whose status is JSON
  with finite numbers and of bounded size;
- the agent writes only package PL1 limits and ``scaling_max_freq``, and
  only integers inside the range the tree states (where it states a sane one);
- a tick that did not end on RAPL leaves every PL1 limit as it was (no half
  cap), and a stop puts back every file the agent changed.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from agentpool.config.options import DvfsControllerKind
from agentpool.config.settings import DvfsSettings, Settings
from agentpool.controller.metrics import NodeMetrics
from agentpool.controller.node import NodeController
from agentpool.kube.status import status_body
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.results import Backend
from agentpool.sim.sysfs.trees import CpufreqSpec, LockMode, RaplSpec, build
from tests.support.budget import examples
from tests.support.clock import Clock

NODE = "worker-0"
INTEL = {"feature.node.kubernetes.io/cpu-vendor": "GenuineIntel"}
MAX_STATUS_BYTES = 64 * 1024
U63 = 2**63 - 1

JUNK = (
    "", "abc", "-5", "0", "-0", "9" * 30, "1e9", " 12 ", "12\n13", "\x00", "0x10", "1_000",
    "٣", "18446744073709551616", "-9223372036854775809", "package-0", "long_term", "short_term",
)  # fmt: skip
"""File contents a kernel never writes, and some it does in the wrong place."""
BROKEN = ("missing", "directory", "dangling", "binary")
"""Ways a file can fail to be a readable attribute at all."""

RAPL_FILES = (
    "name", "enabled", "energy_uj", "max_energy_range_uj", "constraint_0_name",
    "constraint_0_power_limit_uw", "constraint_0_max_power_uw", "constraint_0_min_power_uw",
)  # fmt: skip
CPUFREQ_FILES = (
    "cpuinfo_min_freq", "cpuinfo_max_freq", "scaling_min_freq", "scaling_max_freq",
    "scaling_cur_freq", "affected_cpus",
)  # fmt: skip

_dirs = itertools.count()

# Any accepted cap: the CRD's minimum, everyday values, and the absurd but legal ones.
accepted_caps = st.one_of(
    st.sampled_from([1.0, 1.0000001, 120.0, 1e4, 1e12, 1e308, 1.7976931348623157e308]),
    st.floats(min_value=1, max_value=1e308),
)
contents = st.one_of(
    st.sampled_from(JUNK),
    st.sampled_from(BROKEN),
    st.integers(-(2**70), 2**70).map(str),
    st.integers(0, 400_000_000).map(str),
)


def corrupt(path: Path, how: str) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    if how == "missing":
        return
    if how == "directory":
        path.mkdir()
    elif how == "dangling":
        path.symlink_to(path.parent / "no-such-attribute")
    elif how == "binary":
        path.write_bytes(b"\xff\xfe\x00\x80")
    else:
        path.write_text(how + "\n")


@st.composite
def junk_trees(
    draw: st.DrawFn,
) -> tuple[RaplSpec | None, CpufreqSpec | None, list[tuple[str, str]]]:
    """A tree's spec and the (relative path, content) of the files to make junk."""
    rapl = None
    if draw(st.booleans()):
        rapl = RaplSpec(
            packages=draw(st.integers(1, 3)),
            tdp_watts=draw(st.sampled_from([35.0, 165.0, 400.0])),
            mmio=draw(st.booleans()),
            psys=draw(st.booleans()),
            named_constraints=draw(st.booleans()),
            lock=draw(st.sampled_from(list(LockMode))),
            max_files=draw(st.booleans()),
            min_watts=draw(st.sampled_from([None, 10.0, 80.0])),
            subzones=(),
        )
    cpufreq = None
    if draw(st.booleans()):
        cpufreq = CpufreqSpec(cpus=4, cpus_per_policy=draw(st.sampled_from([1, 2])),
                              legacy=draw(st.booleans()))
    targets = []
    if rapl is not None:
        base = "devices/virtual/powercap/intel-rapl"
        targets += [f"{base}/intel-rapl:{n}/{f}" for n in range(rapl.packages) for f in RAPL_FILES]
    if cpufreq is not None:
        owners = sorted(min(g) for g in cpufreq.groups())
        for owner in owners:
            base = (f"devices/system/cpu/cpu{owner}/cpufreq" if cpufreq.legacy
                    else f"devices/system/cpu/cpufreq/policy{owner}")
            targets += [f"{base}/{f}" for f in CPUFREQ_FILES]
    junk: list[tuple[str, str]] = []
    if targets:
        chosen = draw(st.lists(st.sampled_from(targets), max_size=4, unique=True))
        junk = [(path, draw(contents)) for path in chosen]
    return rapl, cpufreq, junk


def read_file(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return None


def snapshot(root: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if (Path(dirpath) / d).is_symlink()]:
            path = Path(dirpath) / name
            if not path.is_dir():
                out[str(path.relative_to(root))] = read_file(path)
    return out


def integer(text: str | None) -> int | None:
    """What a sane attribute holds: one ASCII decimal integer (the oracle; not the agent's)."""
    if text is None:
        return None
    stripped = text.strip()
    digits = stripped[1:] if stripped.startswith("-") else stripped
    return int(stripped) if digits.isascii() and digits.isdigit() else None


def stated_range(before: dict[str, str | None], directory: str, low: str, high: str) -> tuple[
    int | None, int | None
]:
    """The [low, high] a directory's files state, each None where it is not a sane value."""
    lo = integer(before.get(f"{directory}/{low}"))
    hi = integer(before.get(f"{directory}/{high}"))
    if hi is not None and hi <= 0:
        hi = None
    if lo is not None and (lo <= 0 or (hi is not None and lo > hi)):
        lo = None
    return lo, hi


def check_write(path: str, text: str | None, before: dict[str, str | None]) -> None:
    """A file the agent changed: which it may be, and what it may hold."""
    value = integer(text)
    assert value is not None, (path, text)
    directory, _, name = path.rpartition("/")
    if name == "constraint_0_power_limit_uw":
        assert "/intel-rapl:" in path, path
        assert "mmio" not in path, path
        assert 0 < value <= U63, (path, value)
        lo, hi = stated_range(before, directory, "constraint_0_min_power_uw",
                              "constraint_0_max_power_uw")
        assert lo is None or value >= lo, (path, value, lo)
        assert hi is None or value <= hi, (path, value, hi)
    elif name == "scaling_max_freq":
        lo, hi = stated_range(before, directory, "cpuinfo_min_freq", "cpuinfo_max_freq")
        assert lo is not None, (path, value)  # an unusable policy is never written
        assert hi is not None, (path, value)
        assert lo <= value <= hi, (path, value, lo, hi)
    else:
        raise AssertionError(f"the agent wrote {path}: {text!r}")


def check_status(result: Any) -> None:
    body = json.dumps(status_body(result), allow_nan=False)  # finite JSON, or this raises
    assert len(body) <= MAX_STATUS_BYTES


@settings(max_examples=examples(60))
@given(
    tree=junk_trees(),
    cap=accepted_caps,
    controller=st.sampled_from(list(DvfsControllerKind)),
    energy=st.lists(st.integers(-(2**40), 2**40), min_size=3, max_size=3),
)
def test_any_sysfs_content_gives_a_result_and_only_sane_writes(
    tree: tuple[RaplSpec | None, CpufreqSpec | None, list[tuple[str, str]]],
    cap: float,
    controller: DvfsControllerKind,
    energy: list[int],
) -> None:
    rapl, cpufreq, junk = tree
    scratch = Path(tempfile.mkdtemp(prefix="agentpool-prop-"))
    root = scratch / NODE
    built = build(root, rapl=rapl, cpufreq=cpufreq)
    try:
        for path, content in junk:
            corrupt(root / path, content)
        before = snapshot(root)
        clock = Clock()
        settings = Settings(node_name=NODE, sysfs_root=str(scratch / "{node}"),
                            dvfs=DvfsSettings(controller=controller))
        metrics = NodeMetrics(NODE, registry=CollectorRegistry())
        node = NodeController(settings.controller(), NODE, metrics, clock=clock)
        profile = {"metadata": {"name": "p"},
                   "spec": {"nodeName": NODE, "profile": "eco",
                            "cpu": {"packagePowerCapWatts": cap}}}
        node.update(NodeInputs(NODE, labels=INTEL, power_profile=profile))
        for step in energy:
            result = node.tick()
            check_status(result)
            after = snapshot(root)
            for path, text in after.items():
                if before.get(path) != text:
                    check_write(path, text, before)
            if result.backend is not Backend.RAPL:
                for path, text in after.items():
                    if path.endswith("constraint_0_power_limit_uw"):
                        assert text == before.get(path), (path, result)
            clock.advance(20.0)
            for zone in built.packages:  # the counters move (the agent never writes them)
                counter = integer(read_file(zone.energy_file))
                if counter is not None and not zone.energy_file.is_symlink():
                    zone.energy_file.write_text(f"{max(0, counter + step)}\n")
                    before[str(zone.energy_file.relative_to(root))] = read_file(zone.energy_file)
        problems = node.restore()  # a junk original may not go back, but says so
        assert all(isinstance(p, str) for p in problems)
        restored = snapshot(root)
        for path, text in restored.items():
            if path.endswith(("constraint_0_power_limit_uw", "scaling_max_freq")):
                original = before.get(path)
                assert integer(original) is None or integer(text) == integer(original), (
                    path, text, original
                )
    finally:
        built.close()
        shutil.rmtree(scratch, ignore_errors=True)


@settings(max_examples=examples(200))
@given(
    controller=st.sampled_from(list(DvfsControllerKind)),
    cap=accepted_caps,
    readings=st.lists(
        st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False),
                  st.sampled_from([0.0, -1.0, 1e308, -1e308, 5e-324])),
        min_size=1, max_size=12,
    ),
    levels=st.sampled_from([None, 1, 2, 4, 64]),
)
def test_dvfs_controllers_take_any_reading_and_any_cap(
    controller: DvfsControllerKind, cap: float, readings: list[float | None], levels: int | None
) -> None:
    from agentpool.controller.dvfs.throttle import make_controller

    dvfs = make_controller(DvfsSettings(controller=controller, cooldown_s=0.0))
    dvfs.set_levels(levels)
    for i, reading in enumerate(readings):
        dvfs.step(reading, cap, 1000.0 + 20.0 * i)
        state = dvfs.state
        assert isinstance(state.throttle_pct, int)
        assert 0 <= state.throttle_pct <= 100
        for value in (state.ema, state.observed):
            assert value is None or math.isfinite(value), (reading, value)
        low, high = dvfs.band(cap)
        assert not (math.isnan(low))
        assert not (math.isnan(high))
