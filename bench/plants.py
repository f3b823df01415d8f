"""Power curves and a lagging, noisy node for the DVFS benchmark (bench/dvfs.py).

A throttle of ``u`` percent maps to a frequency ceiling, as a fraction of the
maximum frequency::

    f(u) = 1 - (1 - F_MIN) * u / 100        F_MIN = 1.5 GHz / 3.5 GHz

(``DVFS_MIN_FREQ_KHZ``'s default against the 3.5 GHz parts of the sysfs
fixtures). Three curves, none of them fitted to either controller:

- ``simulator``: the power simulator's own model
  (:class:`agentpool.sim.power.model.NodeModel`, documented there), used as is;
- ``steep``: ``P = 40 + load * 210 * f**2.5``. CMOS dynamic power is
  ``C * V**2 * f`` and over the DVFS range V rises roughly linearly with f,
  which gives up to f**3; 2.5 stands for a compute-bound load on a part whose
  voltage curve flattens near the bottom;
- ``flat``: ``P = 80 + load * 170 * f``. A memory-bound load stalls on DRAM,
  so a large share of package power (uncore, memory controller, leakage) does
  not follow the core clock, and the rest follows it about linearly.

The node's power follows the curve through a first-order lag (time constant
``lag`` intervals) and each reading is the mean power over the interval
before it (what an energy counter gives), times ``1 + e``, ``e`` uniform in
+-``noise``. The load drifts: a slow sine (5%, period 60 intervals) and a
random walk (0.3% per interval).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from agentpool.sim.power.model import NodeConfig, NodeModel

F_MIN = 1.5 / 3.5
SUBSTEPS = 20
"""Integration steps per interval for the lag and the energy integral."""
DRIFT_AMPLITUDE, DRIFT_PERIOD, DRIFT_WALK = 0.05, 60.0, 0.003


def frequency(throttle_pct: float) -> float:
    return 1.0 - (1.0 - F_MIN) * throttle_pct / 100.0


def _simulator(load: float, throttle_pct: float) -> float:
    model = NodeModel("bench", NodeConfig(load=min(1.0, load)), seed=0)
    model.throttle_pct = throttle_pct
    return model.expected_power()


def _steep(load: float, throttle_pct: float) -> float:
    return 40.0 + load * 210.0 * float(frequency(throttle_pct) ** 2.5)


def _flat(load: float, throttle_pct: float) -> float:
    return 80.0 + load * 170.0 * frequency(throttle_pct)


@dataclass(frozen=True)
class Curve:
    """One power curve and the scenario run on it."""

    name: str
    formula: str
    power: Callable[[float, float], float]
    """(load, throttle %) -> watts, without lag or noise."""
    cap_watts: float
    load: float
    """Load at the cap change; the unthrottled power is then well above the cap."""

    def drop_load(self) -> float:
        """The load after the drop: unthrottled power at 80% of the cap (no throttle needed)."""
        base = self.power(0.0, 0.0)
        return (0.8 * self.cap_watts - base) / (self.power(1.0, 0.0) - base)


CURVES = (
    Curve("simulator", "PowerSim: 60 + load*190*(1 - 0.7*u/100)", _simulator, 120.0, 0.6),
    Curve("steep", "40 + load*210*f^2.5", _steep, 120.0, 0.75),
    Curve("flat", "80 + load*170*f (memory-bound)", _flat, 160.0, 0.7),
)


class Node:
    """A node on one curve: lagging power, drifting load, noisy readings. Seeded."""

    def __init__(self, curve: Curve, seed: int, lag: float, noise: float) -> None:
        self.curve = curve
        self.lag = lag
        self.noise = noise
        self.rng = random.Random(f"{seed}/{curve.name}")
        self.base_load = curve.load
        self.walk = 0.0
        self.throttle = 0.0
        self.interval = 0
        # Steady state before the cap change: unthrottled, no lag transient pending.
        self.power = curve.power(self.load(), 0.0)

    def load(self) -> float:
        phase = 2 * math.pi * self.interval / DRIFT_PERIOD
        return max(0.0, self.base_load * (1 + DRIFT_AMPLITUDE * math.sin(phase) + self.walk))

    def drop(self) -> None:
        """The load falls to where no throttle is needed (drift continues around it)."""
        self.base_load = self.curve.drop_load()

    def advance(self) -> tuple[float, float, float]:
        """One interval: returns (mean power, excess energy above the cap, the reading)."""
        target = self.curve.power(self.load(), self.throttle)
        dt = 1.0 / SUBSTEPS
        total = excess = 0.0
        for _ in range(SUBSTEPS):
            # Exact step of dP/dt = (target - P) / lag; no lag means instant response.
            keep = math.exp(-dt / self.lag) if self.lag > 0 else 0.0
            self.power = target + (self.power - target) * keep
            total += self.power * dt
            excess += max(0.0, self.power - self.curve.cap_watts) * dt
        self.interval += 1
        self.walk += self.rng.gauss(0.0, DRIFT_WALK)
        reading = total * (1.0 + self.rng.uniform(-self.noise, self.noise))
        return total, excess, reading
