"""``agentpool inspect``: what the agent finds on this node and what it would do, for a person.

Run at a node's shell (or ``kubectl exec`` into the DaemonSet pod), it reads
the same sysfs the agent reads (RAPL package zones and their PL1 limits,
min/max and writability; cpufreq policies; energy counters) and, given a cap
in watts or a percent of the maximum, says what the agent would write; the
same for GPUs through NVML and AMD SMI (:mod:`agentpool.hardware.gpu_report`). It only reads:
nothing is written anywhere, so it is safe on a production node.
"""

from __future__ import annotations

from pathlib import Path

from agentpool.backends.sysfs.cpufreq import discover_policies
from agentpool.backends.sysfs.rapl import discover_package_zones
from agentpool.controller import percent
from agentpool.hardware.gpu_report import gpu_lines
from agentpool.hardware.host import HostFacts, discover_host
from agentpool.resources.desired import GpuCap


def _w(value: float | None) -> str:
    return "-" if value is None else f"{value:g} W"


def _zones(host: HostFacts) -> list[str]:
    lines = [f"RAPL package zones: {len(host.zones)}"]
    for z in host.zones:
        lines.append(
            f"  {z.label}: PL1 {_w(z.limit_w)} (min {_w(z.min_w)}, max {_w(z.max_w)}), "
            + ("writable" if z.writable else "NOT writable")
        )
    return lines


def _cpufreq(root: Path, host: HostFacts) -> list[str]:
    policies = discover_policies(root)
    lines = [
        f"cpufreq policies: {len(policies)}" + (f" (driver {host.driver})" if host.driver else "")
    ]
    for p in policies:
        cpus = ",".join(str(c) for c in p.cpus)
        lines.append(
            f"  policy{p.index}: cpus {cpus}, {p.cpuinfo_min // 1000}-{p.cpuinfo_max // 1000} MHz"
        )
    return lines


def _plan(root: Path, host: HostFacts, cap: float | None, pct: float | None) -> list[str]:
    zones = [z for z in discover_package_zones(root) if z.limit_file is not None]
    lines: list[str] = []
    if pct is not None and cap is not None:
        lines.append(f"{pct:g}% of max not planned: watts win over percent, as in a NodeTwin")
    elif pct is not None:
        maximum = percent.host_maximum(zones)
        resolved = maximum.resolve(pct)
        if resolved is None:
            throttle = percent.throttle_for(pct)
            return [
                f"{pct:g}% of max: maximum unknown ({maximum.source}); the agent would "
                f"throttle CPUs by {throttle}% on {len(discover_policies(root))} cpufreq policies"
            ]
        lines.append(f"{pct:g}% of max {maximum.watts:g} W ({maximum.source}) = {resolved:.1f} W")
        cap = resolved
    if cap is None:
        return lines
    writable = [z for z in host.zones if z.writable]
    if writable:
        parts = []
        for z in writable:
            want = cap if z.max_w is None else min(cap, z.max_w)
            parts.append(f"{z.label} {want:g} W")
        lines.append(
            f"cap {cap:g} W per package: RAPL PL1 " + ", ".join(parts) + " (read back to check)"
        )
        lines.append("  if a limit does not stick (BIOS lock), DVFS on cpufreq instead")
    elif host.policies:
        packages = len(host.zones)
        budget = "it"
        if packages > 1:
            budget = f"{cap * packages:g} W ({cap:g} W per package x {packages})"
        lines.append(
            f"cap {cap:g} W: no writable RAPL limit; DVFS would throttle the "
            f"{host.policies} cpufreq policies step by step to keep package power under {budget}"
        )
    else:
        lines.append(f"cap {cap:g} W: blocked, no RAPL limit and no cpufreq to control")
    return lines


def report(
    root: Path,
    cap: float | None = None,
    pct: float | None = None,
    gpu_cap: GpuCap | None = None,
) -> str:
    """The whole report as text."""
    host = discover_host(root)
    lines = [f"sysfs root: {root}"]
    lines += _zones(host)
    lines += _cpufreq(root, host)
    landmarks = [("min", host.min_mhz), ("nominal", host.nominal_mhz), ("max", host.max_mhz)]
    known = [f"{name} {value:g} MHz" for name, value in landmarks if value is not None]
    if known:
        lines.append("frequency landmarks: " + ", ".join(known))
    lines.append("energy counters: " + ("readable" if host.energy_readable else "none"))
    lines.append("control available: " + ("yes" if host.control_available else "no"))
    for warning in host.warnings:
        lines.append(f"warning: {warning}")
    lines += _plan(root, host, cap, pct)
    lines += gpu_lines(gpu_cap)
    lines.append("(inspect only reads; nothing was written)")
    return "\n".join(lines) + "\n"
