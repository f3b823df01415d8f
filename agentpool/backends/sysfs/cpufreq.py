"""DVFS on the host: cap ``scaling_max_freq`` per cpufreq policy.

The unit is the policy (``devices/system/cpu/cpufreq/policyN``): CPUs that
share a clock share a policy, and ``cpuY/cpufreq`` is usually a link to one,
so links are resolved and de-duplicated. Only where a kernel exposes no
policy directories are ``cpuY/cpufreq`` directories used directly.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path

from agentpool.backends.sysfs.files import HostApply, Originals, read_int, read_text, try_read_int
from agentpool.errors import JournalError, SysfsError

log = logging.getLogger(__name__)

OWNER = "cpufreq"
"""This backend's entries in the journal of originals."""
_POLICY = re.compile(r"^policy(\d+)$")
_CPU = re.compile(r"^cpu(\d+)$")


@dataclass(frozen=True)
class Policy:
    index: int
    path: Path
    cpuinfo_min: int
    cpuinfo_max: int
    cpus: tuple[int, ...]
    """CPUs governed by this policy (``affected_cpus``), for metric labels."""

    @property
    def max_file(self) -> Path:
        return self.path / "scaling_max_freq"


def _cpus(path: Path, fallback: int) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in read_text(path / "affected_cpus").split())
    except (SysfsError, ValueError):
        return (fallback,)


def discover_policies(root: Path) -> list[Policy]:
    """Usable policies sorted by index; entries without readable cpuinfo limits are skipped."""
    cpu_dir = root / "devices" / "system" / "cpu"
    candidates: list[tuple[int, Path]] = []
    policy_dir = cpu_dir / "cpufreq"
    if policy_dir.is_dir():
        for entry in policy_dir.iterdir():
            if match := _POLICY.match(entry.name):
                candidates.append((int(match.group(1)), entry))
    if not candidates and cpu_dir.is_dir():
        for entry in cpu_dir.iterdir():
            if (match := _CPU.match(entry.name)) and (entry / "cpufreq").is_dir():
                candidates.append((int(match.group(1)), entry / "cpufreq"))
    seen: set[Path] = set()
    policies: list[Policy] = []
    for index, path in sorted(candidates):
        try:
            resolved = path.resolve(strict=True)
        except OSError:
            continue
        if resolved in seen:
            continue
        seen.add(resolved)
        low = try_read_int(resolved / "cpuinfo_min_freq")
        high = try_read_int(resolved / "cpuinfo_max_freq")
        if low is None or high is None:
            continue
        policies.append(Policy(index, resolved, low, high, _cpus(resolved, index)))
    return policies


@dataclass(frozen=True)
class FreqReading:
    cpu: str
    """The CPU's number (``"0"``), the ``cpu`` label Joulie's agent gives it."""
    cur_khz: int | None
    max_khz: int | None


class CpufreqHost:
    """Applies a throttle percentage to the host's cpufreq policies.

    Not thread safe: one node controller owns one instance.
    """

    def __init__(self, root: Path, originals: Originals, min_freq_khz: int) -> None:
        self._root = root
        self._originals = originals
        self._min_freq_khz = min_freq_khz
        self._policies: list[Policy] | None = None

    def policies(self) -> list[Policy]:
        # Cached once found; an empty result is not cached, so a cpufreq driver that
        # loads after the agent started is picked up on a later tick.
        if not self._policies:
            self._policies = discover_policies(self._root)
        return self._policies

    def available(self) -> bool:
        return bool(self.policies())

    def _original(self, policy: Policy) -> int:
        known = self._originals.get(policy.max_file)
        return known if known is not None else read_int(policy.max_file)

    def throttled_freq(self, policy: Policy) -> int:
        scaling_min = try_read_int(policy.path / "scaling_min_freq") or policy.cpuinfo_min
        return max(policy.cpuinfo_min, scaling_min, min(policy.cpuinfo_max, self._min_freq_khz))

    def apply(self, throttle_pct: int) -> dict[str, int]:
        """The first ceil(count*pct/100) policies get the throttled max, the rest their original.

        A failed write (or an original that cannot be journaled) puts back what this
        call already changed and raises SysfsError (JournalError), so a policy set is
        never left half-throttled.
        """
        policies = self.policies()
        count = math.ceil(len(policies) * throttle_pct / 100)
        host = HostApply(self._originals, OWNER)
        result: dict[str, int] = {}
        try:
            for position, policy in enumerate(policies):
                current = read_int(policy.max_file)
                original = self._original(policy)
                want = self.throttled_freq(policy) if position < count else original
                if current != want:
                    got = host.write(policy.max_file, current, want)
                    if got != want:
                        raise SysfsError(str(policy.max_file), f"wrote {want}, read back {got}")
                result[policy.path.name] = want
        except (SysfsError, JournalError):
            host.undo()
            raise
        return result

    def restore(self) -> list[str]:
        """Give every policy its original ``scaling_max_freq``; returns problems, if any."""
        return self._originals.restore(OWNER)

    def holds_originals(self) -> bool:
        """Whether some policy still has a limit this agent wrote (not yet restored)."""
        return bool(self._originals.items(OWNER))

    def readings(self) -> list[FreqReading]:
        out: list[FreqReading] = []
        for policy in self.policies():
            cur = try_read_int(policy.path / "scaling_cur_freq")
            top = try_read_int(policy.max_file)
            out.extend(FreqReading(str(cpu), cur, top) for cpu in policy.cpus)
        return out
