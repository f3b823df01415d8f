"""Make a built sysfs tree behave: energy counters that move, limits that bite.

This module owns the dynamics of a :class:`~agentpool.sim.sysfs.trees.SysfsTree`:
each step advances every zone's ``energy_uj`` by power x time from a small
model that reacts to what the agent wrote (the package's PL1 limit and the
policies' ``scaling_max_freq``), wraps at ``max_energy_range_uj``, and updates
``scaling_cur_freq``. Real package power cannot be observed on a CI box, so this
is the stand-in that lets host-mode RAPL and DVFS be tested end to end.

Model, per package (linear in frequency on purpose: predictable numbers in
tests matter more here than the cubic shape of real dynamic power)::

    ratio    = mean over policies (weighted by CPUs) of min(scaling_max, cpuinfo_max) / cpuinfo_max
    uncapped = idle + (demand - idle) * ratio
    power    = min(uncapped, PL1) + gauss(0, noise)        PL1 from constraint_0_power_limit_uw

Subzones get fixed shares of their package (core 60 %, uncore 10 %) and dram a
constant; the mmio duplicate mirrors its package's counter, as on real parts;
psys is the packages plus ``platform_watts``.

Two ways to drive it: :meth:`LiveSysfs.step` with an explicit duration, for
deterministic tests, and :meth:`LiveSysfs.start` for a background thread that
steps by real elapsed time, for end-to-end runs with agent processes. It never
writes a file the agent writes (limits, ``scaling_max_freq``), except to put
back a REVERT-locked limit.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentpool.sim.sysfs.trees import Policy, SysfsTree, Zone, ZoneKind, read_int, write_value

log = logging.getLogger(__name__)

_SUBZONE_SHARE = {"core": 0.6, "uncore": 0.1}


@dataclass(frozen=True)
class LiveModel:
    """How much each package wants to draw."""

    demand_watts: float | tuple[float, ...] = 120.0
    """Per package at full frequency and no cap; a tuple gives each package its own."""
    idle_watts: float = 25.0
    """Per package: what frequency scaling cannot remove."""
    dram_watts: float = 8.0
    platform_watts: float = 30.0
    noise_watts: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class LiveSample:
    """What one step did, for assertions."""

    seconds: float
    package_watts: tuple[float, ...]
    """Power of each package zone over the step, in package order."""
    cap_watts: tuple[float | None, ...]
    """PL1 read from each package (None: no readable limit)."""
    freq_ratio: float

    @property
    def total_watts(self) -> float:
        return sum(self.package_watts)


def _try_int(path: Path) -> int | None:
    try:
        return read_int(path)
    except (OSError, ValueError):
        # Mid-write by the agent, or a REJECT file whose holder closed it: keep going.
        return None


class LiveSysfs:
    """Advances a tree's counters. ``step`` and the thread are serialised by a lock."""

    def __init__(self, tree: SysfsTree, model: LiveModel | None = None) -> None:
        self.tree = tree
        self.model = model or LiveModel()
        packages = tree.packages
        if isinstance(self.model.demand_watts, tuple):
            if len(self.model.demand_watts) != len(packages):
                raise ValueError(
                    f"{len(self.model.demand_watts)} demands for {len(packages)} packages"
                )
            self._demand = list(self.model.demand_watts)
        else:
            self._demand = [self.model.demand_watts] * len(packages)
        self._rng = random.Random(self.model.seed)
        self._lock = threading.Lock()
        # Energy in floating microjoules, so sub-microjoule steps are not lost to rounding.
        self._energy = {z.label: float(read_int(z.energy_file)) for z in tree.zones}
        self._range = {z.label: read_int(z.path / "max_energy_range_uj") for z in tree.zones}
        self._caps: dict[str, float | None] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.error: BaseException | None = None
        """Set when the background thread died (e.g. the tree was deleted under it)."""

    def set_demand(self, watts: float, package: int | None = None) -> None:
        with self._lock:
            if package is None:
                self._demand = [watts] * len(self._demand)
            else:
                self._demand[package] = watts

    def energy_uj(self, label: str) -> int:
        """What the zone's ``energy_uj`` holds after the last step."""
        with self._lock:
            return int(self._energy[label])

    def freq_ratio(self) -> float:
        policies = self.tree.policies
        if not policies:
            return 1.0
        weighted = 0.0
        for p in policies:
            top = _try_int(p.scaling_max_freq) or p.max_khz
            weighted += min(top, p.max_khz) / p.max_khz * len(p.cpus)
        return weighted / sum(len(p.cpus) for p in policies)

    def _cap(self, zone: Zone) -> float | None:
        pl1 = zone.pl1
        if pl1 is None or _try_int(zone.path / "enabled") == 0:
            return None
        uw = _try_int(pl1.limit_file)
        if uw is None:
            return self._caps.get(zone.label)  # unreadable right now: keep the last one
        # A zero limit means "no limit" in powercap, as the subzones show.
        cap = uw / 1_000_000 if uw > 0 else None
        self._caps[zone.label] = cap
        return cap

    def step(self, seconds: float) -> LiveSample:
        """Advance every counter by ``seconds`` of simulated time."""
        if seconds < 0:
            raise ValueError(f"cannot step back in time ({seconds} s)")
        with self._lock:
            self.tree.revert_locked()
            ratio = self.freq_ratio()
            m = self.model
            watts: dict[int, float] = {}
            caps: list[float | None] = []
            binding: list[float] = []
            for i, zone in enumerate(self.tree.packages):
                uncapped = m.idle_watts + (self._demand[i] - m.idle_watts) * ratio
                cap = self._cap(zone)
                power = uncapped if cap is None else min(uncapped, cap)
                if m.noise_watts:
                    power += self._rng.gauss(0.0, m.noise_watts)
                power = max(0.0, power)
                assert zone.package is not None
                watts[zone.package] = power
                caps.append(cap)
                dynamic = uncapped - m.idle_watts
                binding.append((power - m.idle_watts) / dynamic if dynamic > 0 else 1.0)
            for zone in self.tree.zones:
                self._advance(zone, self._zone_power(zone, watts), seconds)
            self._update_freqs(self.tree.policies, min(binding, default=1.0))
            return LiveSample(seconds, tuple(watts.values()), tuple(caps), ratio)

    def _zone_power(self, zone: Zone, packages: dict[int, float]) -> float:
        if zone.kind is ZoneKind.PSYS:
            return sum(packages.values()) + self.model.platform_watts
        assert zone.package is not None
        if zone.kind is ZoneKind.SUBZONE:
            if zone.name == "dram":
                return self.model.dram_watts
            return packages[zone.package] * _SUBZONE_SHARE.get(zone.name, 0.05)
        return packages[zone.package]  # the package itself, or its mmio mirror

    def _advance(self, zone: Zone, watts: float, seconds: float) -> None:
        span = self._range[zone.label]
        energy = self._energy[zone.label] + watts * seconds * 1_000_000
        # The counter wraps to 0 past max_energy_range_uj: readers add the range back.
        self._energy[zone.label] = energy % span if span > 0 else energy
        write_value(zone.energy_file, int(self._energy[zone.label]))

    @staticmethod
    def _update_freqs(policies: Sequence[Policy], binding: float) -> None:
        # A binding PL1 pulls the clock down in proportion to the power it removed.
        for p in policies:
            top = min(_try_int(p.scaling_max_freq) or p.max_khz, p.max_khz)
            floor = max(p.min_khz, _try_int(p.scaling_min_freq) or p.min_khz)
            cur = max(floor, min(top, int(top * max(0.0, min(1.0, binding)))))
            write_value(p.scaling_cur_freq, cur)

    # -- background thread -------------------------------------------------

    def start(self, interval: float = 0.1) -> LiveSysfs:
        """Step by real elapsed time every ``interval`` seconds until :meth:`stop`."""
        if self._thread is not None:
            raise RuntimeError("already started")
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(interval,), name="sysfs-live", daemon=True
        )
        self._thread.start()
        return self

    def _run(self, interval: float) -> None:
        last = time.monotonic()
        while not self._stop.wait(interval):
            now = time.monotonic()
            try:
                self.step(now - last)
            except OSError as exc:
                self.error = exc
                log.warning("live sysfs stopped: %s", exc)
                return
            last = now

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(5)
        self._thread = None

    def __enter__(self) -> LiveSysfs:
        # ``with LiveSysfs(t).start(interval=...)`` must not start a second thread.
        return self if self._thread is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
