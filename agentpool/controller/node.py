"""One node's controller: turn desired state into RAPL or DVFS action, tick by tick.

A plain object a worker process drives: ``update()`` when the supervisor
sends new inputs, ``tick()`` every reconcile interval (or at once after an
update), ``restore()`` on graceful stop. It never talks to Kubernetes; the
:class:`TickResult` it returns is what the status should say.

It only orchestrates. ``update()`` parses the custom resources once and
picks the CPU strategy of this input: :class:`~agentpool.controller.cpu_host.HostCpu`
(RAPL, then cpufreq), :class:`~agentpool.controller.cpu_http.HttpCpu` (the
control endpoint) or :class:`NoCpuControl`; ``tick()`` runs the documented
order over it: desired state, simulate-only, RAPL first, DVFS as the fallback.
The DVFS fallback (:mod:`agentpool.controller.fallback`) and the GPU
controller are the node's, whichever strategy runs.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from agentpool.backends import cpu_http, httpclient
from agentpool.backends.sysfs.cpufreq import CpufreqHost
from agentpool.backends.sysfs.files import Originals
from agentpool.backends.sysfs.rapl import EnergyMeter, EnergySample, PackageZones, RaplHost
from agentpool.config.options import StaleAction
from agentpool.config.settings import ControllerSettings
from agentpool.controller import percent, release, stale
from agentpool.controller.cpu_host import NO_BACKEND, HostCpu
from agentpool.controller.cpu_http import HttpCpu
from agentpool.controller.fallback import DvfsFallback
from agentpool.controller.gpu import GpuController, GpuDesired, GpuSettings
from agentpool.controller.gpu_metrics import GpuMetrics
from agentpool.controller.messages import control_setting, no_control, why_none
from agentpool.controller.metrics import NodeMetrics
from agentpool.errors import AgentError, ProfileError
from agentpool.hardware.labels import Hardware, discover
from agentpool.resources.desired import PowerPolicy
from agentpool.resources.nodeinputs import NodeApi, NodeInputs
from agentpool.resources.parse import (
    NT,
    cpu_routing,
    gpu_routing,
    metadata_name,
    parse_gpu_cap,
    parse_power_profile,
)
from agentpool.resources.routing import ControlType, Routing, SourceType
from agentpool.results import Backend, GpuBackend, GpuTickResult, Result, TickResult

log = logging.getLogger(__name__)


class CpuControl(Protocol):
    """A way to act on a node's CPUs: what the node controller asks of a strategy."""

    def plan(self, hardware: Hardware) -> str:
        """What a cap would be written to (the simulate-only message)."""
        ...

    def maximum(self, hardware_max_w: float | None) -> percent.Maximum:
        """The package maximum a percent cap means."""
        ...

    def cap(
        self, cap: float, hardware: Hardware, throttled: bool, observed: dict[str, Any]
    ) -> TickResult | str:
        """RAPL: the tick's result, or why DVFS takes over (``throttled``: DVFS holds one)."""
        ...

    def dvfs_budget(self, cap: float) -> tuple[float, str]:
        """The power DVFS holds the node's reading under for ``cap``, and how to say it."""
        ...

    def dvfs_levels(self) -> int | None:
        """How many throttle levels there are (None: any percentage)."""
        ...

    def throttle_available(self) -> bool: ...

    def throttle(self, cap: float, pct: int, observed: dict[str, Any]) -> tuple[Result, str]:
        """Apply a throttle; (result, message when refused)."""
        ...


class NoCpuControl:
    """``controls.cpu.type: none`` (or ``TELEMETRY_CPU_CONTROL=none``): nothing to act on."""

    def __init__(self, routing: Routing, host: HostCpu) -> None:
        self.why = no_control(routing)
        self._setting = control_setting(routing)
        self._host = host

    def plan(self, hardware: Hardware) -> str:
        return f"no control ({self._setting} none)"

    def maximum(self, hardware_max_w: float | None) -> percent.Maximum:
        return self._host.maximum(hardware_max_w)

    def cap(
        self, cap: float, hardware: Hardware, throttled: bool, observed: dict[str, Any]
    ) -> TickResult | str:
        return TickResult(Backend.NONE, Result.BLOCKED, self.why, observed)

    def dvfs_budget(self, cap: float) -> tuple[float, str]:
        return cap, f"{cap:g} W"

    def dvfs_levels(self) -> int | None:
        return None

    def throttle_available(self) -> bool:
        return False

    def throttle(self, cap: float, pct: int, observed: dict[str, Any]) -> tuple[Result, str]:
        return Result.BLOCKED, self.why


@dataclasses.dataclass(frozen=True)
class _Desired:
    """What one input asks of the CPU side, parsed once in ``update()``."""

    policy: PowerPolicy | None = None
    routing: Routing = dataclasses.field(default_factory=Routing)
    error: ProfileError | None = None
    """The NodePowerProfile, NodeTwin or TelemetryProfile is malformed: status ``error``."""
    policy_error: ProfileError | None = None
    """The error is the desired state's (not the routing's)."""


class NodeController:
    """Enforces one node's desired state. Not thread safe; one per worker."""

    def __init__(
        self,
        settings: ControllerSettings,
        node: str,
        metrics: NodeMetrics,
        originals: Originals | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.node = node
        self.metrics = metrics
        httpclient.configure(settings.http_auth)
        self.clock = clock
        root = Path(settings.sysfs_root_for(node))
        self.originals = originals or Originals()
        zones = PackageZones(root)  # one discovery for the cap and the meter
        self.rapl = RaplHost(root, self.originals, zones)
        self.cpufreq = CpufreqHost(root, self.originals, settings.dvfs.min_freq_khz)
        self.meter = EnergyMeter(root, zones)
        self.dvfs = DvfsFallback(node, settings.dvfs, metrics, clock)
        self.user_agent = httpclient.user_agent(settings.pod_name, settings.shard_id)
        self.host = HostCpu(node, self.rapl, self.cpufreq, metrics)
        self.http = HttpCpu(node, self.user_agent)
        self.gpu = GpuController(
            GpuSettings(settings.simulate_only, settings.remote),
            node,
            GpuMetrics(node, metrics.registry, metrics.series),
            self.originals,
            self.user_agent,
        )
        self._stale = False
        """The last tick acted on stale desired state."""
        self._cap_release = release.CapRelease(node)
        """A removed cap is given back at the second tick without one."""
        self.inputs = NodeInputs(node)
        self.hardware = discover({})
        self._logged_hardware: Hardware | None = None
        self._desired = _Desired()
        self._gpu_desired = GpuDesired()
        self._cpu: CpuControl = self.host
        self.update(self.inputs)  # no inputs yet: nothing to enforce, host routing

    # -- inputs: parsed once, the strategy chosen once -------------------------------------------

    def update(self, inputs: NodeInputs) -> None:
        if (
            inputs.power_profile_note
            and inputs.power_profile_note != self.inputs.power_profile_note
        ):
            log.warning("node %s: %s", self.node, inputs.power_profile_note)
        self.inputs = inputs
        self.hardware = hardware = discover(inputs.labels)
        if hardware != self._logged_hardware:
            log.info(
                "node %s hardware: cpu vendor %s, gpus %s",
                self.node,
                hardware.cpu_vendor or "unknown",
                ",".join(hardware.gpu_vendors) or "none",
            )
            self._logged_hardware = hardware
        self._desired = self._parse_cpu(inputs)
        self._gpu_desired = self._parse_gpu(inputs, self._desired)
        if self._desired.error is not None:
            return  # reported every tick; the strategy (and the throttle it holds) stays
        routing = self._desired.routing
        if routing.control is ControlType.HTTP:
            self._cpu = self.http.route(routing)
        elif routing.control is ControlType.HOST:
            self._cpu = self.host
        else:
            self._cpu = NoCpuControl(routing, self.host)

    def _raw_policy(self, inputs: NodeInputs) -> tuple[dict[str, Any] | None, str]:
        """The desired-state object of this API, and its kind."""
        if inputs.api is NodeApi.NODETWIN:
            return inputs.node_twin, NT
        return inputs.power_profile, "NodePowerProfile"

    def _parse_cpu(self, inputs: NodeInputs) -> _Desired:
        """The desired state and the routing: a TelemetryProfile targeting the node wins,
        else the TELEMETRY_* variables, on either API."""
        raw, kind = self._raw_policy(inputs)
        try:
            policy = parse_power_profile(raw, kind) if raw is not None else None
        except ProfileError as exc:
            return _Desired(error=exc, policy_error=exc)
        try:
            routing = cpu_routing(inputs.telemetry_profile, self.settings.routing)
        except ProfileError as exc:
            return _Desired(policy, error=exc)
        return _Desired(policy, routing)

    def _parse_gpu(self, inputs: NodeInputs, cpu: _Desired) -> GpuDesired:
        """The GPU cap and routing, with the same precedence as the CPU's."""
        try:
            routing = gpu_routing(inputs.telemetry_profile, self.settings.routing)
        except ProfileError as exc:
            return GpuDesired(error=exc)
        if inputs.api is NodeApi.NODETWIN:
            # The GPU block alone: a NodeTwin's malformed CPU field is the CPU's to report.
            twin = inputs.node_twin
            if twin is None:
                return GpuDesired(routing=routing)
            spec = twin.get("spec")
            try:
                name = metadata_name(twin) or "?"
                cap = parse_gpu_cap(spec if isinstance(spec, dict) else {}, NT, name)
            except ProfileError as exc:
                return GpuDesired(routing=routing, error=exc)
            return GpuDesired(cap, routing)
        if cpu.policy_error is not None:
            gpu_field = cpu.policy_error.field.startswith("spec.gpu")
            return GpuDesired(routing=routing, error=cpu.policy_error, cpu_error=not gpu_field)
        return GpuDesired(cpu.policy.gpu_cap if cpu.policy is not None else None, routing)

    # -- one tick ---------------------------------------------------------------------------------

    def tick(self) -> TickResult:
        started = self.clock()
        try:
            result = self._reconcile_unless_stale()
        except AgentError as exc:
            result = TickResult(Backend.NONE, Result.ERROR, str(exc))
        note = self.inputs.power_profile_note
        if note and result.result is not Result.ERROR:
            # Several profiles target this node: say which one won, where operators look.
            result = TickResult(
                result.backend, result.result, f"{result.message} [{note}]", result.observed
            )
        gpu = self._gpu_tick()
        if gpu is not None:
            result = dataclasses.replace(result, gpu=gpu)
        if result.result is Result.ERROR:
            self.metrics.count_error()
        if result.backend is not Backend.DVFS or result.result is Result.ERROR:
            self.metrics.set_backend(result.backend)
        if result.backend is not Backend.DVFS:
            self.metrics.set_cap_error(None)
            self.dvfs.episode_over()
        self.metrics.reconcile_seconds.observe(max(0.0, self.clock() - started))
        return result

    def _gpu_tick(self) -> GpuTickResult | None:
        # GPU caps are a concern of their own (agentpool.controller.gpu); whatever they
        # run into, the CPU side of the tick goes on and the GPU status says what failed.
        try:
            return self.gpu.tick(self._gpu_desired, self.inputs, self.hardware)
        except AgentError as exc:
            return GpuTickResult(GpuBackend.NONE, Result.ERROR, str(exc))

    # -- stale desired state (SPEC_READ_TIMEOUT) ---------------------------------------------

    def _reconcile_unless_stale(self) -> TickResult:
        """Act on SPEC_STALE_ACTION while the desired state is unconfirmed; say so after."""
        timeout = self.settings.spec_read_timeout_s
        if self.inputs.spec_stale:
            self._stale = True
            if self.settings.spec_stale_action is StaleAction.KEEP:
                return stale.kept(self._reconcile(), timeout)
            self._clear_caps()
            self.dvfs.reset()
            if self.settings.simulate_only:
                return stale.relaxed_simulated(timeout)
            return stale.relax(self._give_back(self._desired.routing), timeout)
        result = self._reconcile()
        if self._stale:
            self._stale = False
            log.info("node %s: desired state confirmed again, enforcing it", self.node)
            result = stale.confirmed_again(result)
        return result

    # -- the reconcile: desired state, simulate-only, RAPL first, DVFS as the fallback ----------

    def _reconcile(self) -> TickResult:
        desired = self._desired
        if desired.error is not None:
            self._clear_caps()
            return TickResult(Backend.NONE, Result.ERROR, str(desired.error))
        policy, routing = desired.policy, desired.routing
        sample = self._sample_host_energy(routing)
        if policy is None or (policy.cap_watts is None and policy.cap_pct is None):
            self._clear_caps()
            why = why_none(policy, self.inputs)
            outcome, more = self._cap_release.step(
                why, self._holds(), lambda: self._give_back(routing)
            )
            return TickResult(Backend.NONE, outcome, f"nothing to enforce: {why}{more}")
        self._cap_release.enforcing()
        observed: dict[str, Any] = {"profile": policy.profile.value}
        if sample is not None and sample.total_w is not None:
            observed["packagePowerWatts"] = round(sample.total_w, 3)
        cap, note = self._cap_watts(policy)
        if cap is None:
            assert policy.cap_pct is not None
            return self._throttle_for_percent(policy.cap_pct, note, observed)
        self.metrics.set_cap(policy.label, cap)
        observed["capWatts"] = cap
        result = self._enforce(cap, routing, sample, observed)
        if note:
            result = TickResult(
                result.backend, result.result, f"{note}: {result.message}", observed
            )
        return result

    def _clear_caps(self) -> None:
        self.metrics.set_cap(None, None)
        self.metrics.set_percent(None, None)

    # -- giving the node back (a removed cap, stale desired state) ---------------------------

    def _holds(self) -> bool:
        """Whether a limit this agent set is in force (host files, HTTP throttle or cap)."""
        if self.settings.simulate_only:
            return False
        return self.http.holds() or self.cpufreq.holds_originals() or self.rapl.holds_originals()

    def _give_back(self, routing: Routing) -> release.Released:
        held = self.http.held()
        maximum = None
        if held is not None and held.cap_watts is not None:
            maximum = self.http.maximum_for(self.inputs.hardware_max_w, routing.source_http)
        released = release.give_back(
            self.node, self.cpufreq, self.rapl, held, maximum, self.user_agent
        )
        if not released.problems:
            self.http.forget()
            self.dvfs.reset()
            self.metrics.set_dvfs(None, None, 0, 0, 0)
        return released

    def _enforce(
        self,
        cap: float,
        routing: Routing,
        sample: EnergySample | None,
        observed: dict[str, Any],
    ) -> TickResult:
        if self.settings.simulate_only:
            plan = self._cpu.plan(self.hardware)
            log.info(
                "simulate-only: node %s would cap CPU packages at %g W via %s", self.node, cap, plan
            )
            return TickResult(
                Backend.NONE,
                Result.APPLIED,
                f"simulate-only: would cap CPU packages at {cap:g} W via {plan}; nothing written",
                observed,
            )
        outcome = self._cpu.cap(cap, self.hardware, self.dvfs.throttling, observed)
        if isinstance(outcome, TickResult):
            if outcome.backend is Backend.RAPL and outcome.result is Result.APPLIED:
                self.dvfs.reset()
            return outcome
        # Pass this tick's host energy sample on: sampling the meter a second time at the
        # same instant yields no power reading.
        budget, shown = self._cpu.dvfs_budget(cap)
        return self.dvfs.tick(
            budget, lambda: self._read_power(routing, sample), self._cpu, observed, outcome, shown
        )

    # -- percent of the hardware maximum -------------------------------------------------------

    def _cap_watts(self, policy: PowerPolicy) -> tuple[float | None, str]:
        """The cap in watts (watts win over percent) and, for a percent, how it resolved."""
        if policy.cap_watts is not None:
            self.metrics.set_percent(None, None)
            return policy.cap_watts, ""
        assert policy.cap_pct is not None
        maximum = self._cpu.maximum(self.inputs.hardware_max_w)
        self.metrics.set_percent(policy.cap_pct, maximum.watts)
        return percent.describe(policy.cap_pct, maximum)

    def _throttle_for_percent(
        self, pct: float, why: str, observed: dict[str, Any]
    ) -> TickResult:
        """Percent of an unknown maximum: throttle by ``100 - pct`` instead, and say so."""
        self.metrics.set_cap(None, None)
        throttle = percent.throttle_for(pct)
        observed["throttlePct"] = throttle
        summary = f"cap {pct:g}% of max: {why}; throttling CPUs by {throttle}% instead"
        if self.settings.simulate_only:
            return TickResult(
                Backend.NONE, Result.APPLIED, f"simulate-only: {summary}; nothing written", observed
            )
        if isinstance(self._cpu, NoCpuControl):
            return TickResult(Backend.NONE, Result.BLOCKED, self._cpu.why, observed)
        self.dvfs.reset()  # this throttle is not the DVFS controller's: a later cap starts afresh
        self.metrics.set_backend(Backend.DVFS)
        self.metrics.set_dvfs(None, None, throttle, 0, 0)
        if not self._cpu.throttle_available():
            return TickResult(Backend.NONE, Result.BLOCKED, NO_BACKEND, observed)
        result, message = self._cpu.throttle(0.0, throttle, observed)
        if result is not Result.APPLIED:
            summary = f"{message}; {summary}"
        return TickResult(Backend.DVFS, result, summary, observed)

    def _sample_host_energy(self, routing: Routing) -> EnergySample | None:
        if routing.source is not SourceType.HOST:
            return None
        sample = self.meter.sample(self.clock())
        self.metrics.set_rapl(sample.energy_uj, sample.power_w)
        return sample

    # -- DVFS ----------------------------------------------------------------------------------

    def _read_power(self, routing: Routing, sample: EnergySample | None) -> float | None:
        if routing.source is SourceType.HTTP:
            assert routing.source_http is not None
            return cpu_http.read_package_power(routing.source_http, self.node, self.user_agent)
        if routing.source is SourceType.HOST:
            if sample is None:
                sample = self.meter.sample(self.clock())
            return sample.total_w
        return None  # 'none' and 'prometheus' sources give no reading: the controller holds

    # -- shutdown ------------------------------------------------------------------------------

    def restore(self) -> list[str]:
        """Put back every host value this controller changed; returns the problems."""
        if self.settings.simulate_only or not self.settings.restore_on_exit:
            return []
        problems = self.host.restore() + self.gpu.restore()
        if not problems:
            self.originals.clear()
        return problems + self._release_http_throttle_on_stop()

    def _release_http_throttle_on_stop(self) -> list[str]:
        """The DVFS throttle this controller posted over HTTP, taken back (a RAPL cap it
        applied there stays: the desired state did not change, and the next agent
        enforces the same)."""
        held = self.http.held()
        released, problem = release.release_throttle(self.node, held, self.user_agent)
        if released and held is not None:
            self.http.forget()  # the worker is stopping: nothing of ours to take back again
            log.info("node %s: HTTP throttle released at %s", self.node,
                     held.endpoint.url(self.node))
        return [problem] if problem is not None else []
