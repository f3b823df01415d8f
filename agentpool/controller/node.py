"""One node's controller: turn desired state into RAPL or DVFS action, tick by tick.

A plain object a worker process drives: ``update()`` when the supervisor
sends new inputs, ``tick()`` every reconcile interval (or at once after an
update), ``restore()`` on graceful stop. It never talks to Kubernetes; the
:class:`TickResult` it returns is what the status should say.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentpool.backends import httpclient
from agentpool.backends.httpclient import ControlAnswer
from agentpool.backends.sysfs.cpufreq import CpufreqHost
from agentpool.backends.sysfs.files import Originals
from agentpool.backends.sysfs.rapl import EnergyMeter, EnergySample, PackageZones, RaplHost
from agentpool.config.settings import Settings, StaleAction
from agentpool.controller import percent, release, stale
from agentpool.controller.dvfs.throttle import make_controller
from agentpool.controller.gpu import GpuController
from agentpool.controller.gpu_metrics import GpuMetrics
from agentpool.controller.messages import control_setting, no_control, why_none
from agentpool.controller.metrics import NodeMetrics
from agentpool.errors import AgentError, HttpBackendError, ProfileError, RaplUnavailableError
from agentpool.hardware.labels import discover
from agentpool.spec.gpu import GpuBackend, GpuTickResult
from agentpool.spec.parse import NT, parse_power_profile, parse_telemetry_profile
from agentpool.spec.values import (
    Backend,
    ControlMode,
    ControlType,
    Hardware,
    HttpEndpoint,
    NodeInputs,
    PowerPolicy,
    Result,
    Routing,
    SourceType,
    TickResult,
)

log = logging.getLogger(__name__)

NO_BACKEND = "RAPL unavailable, no cpufreq host control, and no HTTP control backend"


class NodeController:
    """Enforces one node's NodePowerProfile. Not thread safe; one per worker."""

    def __init__(
        self,
        settings: Settings,
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
        self.dvfs = make_controller(settings.dvfs)
        self.inputs = NodeInputs(node)
        self.hardware: Hardware | None = None
        # In a pod the hostname is the pod's name: a daemonset pod without POD_NAME still says.
        self.user_agent = httpclient.user_agent(
            settings.pod_name or socket.gethostname(), settings.pool_shard_id
        )
        self._http_throttle: tuple[str, int] | None = None
        """(endpoint, pct) last posted over HTTP, so RAPL recovery can release it."""
        self._http_endpoint: HttpEndpoint | None = None
        """The control endpoint of the last request that left a throttle or a cap in force."""
        self._http_cap: float | None = None
        """The RAPL cap last applied over HTTP (released when the desired state goes)."""
        self._cap_release = release.CapRelease(node)
        self._over_message: tuple[tuple[float, int, str], str] | None = None
        """(cap, throttle, reason) and the message of a DVFS hold above the band."""
        self.gpu = GpuController(
            settings, node, GpuMetrics(node, metrics.registry), self.originals
        )
        self._stale = False
        """The last tick acted on stale desired state."""
        self._maxima = percent.TelemetryMaximum(node, self.user_agent)

    def update(self, inputs: NodeInputs) -> None:
        if (
            inputs.power_profile_note
            and inputs.power_profile_note != self.inputs.power_profile_note
        ):
            log.warning("node %s: %s", self.node, inputs.power_profile_note)
        self.inputs = inputs

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
            self._over_message = None  # a later DVFS episode starts its own message
        self.metrics.reconcile_seconds.observe(max(0.0, self.clock() - started))
        return result

    def _gpu_tick(self) -> GpuTickResult | None:
        # GPU caps are a concern of their own (agentpool.controller.gpu); whatever they
        # run into, the CPU side of the tick goes on and the GPU status says what failed.
        try:
            return self.gpu.tick(self.inputs, discover(self.inputs.labels))
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
            return stale.relax(self._give_back(self._routing()), timeout)
        result = self._reconcile()
        if self._stale:
            self._stale = False
            log.info("node %s: desired state confirmed again, enforcing it", self.node)
            result = stale.confirmed_again(result)
        return result

    # -- the reconcile, in the order of the contract (section 4) -----------------------------

    def _reconcile(self) -> TickResult:
        hardware = discover(self.inputs.labels)
        if hardware != self.hardware:
            log.info(
                "node %s hardware: cpu vendor %s, gpus %s",
                self.node,
                hardware.cpu_vendor or "unknown",
                ",".join(hardware.gpu_vendors) or "none",
            )
            self.hardware = hardware
        try:
            policy = self._policy()
            routing = self._routing()
        except ProfileError as exc:
            self._clear_caps()
            return TickResult(Backend.NONE, Result.ERROR, str(exc))
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
        cap, note = self._cap_watts(policy, routing)
        if cap is None:
            assert policy.cap_pct is not None
            return self._throttle_for_percent(policy.cap_pct, note, routing, hardware, observed)
        self.metrics.set_cap(policy.label, cap)
        observed["capWatts"] = cap
        result = self._enforce(cap, routing, hardware, sample, observed)
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
        throttled = self._http_throttle is not None and self._http_throttle[1] > 0
        return (
            throttled
            or self._http_cap is not None
            or self.cpufreq.holds_originals()
            or self.rapl.holds_originals()
        )

    def _give_back(self, routing: Routing) -> release.Released:
        held = None
        maximum = None
        if self._http_endpoint is not None:
            throttle = self._http_throttle[1] if self._http_throttle is not None else 0
            held = release.HttpHeld(self._http_endpoint, throttle, self._http_cap)
            if self._http_cap is not None:
                maximum = percent.http_maximum(
                    self.inputs.hardware_max_w, self._maxima.from_telemetry(routing.source_http)
                )
        released = release.give_back(
            self.node, self.cpufreq, self.rapl, held, maximum, self.user_agent
        )
        if not released.problems:
            self._http_throttle = None
            self._http_cap = None
            self._http_endpoint = None
            self.dvfs.reset()
            self.metrics.set_dvfs(None, None, 0, 0, 0)
        return released

    def _enforce(
        self,
        cap: float,
        routing: Routing,
        hardware: Hardware,
        sample: EnergySample | None,
        observed: dict[str, Any],
    ) -> TickResult:
        if self.settings.simulate_only:
            plan = self._plan(routing, hardware)
            log.info(
                "simulate-only: node %s would cap CPU packages at %g W via %s", self.node, cap, plan
            )
            return TickResult(
                Backend.NONE,
                Result.APPLIED,
                f"simulate-only: would cap CPU packages at {cap:g} W via {plan}; nothing written",
                observed,
            )
        if routing.control is ControlType.NONE:
            return TickResult(Backend.NONE, Result.BLOCKED, no_control(routing), observed)
        if routing.control is ControlType.HTTP:
            return self._http_control(cap, routing, observed, sample)
        return self._host_control(cap, routing, hardware, sample, observed)

    def _policy(self) -> PowerPolicy | None:
        if self.inputs.nodetwin_api:
            twin = self.inputs.node_twin
            return parse_power_profile(twin, kind=NT) if twin is not None else None
        raw = self.inputs.power_profile
        return parse_power_profile(raw) if raw is not None else None

    # -- percent of the hardware maximum -------------------------------------------------------

    def _cap_watts(self, policy: PowerPolicy, routing: Routing) -> tuple[float | None, str]:
        """The cap in watts (watts win over percent) and, for a percent, how it resolved."""
        if policy.cap_watts is not None:
            self.metrics.set_percent(None, None)
            return policy.cap_watts, ""
        assert policy.cap_pct is not None
        if routing.control is ControlType.HTTP:
            maximum = percent.http_maximum(
                self.inputs.hardware_max_w, self._maxima.from_telemetry(routing.source_http)
            )
        else:
            maximum = percent.host_maximum(self.rapl.zones())
        self.metrics.set_percent(policy.cap_pct, maximum.watts)
        return percent.describe(policy.cap_pct, maximum)

    def _throttle_for_percent(
        self,
        pct: float,
        why: str,
        routing: Routing,
        hardware: Hardware,
        observed: dict[str, Any],
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
        if routing.control is ControlType.NONE:
            return TickResult(Backend.NONE, Result.BLOCKED, no_control(routing), observed)
        self.dvfs.reset()  # this throttle is not the DVFS controller's: a later cap starts afresh
        self.metrics.set_backend(Backend.DVFS)
        self.metrics.set_dvfs(None, None, throttle, 0, 0)
        if routing.control is ControlType.HTTP:
            assert routing.control_http is not None
            answer = httpclient.post_control(
                routing.control_http, self.node, httpclient.DVFS_ACTION, 0.0, throttle
            )
            self._http_throttle = (routing.control_http.url(self.node), throttle)
            self._http_endpoint = routing.control_http
            if answer.result is not Result.APPLIED:
                summary = f"{answer.message}; {summary}"
            return TickResult(Backend.DVFS, answer.result, summary, observed)
        if not self.cpufreq.available():
            return TickResult(Backend.NONE, Result.BLOCKED, NO_BACKEND, observed)
        self.cpufreq.apply(throttle)
        for reading in self.cpufreq.readings():
            self.metrics.set_cpu_freq(reading.cpu, reading.cur_khz, reading.max_khz)
        return TickResult(Backend.DVFS, Result.APPLIED, summary, observed)

    def _routing(self) -> Routing:
        """A TelemetryProfile targeting the node wins; else the TELEMETRY_* variables."""
        raw = self.inputs.telemetry_profile
        return parse_telemetry_profile(raw) if raw is not None else self.settings.routing

    def _plan(self, routing: Routing, hardware: Hardware) -> str:
        if routing.control is ControlType.HTTP:
            assert routing.control_http is not None
            return f"HTTP control {routing.control_http.url(self.node)} (mode {routing.mode.value})"
        if routing.control is ControlType.NONE:
            return f"no control ({control_setting(routing)} none)"
        zones = [z.label for z in self.rapl.zones() if z.limit_file is not None]
        if zones and hardware.rapl_capable:
            return f"RAPL PL1 on {', '.join(zones)}"
        if self.cpufreq.available():
            return f"DVFS on {len(self.cpufreq.policies())} cpufreq policies"
        return "nothing (" + NO_BACKEND + ")"

    def _sample_host_energy(self, routing: Routing) -> EnergySample | None:
        if routing.source is not SourceType.HOST:
            return None
        sample = self.meter.sample(self.clock())
        self.metrics.set_rapl(sample.energy_uj, sample.power_w)
        return sample

    # -- HTTP control --------------------------------------------------------------------------

    def _http_control(
        self,
        cap: float,
        routing: Routing,
        observed: dict[str, Any],
        sample: EnergySample | None,
    ) -> TickResult:
        endpoint = routing.control_http
        assert endpoint is not None
        reason = "HTTP control mode is dvfs"
        if routing.mode is not ControlMode.DVFS:
            answer = self._post_control(endpoint, httpclient.RAPL_ACTION, cap, -1, observed)
            if answer.result is Result.APPLIED:
                self._http_cap, self._http_endpoint = cap, endpoint
                self._release_http_throttle(cap)
                self.dvfs.reset()
                return TickResult(Backend.RAPL, Result.APPLIED, answer.message, observed)
            if routing.mode is ControlMode.RAPL:
                return TickResult(Backend.RAPL, answer.result, answer.message, observed)
            reason = f"RAPL {answer.result.value}: {answer.message}"
        # Pass this tick's host energy sample on: sampling the meter a second time at the
        # same instant yields no power reading.
        return self._dvfs_tick(cap, routing, observed, reason, sample)

    def _post_control(
        self,
        endpoint: HttpEndpoint,
        action: str,
        cap: float,
        throttle_pct: int,
        observed: dict[str, Any],
    ) -> ControlAnswer:
        answer = httpclient.post_control(
            endpoint, self.node, action, cap, throttle_pct, self.user_agent
        )
        if answer.state:
            # Kept apart so the endpoint cannot overwrite what the agent measured.
            observed["controlState"] = answer.state
        return answer

    def _release_http_throttle(self, cap: float) -> None:
        if self._http_throttle is None or self._http_throttle[1] == 0:
            return
        endpoint_url = self._http_throttle[0]
        routing = self._routing()
        if routing.control_http is not None and routing.control_http.url(self.node) == endpoint_url:
            httpclient.post_control(
                routing.control_http, self.node, httpclient.DVFS_ACTION, cap, 0, self.user_agent
            )
        self._http_throttle = None

    # -- host control --------------------------------------------------------------------------

    def _host_control(
        self,
        cap: float,
        routing: Routing,
        hardware: Hardware,
        sample: EnergySample | None,
        observed: dict[str, Any],
    ) -> TickResult:
        if hardware.rapl_capable:
            try:
                applied = self.rapl.apply(cap)
            except RaplUnavailableError as exc:
                reason = f"RAPL unavailable: {exc}"
            else:
                self._release_host_throttle()
                observed["raplLimitsUw"] = applied
                self.metrics.set_rapl_limits(applied)
                zones = ", ".join(applied)
                message = f"RAPL PL1 {cap:g} W over {len(applied)} package zone(s) ({zones})"
                total_w = sum(applied.values()) / 1_000_000
                if abs(total_w - cap) > 0.005 * cap:  # beyond the zones' range, or below it
                    message += f", clamped to {total_w:g} W by the zones' PL1 range"
                return TickResult(Backend.RAPL, Result.APPLIED, message, observed)
        else:
            reason = f"CPU vendor {hardware.cpu_vendor} has no RAPL"
        if not self.cpufreq.available():
            return TickResult(Backend.NONE, Result.BLOCKED, NO_BACKEND, observed)
        return self._dvfs_tick(cap, routing, observed, reason, sample)

    def _release_host_throttle(self) -> None:
        if self.dvfs.state.throttle_pct or self.cpufreq.holds_originals():
            problems = self.cpufreq.restore()
            if problems:
                log.warning("node %s: could not release DVFS throttle: %s", self.node, problems)
            else:
                log.info("node %s: RAPL took over, cpufreq limits restored", self.node)
        self.dvfs.reset()

    # -- DVFS ----------------------------------------------------------------------------------

    def _read_power(self, routing: Routing, sample: EnergySample | None) -> float | None:
        if routing.source is SourceType.HTTP:
            assert routing.source_http is not None
            return httpclient.read_package_power(routing.source_http, self.node, self.user_agent)
        if routing.source is SourceType.HOST:
            if sample is None:
                sample = self.meter.sample(self.clock())
            return sample.total_w
        return None  # 'none' and 'prometheus' sources give no reading: the controller holds

    def _dvfs_tick(
        self,
        cap: float,
        routing: Routing,
        observed: dict[str, Any],
        reason: str,
        sample: EnergySample | None = None,
    ) -> TickResult:
        self.metrics.set_backend(Backend.DVFS)
        try:
            power = self._read_power(routing, sample)
        except HttpBackendError as exc:
            self._export_dvfs(cap)
            return TickResult(Backend.DVFS, Result.ERROR, f"telemetry: {exc}", observed)
        before = self.dvfs.state.throttle_pct
        # Host cpufreq throttles whole policies; an HTTP endpoint takes any percentage.
        host = routing.control is not ControlType.HTTP
        self.dvfs.set_levels(len(self.cpufreq.policies()) if host else None)
        action = self.dvfs.step(power, cap, self.clock())
        state = self.dvfs.state
        if action is not None:
            self.metrics.count_action(action.value)
            log.info(
                "node %s: DVFS %s to %d%% (ema %.1f W, cap %g W)",
                self.node,
                action.value,
                state.throttle_pct,
                state.ema or 0.0,
                cap,
            )
        result, message = Result.APPLIED, ""
        if routing.control is ControlType.HTTP:
            assert routing.control_http is not None
            answer = self._post_control(
                routing.control_http, httpclient.DVFS_ACTION, cap, state.throttle_pct, observed
            )
            self._http_throttle = (routing.control_http.url(self.node), state.throttle_pct)
            self._http_endpoint = routing.control_http
            result, message = answer.result, answer.message
        else:
            self.cpufreq.apply(state.throttle_pct)
            for reading in self.cpufreq.readings():
                self.metrics.set_cpu_freq(reading.cpu, reading.cur_khz, reading.max_khz)
        self._export_dvfs(cap)
        observed.update(
            {
                "throttlePct": state.throttle_pct,
                "observedPowerWatts": None if state.observed is None else round(state.observed, 3),
                "emaPowerWatts": None if state.ema is None else round(state.ema, 3),
            }
        )
        summary = self._dvfs_summary(cap, before, reason)
        if message and result is not Result.APPLIED:
            summary = f"{message}; {summary}"
        return TickResult(Backend.DVFS, result, summary, observed)

    def _dvfs_summary(self, cap: float, before: int, reason: str) -> str:
        """The status message: honest about a cap not held, stable while nothing changes.

        Inside the controller's band the message names no power (that goes in
        ``observed``) and so stays the same tick after tick: the supervisor
        writes the status only when the message changes. Above the band it
        says by how much; while the throttle then holds (pinned at 100 %, or
        waiting for a lagging node) it keeps the watts of the first such tick,
        so a node that cannot get under its cap rewrites its status once, not
        every tick. Below the band it speaks only of a release that happened.
        """
        s = self.dvfs.state
        low, high = self.dvfs.band(cap)
        held = before == s.throttle_pct
        move = f"holding {before}%" if held else f"{before}% -> {s.throttle_pct}%"
        if s.ema is not None and s.ema > high:
            key = (cap, s.throttle_pct, reason)
            if held and self._over_message is not None and self._over_message[0] == key:
                return self._over_message[1]
            message = f"throttling: {s.ema:.0f} W > cap {cap:g} W, {move}; {reason}"
            self._over_message = (key, message) if held else None
            return message
        self._over_message = None
        if s.ema is not None and s.ema < low and not held:
            return f"releasing: {s.ema:.0f} W, under cap {cap:g} W, {move}; {reason}"
        return f"DVFS throttle {s.throttle_pct}% for cap {cap:g} W; {reason}"

    def _export_dvfs(self, cap: float) -> None:
        s = self.dvfs.state
        self.metrics.set_dvfs(s.observed, s.ema, s.throttle_pct, s.above, s.below)
        self.metrics.set_cap_error(None if s.ema is None else s.ema - cap)

    # -- shutdown ------------------------------------------------------------------------------

    def restore(self) -> list[str]:
        """Put back every host value this controller changed; returns the problems."""
        if self.settings.simulate_only or not self.settings.restore_on_exit:
            return []
        problems = self.cpufreq.restore() + self.rapl.restore() + self.gpu.restore()
        if not problems:
            self.originals.clear()
        return problems
