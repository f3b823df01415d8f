"""What the host's sysfs shows about CPU power control: package zones, cpufreq, counters.

The RAPL package zones with their PL1 limit, min and max and whether the
limit looks writable, the cpufreq policies with the frequency landmarks, and
whether the energy counters read. The same discovery the host backends use
(:mod:`agentpool.backends.sysfs`), read only: nothing here writes anywhere,
which is what lets ``agentpool inspect`` promise so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from agentpool.backends.sysfs.cpufreq import discover_policies
from agentpool.backends.sysfs.files import read_text, try_read_int
from agentpool.backends.sysfs.rapl import PackageZone, discover_package_zones
from agentpool.errors import SysfsError


@dataclass(frozen=True)
class ZoneFacts:
    label: str
    max_w: float | None
    min_w: float | None
    limit_w: float | None
    """The PL1 limit set now."""
    writable: bool
    """The PL1 file's permissions allow a write (a BIOS lock only shows when writing)."""


@dataclass(frozen=True)
class HostFacts:
    """What the host's sysfs shows about CPU power control."""

    zones: tuple[ZoneFacts, ...] = ()
    policies: int = 0
    driver: str | None = None
    min_mhz: float | None = None
    nominal_mhz: float | None = None
    max_mhz: float | None = None
    energy_readable: bool = False
    warnings: tuple[str, ...] = field(default=())

    @property
    def control_available(self) -> bool:
        return any(z.writable for z in self.zones) or self.policies > 0


def _watts(path: Path | None) -> float | None:
    value = try_read_int(path) if path is not None else None
    return value / 1_000_000 if value is not None and value > 0 else None


def _zone_facts(zone: PackageZone) -> ZoneFacts:
    writable = zone.limit_file is not None and os.access(zone.limit_file, os.W_OK)
    return ZoneFacts(
        zone.label, _watts(zone.max_file), _watts(zone.min_file), _watts(zone.limit_file), writable
    )


def _mhz(path: Path) -> float | None:
    value = try_read_int(path)
    return value / 1000 if value is not None and value > 0 else None


def discover_host(root: Path) -> HostFacts:
    """Read the host's powercap and cpufreq trees under ``root`` (a sysfs mount)."""
    zones = tuple(_zone_facts(z) for z in discover_package_zones(root))
    policies = discover_policies(root)
    warnings: list[str] = []
    if not zones:
        warnings.append("no RAPL package zone under powercap")
    elif not any(z.writable for z in zones):
        warnings.append("RAPL package limits are not writable")
    if zones and any(z.max_w is None for z in zones):
        warnings.append("a RAPL package zone reports no PL1 max_power_uw")
    if not policies:
        warnings.append("no cpufreq policy")
    driver = min_mhz = nominal = max_mhz = None
    if policies:
        first = policies[0].path
        try:
            driver = read_text(first / "scaling_driver")
        except SysfsError:
            driver = None
        min_mhz = min(p.cpuinfo_min for p in policies) / 1000
        max_mhz = max(p.cpuinfo_max for p in policies) / 1000
        nominal = _mhz(first / "base_frequency")  # intel_pstate exposes the nominal clock
    energy = any(
        try_read_int(z.path / "energy_uj") is not None for z in discover_package_zones(root)
    )
    return HostFacts(
        zones, len(policies), driver, min_mhz, nominal, max_mhz, energy, tuple(warnings)
    )
