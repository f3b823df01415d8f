"""Builders of sysfs-shaped trees: RAPL powercap zones and cpufreq policies.

This module owns the *shape* of the host files the agent's host backends read
and write (``SYSFS_ROOT/class/powercap/...``, ``SYSFS_ROOT/devices/system/cpu/
...``). No test machine has two Intel sockets, a BIOS-locked RAPL or an AMD
part whose powercap is read-only, and real ``/sys`` cannot be written by tests,
so these trees are the stand-in. They copy the layout of a real kernel
(relative ``class/powercap`` links into ``devices/virtual/powercap``, the
``intel-rapl-mmio`` duplicate of package 0, ``psys``, ``cpuY/cpufreq`` links
to shared policies) because that layout is where host code goes wrong.

Each builder returns a :class:`SysfsTree` naming every file it made, so tests
assert on exact paths and contents. The trees are static; making energy
counters move is :mod:`agentpool.sim.sysfs.dynamics`. This module never touches
anything outside the root it is given (locked files point into ``/proc``, see
:class:`LockMode`).

Locked limits (BIOS lock, AMD): tests run as root, and root ignores file
modes, so ``chmod 0444`` cannot make a plain file refuse a write. What can is a
sealed memfd: after ``F_SEAL_WRITE`` the kernel refuses every write with EPERM
*even for root*, while reads keep returning the original number, exactly how a
locked sysfs limit looks to the agent (the kernel's answer there is EACCES or
EIO; the agent must treat any OSError the same). The limit file is a symlink to
``/proc/<builder pid>/fd/<n>``, so it lives as long as the process that built
the tree keeps it open (:meth:`SysfsTree.close`). That is :attr:`LockMode.REJECT`,
deterministic and needing no timing. The other case, a kernel that accepts the
write but reads back the old value, cannot be made from plain files without a
filesystem of our own (FUSE is not available), so :attr:`LockMode.REVERT`
approximates it: an ordinary file that :meth:`SysfsTree.revert_locked` (called
by every live step) puts back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import fcntl
import os
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POWERCAP = "devices/virtual/powercap"
CPU = "devices/system/cpu"
# The counter range of Intel RAPL (32-bit counter * 61.035 uJ energy unit):
# what real package zones report, so wraps happen where they really do.
MAX_ENERGY_RANGE_UJ = 262_143_328_850


class LockMode(enum.Enum):
    """How a zone's power limit files behave when written."""

    WRITABLE = "writable"
    # ordinary regular files: a write sticks
    REJECT = "reject"
    # sealed memfd behind a symlink: reads the original, every write fails with EPERM
    REVERT = "revert"
    # accepts the write; the next live step (or revert_locked()) restores the original
    ABSENT = "absent"
    # no constraint files at all: an energy-only zone


class ZoneKind(enum.Enum):
    PACKAGE = "package"
    # intel-rapl:N named package-N: the zones the cap is written to
    SUBZONE = "subzone"
    # intel-rapl:N:M (core, uncore, dram): inside the package's budget
    MMIO = "mmio"
    # intel-rapl-mmio:N: package N a second time; counting it double-counts
    PSYS = "psys"
    # the whole platform


@dataclass(frozen=True)
class RaplSpec:
    """What powercap looks like on the machine."""

    packages: int = 2
    tdp_watts: float = 165.0
    """``constraint_0_max_power_uw`` of each package."""
    pl1_watts: float | None = None
    """Initial long-term limit; None means the TDP."""
    pl2_watts: float | None = None
    """Initial short-term limit; None means 1.2 x TDP."""
    subzones: tuple[str, ...] = ("core", "uncore", "dram")
    mmio: bool = True
    psys: bool = True
    named_constraints: bool = True
    """False drops ``constraint_N_name`` files, as old kernels and some VMs do."""
    lock: LockMode = LockMode.WRITABLE
    """Applies to the package zones and their mmio duplicates."""
    disabled: frozenset[int] = frozenset()
    """Packages whose ``enabled`` reads 0."""
    energy_start_uj: tuple[int, ...] | None = None
    """Initial ``energy_uj`` per package; None gives distinct made-up values."""
    max_energy_range_uj: int = MAX_ENERGY_RANGE_UJ
    max_files: bool = True
    """False drops every ``constraint_N_max_power_uw`` (some firmware reports none)."""
    min_watts: float | None = None
    """``constraint_0_min_power_uw`` of each package; None writes no min file."""


@dataclass(frozen=True)
class CpufreqSpec:
    """How CPUs are grouped into cpufreq policies."""

    cpus: int = 8
    cpus_per_policy: int = 2
    interleave: bool = True
    """True: SMT siblings share a policy (cpu i with i + cpus/k); False: neighbours do."""
    min_khz: int = 800_000
    max_khz: int = 3_500_000
    driver: str = "acpi-cpufreq"
    governor: str = "performance"
    legacy: bool = False
    """Old kernels: ``cpuY/cpufreq`` directories (shared ones linked to the owner's), no policyN."""

    def groups(self) -> list[tuple[int, ...]]:
        if self.cpus <= 0 or self.cpus_per_policy <= 0 or self.cpus % self.cpus_per_policy:
            raise ValueError(f"{self.cpus} CPUs do not split into groups of {self.cpus_per_policy}")
        count = self.cpus // self.cpus_per_policy
        if self.interleave:
            return [tuple(j + m * count for m in range(self.cpus_per_policy)) for j in range(count)]
        k = self.cpus_per_policy
        return [tuple(range(j * k, j * k + k)) for j in range(count)]


@dataclass(frozen=True)
class Constraint:
    index: int
    name: str | None
    """``long_term`` / ``short_term``; None when the tree has unnamed constraints."""
    limit_file: Path
    max_file: Path | None
    original_uw: int


@dataclass(frozen=True)
class Zone:
    label: str
    """Directory name: ``intel-rapl:0``, ``intel-rapl:0:1``, ``intel-rapl-mmio:0``."""
    name: str
    """Content of the ``name`` file."""
    kind: ZoneKind
    path: Path
    """The real directory under ``devices/virtual/powercap``."""
    link: Path
    """Its ``class/powercap`` symlink."""
    package: int | None
    """The package it measures (None for psys)."""
    constraints: tuple[Constraint, ...]

    @property
    def energy_file(self) -> Path:
        return self.path / "energy_uj"

    @property
    def pl1(self) -> Constraint | None:
        """The long-term constraint (index 0 in every tree built here)."""
        return next((c for c in self.constraints if c.index == 0), None)


@dataclass(frozen=True)
class Policy:
    index: int
    """N of ``policyN`` (the first CPU of the group, as the kernel names it)."""
    path: Path
    cpus: tuple[int, ...]
    min_khz: int
    max_khz: int

    @property
    def scaling_max_freq(self) -> Path:
        return self.path / "scaling_max_freq"

    @property
    def scaling_min_freq(self) -> Path:
        return self.path / "scaling_min_freq"

    @property
    def scaling_cur_freq(self) -> Path:
        return self.path / "scaling_cur_freq"


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


@dataclass(eq=False)
class SysfsTree:
    """What a builder made. Close it (or use ``with``) to release REJECT-locked files."""

    root: Path
    profile: str
    zones: tuple[Zone, ...] = ()
    policies: tuple[Policy, ...] = ()
    cpu_dirs: tuple[Path, ...] = ()
    locked: dict[Path, int] = field(default_factory=dict)
    """Limit files that do not take writes, with the value they keep."""
    lock: LockMode = LockMode.WRITABLE
    _fds: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        # A forgotten close() must not leak descriptors for the rest of a test session.
        self._finalizer = weakref.finalize(self, _close_all, self._fds)

    @property
    def packages(self) -> tuple[Zone, ...]:
        return tuple(z for z in self.zones if z.kind is ZoneKind.PACKAGE)

    def zone(self, label: str) -> Zone:
        for z in self.zones:
            if z.label == label:
                return z
        raise KeyError(label)

    def revert_locked(self) -> int:
        """REVERT mode: put back every locked limit that was written; returns how many."""
        if self.lock is not LockMode.REVERT:
            return 0
        changed = 0
        for path, value in self.locked.items():
            if read_int(path) != value:
                write_value(path, value)
                changed += 1
        return changed

    def close(self) -> None:
        """Release REJECT-locked files; their symlinks dangle afterwards."""
        self._finalizer()

    def __enter__(self) -> SysfsTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_int(path: Path) -> int:
    return int(path.read_text().strip())


def write_value(path: Path, value: int | str) -> None:
    """Rewrite a small attribute in place so a concurrent reader never sees it empty.

    ``open(path, "w")`` truncates at open and writes later: a reader in between
    reads "". Renaming a temp file over it would be atomic, but would replace a
    symlink with a file and leave a reader holding the old inode (agents that
    keep ``energy_uj`` open and ``pread`` it) on stale data forever. So: one
    ``pwrite`` at offset 0, padding with spaces when the new text is shorter,
    then trim. A reader sees the old text, the new one plus blanks, or the new
    one; ``int()`` parses all three. A single write of a few bytes to one page
    is not torn in practice.
    """
    data = f"{value}\n".encode()
    fd = os.open(path, os.O_WRONLY)
    try:
        old = os.fstat(fd).st_size
        os.pwrite(fd, data + b" " * max(0, old - len(data)), 0)
        if old > len(data):
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _put(path: Path, value: object) -> None:
    path.write_text(f"{value}\n")


def _link(link: Path, target: Path) -> None:
    # Relative, like the kernel's, so a tree still resolves after being moved.
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def _sealed(path: Path, value: int, fds: list[int]) -> None:
    fd = os.memfd_create(f"locked-{path.name}", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    try:
        os.write(fd, f"{value}\n".encode())
        os.fchmod(fd, 0o444)  # what ls shows for a locked sysfs limit
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except BaseException:
        os.close(fd)
        raise
    fds.append(fd)
    # /proc/<pid>, not /proc/self: the reader is another process (an agent worker).
    path.symlink_to(f"/proc/{os.getpid()}/fd/{fd}")


class _RaplBuilder:
    def __init__(self, root: Path, spec: RaplSpec, tree: SysfsTree) -> None:
        self.root = root
        self.spec = spec
        self.tree = tree
        self.zones: list[Zone] = []

    def build(self) -> list[Zone]:
        spec = self.spec
        base = self.root / POWERCAP / "intel-rapl"
        base.mkdir(parents=True)
        _put(base / "enabled", 1)
        _link(self.root / "class/powercap/intel-rapl", base)
        starts = spec.energy_start_uj or tuple(
            123_456_789 * (i + 1) for i in range(spec.packages)
        )
        tdp = spec.tdp_watts
        pl1, pl2 = spec.pl1_watts or tdp, spec.pl2_watts or tdp * 1.2
        package_limits: list[tuple[float, float | None, int]] = [
            (pl1, tdp, 999_424), (pl2, tdp * 2, 2_440)
        ]
        for n in range(spec.packages):
            zone = self.zone(
                base / f"intel-rapl:{n}", f"package-{n}", ZoneKind.PACKAGE, n,
                starts[n], package_limits, spec.lock, enabled=n not in spec.disabled,
            )
            for m, sub in enumerate(spec.subzones):
                self.zone(
                    zone.path / f"intel-rapl:{n}:{m}", sub, ZoneKind.SUBZONE, n,
                    starts[n] // 3, [(0.0, None, 976)], LockMode.WRITABLE,
                )
        if spec.psys:
            self.zone(
                base / f"intel-rapl:{spec.packages}", "psys", ZoneKind.PSYS, None,
                starts[0] * 2, [(tdp * spec.packages * 1.5, None, 27_983_872)],
                LockMode.WRITABLE,
            )
        if spec.mmio and spec.packages:
            mmio = self.root / POWERCAP / "intel-rapl-mmio"
            mmio.mkdir(parents=True)
            _put(mmio / "enabled", 1)
            _link(self.root / "class/powercap/intel-rapl-mmio", mmio)
            self.zone(
                mmio / "intel-rapl-mmio:0", "package-0", ZoneKind.MMIO, 0,
                starts[0], package_limits, spec.lock,
            )
        return self.zones

    def zone(
        self,
        path: Path,
        name: str,
        kind: ZoneKind,
        package: int | None,
        energy: int,
        limits: Sequence[tuple[float, float | None, int]],
        lock: LockMode,
        enabled: bool = True,
    ) -> Zone:
        path.mkdir()
        _put(path / "name", name)
        _put(path / "enabled", int(enabled))
        _put(path / "energy_uj", energy)
        _put(path / "max_energy_range_uj", self.spec.max_energy_range_uj)
        constraints: list[Constraint] = []
        names = ("long_term", "short_term")
        if lock is LockMode.ABSENT:
            limits = []
        for i, (watts, max_watts, window_us) in enumerate(limits):
            prefix = path / f"constraint_{i}"
            name_ = names[i] if self.spec.named_constraints else None
            if name_ is not None:
                _put(Path(f"{prefix}_name"), name_)
            limit_file, uw = Path(f"{prefix}_power_limit_uw"), int(watts * 1_000_000)
            if lock is LockMode.REJECT:
                _sealed(limit_file, uw, self.tree._fds)
            else:
                _put(limit_file, uw)
            if lock in (LockMode.REJECT, LockMode.REVERT):
                self.tree.locked[limit_file] = uw
            _put(Path(f"{prefix}_time_window_us"), window_us)
            max_file = None
            if max_watts is not None and self.spec.max_files:
                max_file = Path(f"{prefix}_max_power_uw")
                _put(max_file, int(max_watts * 1_000_000))
            if i == 0 and kind is not ZoneKind.SUBZONE and self.spec.min_watts is not None:
                _put(Path(f"{prefix}_min_power_uw"), int(self.spec.min_watts * 1_000_000))
            constraints.append(Constraint(i, name_, limit_file, max_file, uw))
        link = self.root / "class/powercap" / path.name
        _link(link, path)
        zone = Zone(path.name, name, kind, path, link, package, tuple(constraints))
        self.zones.append(zone)
        return zone


def _build_cpufreq(root: Path, spec: CpufreqSpec | None, cpus: int) -> tuple[
    list[Policy], list[Path]
]:
    cpu_root = root / CPU
    cpu_root.mkdir(parents=True, exist_ok=True)
    count = spec.cpus if spec else cpus
    for attr in ("online", "possible", "present"):
        _put(cpu_root / attr, f"0-{count - 1}")
    cpu_dirs = [cpu_root / f"cpu{y}" for y in range(count)]
    for d in cpu_dirs:
        d.mkdir()
    if spec is None:
        return [], cpu_dirs
    policies: list[Policy] = []
    for group in spec.groups():
        owner = min(group)
        if spec.legacy:
            path = cpu_root / f"cpu{owner}" / "cpufreq"
        else:
            path = cpu_root / "cpufreq" / f"policy{owner}"
        path.mkdir(parents=True)
        listed = " ".join(str(c) for c in group)
        for attr, value in {
            "cpuinfo_min_freq": spec.min_khz,
            "cpuinfo_max_freq": spec.max_khz,
            "cpuinfo_transition_latency": 10_000,
            "scaling_min_freq": spec.min_khz,
            "scaling_max_freq": spec.max_khz,
            "scaling_cur_freq": spec.max_khz,
            "affected_cpus": listed,
            "related_cpus": listed,
            "scaling_driver": spec.driver,
            "scaling_governor": spec.governor,
            "scaling_available_governors": "performance powersave",
        }.items():
            _put(path / attr, value)
        for cpu in group:
            if not (spec.legacy and cpu == owner):
                _link(cpu_root / f"cpu{cpu}" / "cpufreq", path)
        policies.append(Policy(owner, path, tuple(sorted(group)), spec.min_khz, spec.max_khz))
    return sorted(policies, key=lambda p: p.index), cpu_dirs


def build(
    root: Path | str,
    *,
    rapl: RaplSpec | None,
    cpufreq: CpufreqSpec | None,
    profile: str = "custom",
    cpus: int = 8,
) -> SysfsTree:
    """Build a tree under ``root`` (created; must not hold a tree already).

    ``rapl`` None: no powercap at all. ``cpufreq`` None: ``cpus`` bare CPU
    directories without cpufreq, as in a VM without a cpufreq driver.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tree = SysfsTree(root, profile, lock=rapl.lock if rapl else LockMode.WRITABLE)
    try:
        zones = _RaplBuilder(root, rapl, tree).build() if rapl else []
        policies, cpu_dirs = _build_cpufreq(root, cpufreq, cpus)
    except BaseException:
        tree.close()
        raise
    tree.zones, tree.policies, tree.cpu_dirs = tuple(zones), tuple(policies), tuple(cpu_dirs)
    return tree


INTEL_RAPL = RaplSpec()
INTEL_CPUFREQ = CpufreqSpec(driver="intel_pstate", governor="powersave")
AMD_RAPL = RaplSpec(
    packages=1, tdp_watts=180.0, subzones=(), mmio=False, psys=False, lock=LockMode.ABSENT
)
AMD_CPUFREQ = CpufreqSpec(cpus=8, cpus_per_policy=1, driver="amd-pstate", max_khz=3_700_000)


def intel_2socket(
    root: Path | str, *, cpufreq: CpufreqSpec | None = INTEL_CPUFREQ, **rapl: Any
) -> SysfsTree:
    """Two Xeon packages with core/uncore/dram subzones, an mmio duplicate and psys.

    ``rapl`` overrides :class:`RaplSpec` fields (``packages=4``, ``disabled=frozenset({1})``).
    """
    return build(root, rapl=dataclasses.replace(INTEL_RAPL, **rapl), cpufreq=cpufreq,
                 profile="intel_2socket")


def read_only_rapl(
    root: Path | str,
    *,
    lock: LockMode = LockMode.REJECT,
    cpufreq: CpufreqSpec | None = INTEL_CPUFREQ,
    **rapl: Any,
) -> SysfsTree:
    """The Intel shape with BIOS-locked package limits (see :class:`LockMode`)."""
    spec = dataclasses.replace(INTEL_RAPL, lock=lock, **rapl)
    return build(root, rapl=spec, cpufreq=cpufreq, profile="read_only_rapl")


def amd_no_writable_limits(
    root: Path | str,
    *,
    lock: LockMode = LockMode.ABSENT,
    cpufreq: CpufreqSpec | None = AMD_CPUFREQ,
    **rapl: Any,
) -> SysfsTree:
    """An EPYC box: ``intel-rapl:0`` package-0 counts energy but takes no limit; cpufreq works."""
    spec = dataclasses.replace(AMD_RAPL, lock=lock, **rapl)
    return build(root, rapl=spec, cpufreq=cpufreq, profile="amd_no_writable_limits")


def no_rapl(root: Path | str, *, cpufreq: CpufreqSpec | None = INTEL_CPUFREQ) -> SysfsTree:
    """No powercap directory at all (RAPL driver not loaded, or a VM); cpufreq only."""
    return build(root, rapl=None, cpufreq=cpufreq, profile="no_rapl")


def build_nodes(
    template: str,
    nodes: Iterable[str],
    builder: Callable[..., SysfsTree] = intel_2socket,
    **kwargs: Any,
) -> dict[str, SysfsTree]:
    """One tree per node under ``template`` (a ``SYSFS_ROOT`` value containing ``{node}``)."""
    if "{node}" not in template:
        raise ValueError(f"template {template!r} has no {{node}} placeholder")
    return {n: builder(template.replace("{node}", n), **kwargs) for n in nodes}
