"""RAPL through the powercap sysfs: find package zones, set PL1, read energy.

Zone selection is where real machines bite, so it is deliberate:

- only top-level ``intel-rapl:N`` zones whose ``name`` starts with ``package``
  count: core/uncore/dram subzones (``intel-rapl:N:M``) are inside a package's
  budget, ``psys`` is the whole platform, and ``intel-rapl-mmio:N`` is the same
  package exposed a second time through MMIO (writing both would double-apply);
- a zone with ``enabled`` = 0 does not count;
- ``class/powercap/intel-rapl:0`` and ``devices/virtual/powercap/intel-rapl/
  intel-rapl:0`` are one zone: paths are resolved before de-duplication.

The cap is the limit of each CPU package, as Joulie's own agent applies it
(``packagePowerCapWatts``, "absolute package cap"): every package zone gets
the same value, written to the ``long_term`` (PL1) constraint, clamped into
the range its ``min``/``max`` files state (:func:`limit_range`), and read
back; a value that does not stick (BIOS lock, AMD's read-only powercap)
makes RAPL unavailable, and nothing is left half-applied. Any cap the parser
accepts (>= 1 W, up to 1e308 W) becomes a limit inside that range: a cap
beyond the hardware means "as much as the zone allows", never an error.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from agentpool.backends.sysfs.files import HostApply, Originals, read_int, read_text, try_read_int
from agentpool.errors import JournalError, RaplUnavailableError, SysfsError

log = logging.getLogger(__name__)

OWNER = "rapl"
"""This backend's entries in the journal of originals."""
MAX_LIMIT_UW = 2**63 - 1
"""The largest limit ever written: where a zone states no maximum, what a 64-bit sysfs
attribute holds (the kernel then clamps it to its register, or it does not stick)."""
_TOP_ZONE = re.compile(r"^intel-rapl:(\d+)$")
_CONSTRAINT_NAME = re.compile(r"^constraint_(\d+)_name$")


def stuck(wanted: int, read_back: int) -> bool:
    """Whether a written limit took effect.

    The hardware stores limits in power units (typically 1/8 W), so the
    kernel may read back a rounded value; anything within 0.5% or 0.25 W of
    what was written counts as applied. A locked register reads back the old
    value, which is far off unless it already was the target.
    """
    return abs(read_back - wanted) <= max(250_000, wanted // 200)


@dataclass(frozen=True)
class PackageZone:
    """One physical package zone."""

    label: str
    """Directory name (``intel-rapl:0``): stable and unique, used as the metric's zone."""
    path: Path
    """Resolved directory."""
    limit_file: Path | None
    """PL1 ``constraint_N_power_limit_uw``, or None when the zone has no limit."""
    max_file: Path | None
    """``constraint_N_max_power_uw`` when present."""
    min_file: Path | None = None
    """``constraint_N_min_power_uw`` when present."""


def stated_limits(zone: PackageZone) -> tuple[int | None, int | None]:
    """The (min, max) microwatts a zone's PL1 constraint files state; None where a file is
    missing, unreadable or holds no sane value (not positive, beyond a 64-bit attribute,
    or a minimum above the maximum)."""
    ceiling = try_read_int(zone.max_file) if zone.max_file is not None else None
    floor = try_read_int(zone.min_file) if zone.min_file is not None else None
    if ceiling is not None and not 0 < ceiling <= MAX_LIMIT_UW:
        ceiling = None
    if floor is not None and not 0 < floor <= (ceiling or MAX_LIMIT_UW):
        floor = None
    return floor, ceiling


def limit_range(zone: PackageZone) -> tuple[int, int]:
    """The [min, max] microwatts a limit written to ``zone`` is clamped into."""
    floor, ceiling = stated_limits(zone)
    return floor or 1, ceiling or MAX_LIMIT_UW


def _powercap_dirs(root: Path) -> list[Path]:
    found: list[Path] = []
    for base in (root / "class" / "powercap", root / "devices/virtual/powercap/intel-rapl"):
        if base.is_dir():
            found.extend(p for p in base.iterdir() if _TOP_ZONE.match(p.name))
    return found


def _pl1(zone: Path) -> tuple[Path | None, Path | None, Path | None]:
    names: dict[str, int] = {}
    for entry in zone.iterdir():
        match = _CONSTRAINT_NAME.match(entry.name)
        if match:
            try:
                names[read_text(entry)] = int(match.group(1))
            except SysfsError:
                continue
    if "long_term" in names:
        index: int | None = names["long_term"]
    elif not names:
        index = 0  # old kernels and some VMs expose unnamed constraints; 0 is PL1 there
    else:
        index = None  # named constraints but no long_term: not a PL1 we understand
    if index is None:
        return None, None, None
    limit = zone / f"constraint_{index}_power_limit_uw"
    maximum = zone / f"constraint_{index}_max_power_uw"
    minimum = zone / f"constraint_{index}_min_power_uw"
    return (
        limit if limit.exists() else None,
        maximum if maximum.exists() else None,
        minimum if minimum.exists() else None,
    )


def discover_package_zones(root: Path) -> list[PackageZone]:
    """Enabled package zones under ``root`` (a sysfs mount), each physical zone once."""
    zones: dict[Path, PackageZone] = {}
    for entry in sorted(_powercap_dirs(root), key=lambda p: int(p.name.split(":")[1])):
        try:
            resolved = entry.resolve(strict=True)
            name = read_text(entry / "name")
        except (OSError, SysfsError):
            continue
        if resolved in zones or not name.startswith("package"):
            continue
        if try_read_int(entry / "enabled") == 0:
            continue
        limit, maximum, minimum = _pl1(resolved)
        zones[resolved] = PackageZone(entry.name, resolved, limit, maximum, minimum)
    return sorted(zones.values(), key=lambda z: int(z.label.split(":")[1]))


class PackageZones:
    """The package zones under one sysfs root: discovered once, kept while they work.

    Discovery lists directories and resolves links (a dozen ``getdents`` and
    ``readlink`` calls). Done on every tick it also churned CPython's table
    of interned strings (pathlib interns every name it parses, and the names
    died with the tick), whose periodic resize copied pages into each
    worker. Package zones do not come and go
    on a running host, so they are kept once found. An empty result is not
    kept (a powercap driver loaded after start is picked up on a later
    tick), and a caller whose read or write failed calls :meth:`forget`, so
    a zone that vanished is looked for again on the next use.
    """

    def __init__(self, root: Path) -> None:
        self._root = root
        self._zones: list[PackageZone] = []

    def get(self) -> list[PackageZone]:
        if not self._zones:
            self._zones = discover_package_zones(self._root)
        return self._zones

    def forget(self) -> None:
        self._zones = []


class RaplHost:
    """Sets the node's package power cap through powercap sysfs.

    Not thread safe: one node controller owns one instance.
    """

    def __init__(
        self, root: Path, originals: Originals, zones: PackageZones | None = None
    ) -> None:
        self._zones = zones or PackageZones(root)
        self._originals = originals

    def zones(self) -> list[PackageZone]:
        return self._zones.get()

    def apply(self, cap_watts: float) -> dict[str, int]:
        """Enforce ``cap_watts`` on every package; returns microwatts set per zone.

        Raises RaplUnavailableError when no package zone has a writable PL1 or a
        write fails or does not stick, and JournalError when an original cannot be
        recorded; zones already written in this call are put back first, so the host
        is never left with half a cap.
        """
        zones = [z for z in self.zones() if z.limit_file is not None]
        if not zones:
            raise RaplUnavailableError("no RAPL package zone with a PL1 limit")
        # A float until clamped: 1e308 W is infinite microwatts, which int() refuses.
        cap_uw = cap_watts * 1_000_000
        host = HostApply(self._originals, OWNER)
        applied: dict[str, int] = {}
        try:
            for zone in zones:
                assert zone.limit_file is not None
                low, high = limit_range(zone)
                want = int(min(max(cap_uw, low), high))
                current = read_int(zone.limit_file)
                if not stuck(want, current):
                    got = host.write(zone.limit_file, current, want)
                    if not stuck(want, got):
                        raise RaplUnavailableError(
                            f"{zone.limit_file}: wrote {want} but read back {got} "
                            "(limit locked or read-only)"
                        )
                applied[zone.label] = want
        except (SysfsError, RaplUnavailableError, JournalError) as exc:
            host.undo()
            if not all(zone.path.is_dir() for zone in zones):
                self._zones.forget()  # a zone went away: look again next time
            if isinstance(exc, (RaplUnavailableError, JournalError)):
                raise  # no journal is no reason to fall back: DVFS would need one too
            raise RaplUnavailableError(str(exc)) from exc
        return applied

    def restore(self) -> list[str]:
        """Put back every limit this agent changed; returns the problems, if any."""
        return self._originals.restore(OWNER)

    def holds_originals(self) -> bool:
        """Whether some limit this agent wrote is not restored yet."""
        return bool(self._originals.items(OWNER))


@dataclass(frozen=True)
class EnergySample:
    energy_uj: dict[str, int]
    """Latest raw counter per zone label."""
    power_w: dict[str, float]
    """Power per zone over the last interval (empty on the priming sample)."""

    @property
    def total_w(self) -> float | None:
        return sum(self.power_w.values()) if self.power_w else None


class EnergyMeter:
    """Package power from ``energy_uj`` deltas; the first sample only primes.

    A counter that went backwards wrapped: add ``max_energy_range_uj``; if that
    reads 0 the wrap cannot be undone and the zone's sample is dropped.
    """

    def __init__(self, root: Path, zones: PackageZones | None = None) -> None:
        self._zones = zones or PackageZones(root)
        self._last: dict[str, tuple[int, float]] = {}

    def sample(self, now: float) -> EnergySample:
        energies: dict[str, int] = {}
        powers: dict[str, float] = {}
        for zone in self._zones.get():
            value = try_read_int(zone.path / "energy_uj")
            if value is None:
                if not zone.path.is_dir():
                    self._zones.forget()  # the zone went away: look again next tick
                continue
            energies[zone.label] = value
            previous = self._last.get(zone.label)
            self._last[zone.label] = (value, now)
            if previous is None or now <= previous[1]:
                continue
            delta = value - previous[0]
            if delta < 0:
                span = try_read_int(zone.path / "max_energy_range_uj") or 0
                if span <= 0:
                    continue
                delta += span
            powers[zone.label] = delta / 1_000_000 / (now - previous[1])
        return EnergySample(energies, powers)
