"""The per-node package power model and the vocabulary of the power simulator.

This module owns the numbers: what a simulated node draws given its load, the
RAPL cap and the DVFS throttle it was told to apply, and the enums and records
that :mod:`agentpool.sim.power.server` (the HTTP side) hands to tests. It is a
stand-in for real servers behind the Joulie simulator, which cannot exist on a
CI box; it does no I/O and knows nothing about HTTP, so it is tested directly.

The model, per node::

    demand   = idle + load * (max - idle)
    throttled = idle + (demand - idle) * (1 - throttle_pct / 100 * throttle_depth)
    power    = min(throttled, cap) + gauss(0, noise)      (never below 0)

Where it comes from (DVFS response). Package power is a static part plus a
dynamic part that grows with utilisation, the linear utilisation-to-power
model of measured servers (Fan, Weber and Barroso, "Power provisioning for a
warehouse-sized computer", ISCA 2007: ``P = P_idle + u * (P_busy - P_idle)``;
``idle`` and ``max`` are those two ends). The agent's throttle percentage is
the share of cpufreq policies held at ``DVFS_MIN_FREQ_KHZ`` (backends.cpufreq),
so power is linear in it: each throttled share of the cores moves from
the maximum frequency's dynamic power to the minimum's. CMOS dynamic power
is ``C * V**2 * f`` with V roughly linear in f over the DVFS range, so a
core at ``f_min / f_max`` = 1.5 / 3.5 GHz keeps about (0.43)**2.5..3 = 8-12 %
of its dynamic power; the rest of the dynamic package power (uncore, caches,
memory controller) does not follow the core clock. ``throttle_depth`` = 0.7
stands for "about three quarters of the dynamic power is core power, and 90 %
of that goes at the minimum frequency" (0.78 x 0.9 = 0.7): an assumption, not
a measurement, which is why the DVFS benchmark (``bench/dvfs.py``) also runs
a steeper and a flatter curve. The simulator answers a throttle at once; the
benchmark adds the lag.

Throttling only shrinks the dynamic part: a CPU at its lowest frequency still
burns its idle power and a share of the dynamic one (``1 - throttle_depth``).
The cap is applied after throttling, like RAPL which clamps whatever is left.
Noise comes from a ``random.Random`` seeded per node from the simulator seed and
the node name, so a run is reproducible whatever order nodes are polled in.
"""

from __future__ import annotations

import dataclasses
import enum
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentpool.sim.power.gpu import GPU_ACTION, GpuConfig, GpuModel


class RequestKind(enum.StrEnum):
    """Which endpoint of the telemetry/control protocol a request hit."""

    TELEMETRY = "telemetry"
    # GET /telemetry/{node}
    CONTROL = "control"
    # POST /control/{node}
    OTHER = "other"
    # anything else (health checks, unknown paths, wrong methods)


class ControlResult(enum.StrEnum):
    """The ``result`` a control answer carries (:mod:`agentpool.backends.httpclient`)."""

    APPLIED = "applied"
    # the node's state changed as asked
    BLOCKED = "blocked"
    # refused on purpose (e.g. RAPL locked on this node); state unchanged
    ERROR = "error"
    # the control failed; state unchanged


class FaultKind(enum.StrEnum):
    """Ways a node's endpoint can misbehave when told to."""

    HANG = "hang"
    # never answer until released (fault cleared, hang duration over, or stop)
    SERVER_ERROR = "5xx"
    # answer the configured status (503 by default) with a JSON error body
    GARBAGE = "garbage"
    # 200 with a JSON content type and a body that is not JSON
    HTML = "html"
    # 200 text/html, as a captive portal or a misrouted ingress would answer
    HUGE = "huge"
    # 200 with a valid but multi-megabyte JSON body, to test read limits


class FaultTarget(enum.StrEnum):
    """Which endpoints of a node a fault applies to."""

    TELEMETRY = "telemetry"
    CONTROL = "control"
    BOTH = "both"

    def covers(self, kind: RequestKind) -> bool:
        if self is FaultTarget.BOTH:
            return kind in (RequestKind.TELEMETRY, RequestKind.CONTROL)
        return kind.value == self.value


RAPL_ACTION = "rapl.set_power_cap_watts"
DVFS_ACTION = "dvfs.set_throttle_pct"
ACTIONS = (RAPL_ACTION, DVFS_ACTION, GPU_ACTION)
_VALUE_FIELD = {RAPL_ACTION: "capWatts", DVFS_ACTION: "throttlePct", GPU_ACTION: "capWattsPerGpu"}


@dataclass(frozen=True)
class NodeConfig:
    """How one simulated node draws power. Validated on construction."""

    idle_watts: float = 60.0
    """Package power with no load (and the floor that throttling never goes below)."""
    max_watts: float = 250.0
    """Package power at load 1.0, unthrottled and uncapped."""
    load: float = 0.5
    """Utilisation in [0, 1]."""
    noise_watts: float = 0.0
    """Standard deviation of the Gaussian noise added to each telemetry reading."""
    throttle_depth: float = 0.7
    """Share of the dynamic power removed at throttle 100 %, in [0, 1]."""
    gpu: GpuConfig = field(default_factory=GpuConfig)
    """The node's GPUs (none by default)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.idle_watts <= self.max_watts:
            raise ValueError(
                f"need 0 <= idle_watts <= max_watts, got {self.idle_watts}, {self.max_watts}"
            )
        if not 0.0 <= self.load <= 1.0:
            raise ValueError(f"load must be in [0, 1], got {self.load}")
        if self.noise_watts < 0.0:
            raise ValueError(f"noise_watts must be >= 0, got {self.noise_watts}")
        if not 0.0 <= self.throttle_depth <= 1.0:
            raise ValueError(f"throttle_depth must be in [0, 1], got {self.throttle_depth}")


@dataclass(frozen=True)
class NodeState:
    """A snapshot of one node, safe to keep after the simulator moved on."""

    node: str
    config: NodeConfig
    cap_watts: float | None
    """Last applied RAPL cap; None until one is applied."""
    throttle_pct: float
    expected_power_watts: float
    """Power without noise: what telemetry readings are centred on."""
    last_power_watts: float | None
    """The last value served by telemetry (noise included); None before any."""
    applied_controls: int
    telemetry_reads: int
    gpu_cap_watts: float | None = None
    """Cap applied to each GPU (clamped); None on a node without GPUs."""
    gpu_cap_target_watts: float | None = None
    """Cap last asked for each GPU, before clamping; None until asked."""
    gpu_power_watts: float = 0.0
    """Draw of all the node's GPUs together, at the time of the snapshot."""
    gpu_state: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "capWatts": self.cap_watts,
            "throttlePct": self.throttle_pct,
            "packagePowerWatts": round(self.expected_power_watts, 3),
            "load": self.config.load,
            "idleWatts": self.config.idle_watts,
            "maxWatts": self.config.max_watts,
            **self.gpu_state,
        }


@dataclass(frozen=True)
class Behaviour:
    """What a node's control endpoint answers to a well-formed request."""

    result: ControlResult = ControlResult.APPLIED
    message: str | None = None


@dataclass
class Fault:
    """A misbehaviour armed on a node; ``remaining`` None means until cleared."""

    kind: FaultKind
    target: FaultTarget
    status: int = 503
    remaining: int | None = None
    hang_seconds: float | None = None


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the simulator saw it on arrival (before any fault acted)."""

    node: str | None
    method: str
    kind: RequestKind
    path: str
    body: Any
    """Parsed JSON body; None when there was none or it did not parse."""
    monotonic: float
    """``time.monotonic()`` at arrival: for intervals (reconcile period, backoff)."""
    wall: float
    """``time.time()`` at arrival: for comparing with logs and ``ts`` fields."""
    fault: FaultKind | None
    """The fault that answered this request, if any."""
    user_agent: str | None = None
    """The ``User-Agent`` header: which agent (pod, shard) sent it."""


class NodeModel:
    """The mutable state of one node. Not thread-safe: the simulator locks around it."""

    def __init__(
        self,
        name: str,
        config: NodeConfig,
        seed: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.config = config
        self.clock = clock
        self.gpu = GpuModel(config.gpu, clock())
        self.cap_watts: float | None = None
        self.throttle_pct = 0.0
        self.behaviours: dict[str | None, Behaviour] = {}
        self.fault: Fault | None = None
        self.last_power_watts: float | None = None
        self.applied_controls = 0
        self.telemetry_reads = 0
        # A str seed goes through SHA-512 in random.Random, so it is stable
        # across runs and interpreters, unlike hash(); per node so the noise
        # sequence of one node does not depend on how others are polled.
        self._rng = random.Random(f"{seed}/{name}")

    def expected_power(self) -> float:
        c = self.config
        demand = c.idle_watts + c.load * (c.max_watts - c.idle_watts)
        dynamic = (demand - c.idle_watts) * (1.0 - self.throttle_pct / 100.0 * c.throttle_depth)
        power = c.idle_watts + dynamic
        if self.cap_watts is not None:
            power = min(power, self.cap_watts)
        return power

    def sample_power(self) -> float:
        """One telemetry reading: the expected power plus this node's next noise draw."""
        power = self.expected_power()
        if self.config.noise_watts > 0.0:
            power += self._rng.gauss(0.0, self.config.noise_watts)
        power = max(0.0, power)
        self.last_power_watts = power
        self.telemetry_reads += 1
        return power

    def reconfigure(self, **changes: Any) -> None:
        self.config = dataclasses.replace(self.config, **changes)
        if self.config.gpu != self.gpu.config:
            self.gpu.reconfigure(self.config.gpu, self.clock())

    def behaviour_for(self, action: str) -> Behaviour:
        return self.behaviours.get(action) or self.behaviours.get(None) or Behaviour()

    def snapshot(self) -> NodeState:
        return NodeState(
            node=self.name,
            config=self.config,
            cap_watts=self.cap_watts,
            throttle_pct=self.throttle_pct,
            expected_power_watts=self.expected_power(),
            last_power_watts=self.last_power_watts,
            applied_controls=self.applied_controls,
            telemetry_reads=self.telemetry_reads,
            gpu_cap_watts=self.gpu.applied_watts if self.config.gpu.count else None,
            gpu_cap_target_watts=self.gpu.target_watts,
            gpu_power_watts=self.gpu.total_power(self.clock()),
            gpu_state=self.gpu.state(),
        )


def parse_control(node: str, body: Any) -> tuple[str, float]:
    """Validate a control body; return (action, value) or raise ValueError naming the field.

    The path names the node; a body naming another node is a client bug (an
    endpoint template with the wrong substitution) and is refused, not guessed.
    """
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    if body.get("node") not in (None, node):
        raise ValueError(f"node {body.get('node')!r} in the body does not match {node!r}")
    action = body.get("action")
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    field = _VALUE_FIELD[action]
    value = body.get(field)
    # bool is an int subclass; true/false are not watts.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{field} must be a number, got {value!r}")
    if action in (RAPL_ACTION, GPU_ACTION) and value <= 0:
        raise ValueError(f"{field} must be > 0, got {value}")
    if action == DVFS_ACTION and not 0 <= value <= 100:
        raise ValueError(f"throttlePct must be in [0, 100], got {value}")
    return action, float(value)
