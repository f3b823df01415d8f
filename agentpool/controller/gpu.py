"""One node's GPU power caps, tick by tick: HTTP control, or NVML / AMD SMI on the host.

Driven by :class:`~agentpool.controller.node.NodeController` beside the CPU
reconcile, and never able to stop it: every failure becomes the
``control.gpu`` status (:class:`GpuTickResult`), never an exception. A node
whose desired state has no GPU cap reports nothing (``None``: no
``control.gpu`` at all) until it has had one; after that it reports
``none``. The desired cap is the same :class:`GpuCap` whichever API it came
from: the NodePowerProfile (profile API) or the NodeTwin (current API); the
node controller parses it, and the routing, once per input
(:class:`GpuDesired`). As in Joulie's agent, a node whose Node object has no
allocatable GPU resource is ``blocked`` before any backend is asked. A
percent cap over HTTP resolves against the telemetry's per-GPU maximum, else
the node's NodeHardware ``capRangePerGpu``, else the board power of its GPU
product (the hardware catalog's, else agentpool's table of data sheets; the
supervisor sends these in the inputs). Each tick's result
carries what the backend showed of the GPUs (:class:`~agentpool.results.GpuSeen`)
for the node's NodeHardware.

Originals (the cap found before the first write) go into the node's journal
and are put back by :meth:`GpuController.restore` on graceful stop, also by
a worker restarted after a crash, and when the GPU cap is removed from the
desired state (at the second tick without one, as the CPU cap:
:mod:`agentpool.controller.release`).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from agentpool.backends import gpu_http
from agentpool.backends.gpu.amdsmi import AmdSmiGpus
from agentpool.backends.gpu.host import (
    JOURNAL_PREFIX,
    DeviceInfo,
    DeviceOutcome,
    HostGpus,
    journal_key,
    journal_owner,
    journaled,
)
from agentpool.backends.gpu.nvml import NvmlGpus
from agentpool.backends.gpucaps import DeviceLimits, resolve_cap
from agentpool.backends.sysfs.files import Originals
from agentpool.controller.gpu_metrics import ALL_DEVICES, GpuMetrics
from agentpool.controller.release import CapRelease, Released
from agentpool.errors import GpuUnavailableError, HttpBackendError, ProfileError
from agentpool.hardware.gpu_host import seen_devices
from agentpool.hardware.labels import GpuFacts, Hardware, allocatable_gpus, discover_gpus
from agentpool.jsonnumbers import json_number
from agentpool.resources.desired import GpuCap
from agentpool.resources.nodeinputs import GpuRange, NodeInputs
from agentpool.resources.routing import ControlType, GpuControlMode, GpuRouting, HttpEndpoint
from agentpool.results import GpuBackend, GpuSeen, GpuTickResult, Result

log = logging.getLogger(__name__)

HTTP_JOURNAL = "http"
NO_GPU = (
    "node has no allocatable GPU resources (no */gpu or gpu.intel.com/i915 in its "
    "status.allocatable): nothing to cap"
)
POOL_HOST = (
    "host GPU control (NVML / AMD SMI) works only in daemonset mode, on the node itself; "
    "this pool pod controls the node remotely: set controls.gpu to http"
)
_SEVERITY = {Result.APPLIED: 0, Result.NONE: 0, Result.BLOCKED: 1, Result.ERROR: 2}


@dataclass(frozen=True)
class GpuDesired:
    """A node's desired GPU state, as the node controller parsed it from this input."""

    cap: GpuCap | None = None
    """None: nothing to enforce."""
    routing: GpuRouting = dataclasses.field(default_factory=GpuRouting)
    """Where the GPU controls go (TelemetryProfile, else TELEMETRY_*)."""
    error: ProfileError | None = None
    """The desired state or the routing is malformed: the GPU status says so."""
    cpu_error: bool = False
    """The error is in a CPU field of a NodePowerProfile: that is the CPU status's to
    report, and the GPU status reports it only once the node has had a GPU cap."""


@dataclass(frozen=True)
class GpuSettings:
    """What the GPU controller reads of the agent's settings."""

    simulate_only: bool = False
    remote: bool = False
    """A pool pod: host GPU control would cap this pod's own host, so it is refused."""


class GpuController:
    """Enforces one node's GPU cap. Not thread safe; one per worker."""

    def __init__(
        self,
        settings: GpuSettings,
        node: str,
        metrics: GpuMetrics,
        originals: Originals,
        user_agent: str,
        host: list[HostGpus] | None = None,
    ) -> None:
        self.settings = settings
        self.node = node
        self.metrics = metrics
        self.originals = originals
        self.user_agent = user_agent
        """The same identity as the CPU controller's requests (docs/modes.md: elastic pool)."""
        self._nvml = NvmlGpus(originals)
        self._amd = AmdSmiGpus(originals)
        self._host_override = host
        self._active = False
        self._last_refusal = ""
        self._facts: GpuFacts | None = None
        self._http_endpoint: HttpEndpoint | None = None
        """The GPU control endpoint last posted to: where restore() sends the original."""
        self._cap_release = CapRelease(node, "GPU cap")

    # -- one tick ------------------------------------------------------------------------------

    def tick(
        self, desired: GpuDesired, inputs: NodeInputs, hardware: Hardware
    ) -> GpuTickResult | None:
        """One tick of the desired state the node controller parsed from ``inputs``."""
        if desired.error is not None and (not desired.cpu_error or self._active):
            self._active = True
            return self._export(
                GpuTickResult(GpuBackend.NONE, Result.ERROR, str(desired.error)), {}
            )
        return self.enforce(desired.cap, desired.routing, inputs, hardware)

    def enforce(
        self, cap: GpuCap | None, routing: GpuRouting, inputs: NodeInputs, hardware: Hardware
    ) -> GpuTickResult | None:
        """Enforce an already parsed cap: the part both APIs share (a NodeTwin's
        ``spec.gpu.powerCap`` parses with :func:`~agentpool.resources.parse.parse_gpu_cap`)."""
        if cap is None:
            if not self._active:
                self.metrics.set_backend(None)
                return None
            why = "no spec.gpu.powerCap"
            outcome, more = self._cap_release.step(why, self._holds(), self._give_back)
            return self._export(
                GpuTickResult(GpuBackend.NONE, outcome, f"nothing to enforce: {why}{more}"), {}
            )
        self._active = True
        self._cap_release.enforcing()
        facts = self._discover(inputs, hardware)
        observed: dict[str, Any] = {
            "capWattsPerGpu": cap.watts_per_gpu,
            "capPctOfMax": cap.pct_of_max,
            "discovered": facts.as_json(),
        }
        if self.settings.simulate_only:
            how = "HTTP control" if routing.control is ControlType.HTTP else "host NVML / AMD SMI"
            log.info(
                "simulate-only: node %s would cap GPUs at %s via %s", self.node, cap.describe(), how
            )
            message = (
                f"simulate-only: would cap GPUs at {cap.describe()} via {how}; nothing written"
            )
            return self._export(GpuTickResult(GpuBackend.NONE, Result.APPLIED, message), {})
        if not allocatable_gpus(inputs.gpu_allocatable)[0]:
            # As Joulie's agent: the scheduler places no GPU work here, whatever a library
            # or an endpoint would accept (a KWOK node's simulator caps GPUs it has not got).
            return self._export(GpuTickResult(GpuBackend.NONE, Result.BLOCKED, NO_GPU), {})
        if routing.control is ControlType.NONE:
            message = "controls.gpu.type is none in the TelemetryProfile: no GPU control backend"
            return self._export(GpuTickResult(GpuBackend.NONE, Result.BLOCKED, message), {})
        if routing.control is ControlType.HTTP:
            return self._http(cap, routing, observed, inputs.gpu_range)
        if self.settings.remote:
            # The GPUs NVML would see are this pod's own host's, not the node's: a pool
            # worker must never cap them (sysfs has SYSFS_ROOT per node; NVML has nothing like it).
            return self._export(GpuTickResult(GpuBackend.NONE, Result.BLOCKED, POOL_HOST), {})
        return self._host(cap, hardware, observed, facts)

    def _discover(self, inputs: NodeInputs, hardware: Hardware) -> GpuFacts:
        facts = discover_gpus(inputs.labels, inputs.gpu_allocatable, hardware.gpu_vendors)
        if facts != self._facts:
            log.info(
                "node %s GPUs per the Node: count %s, model %s, vendor %s (from %s)",
                self.node,
                facts.count,
                facts.model or "unknown",
                facts.vendor or "unknown",
                facts.source,
            )
            self._facts = facts
        return facts

    def _export(
        self, result: GpuTickResult, readings: dict[str, tuple[float | None, float | None]]
    ) -> GpuTickResult:
        self.metrics.set_backend(result.backend)
        self.metrics.set_devices(readings)
        return result

    # -- HTTP ----------------------------------------------------------------------------------

    def _http(
        self, cap: GpuCap, routing: GpuRouting, observed: dict[str, Any], known: GpuRange | None
    ) -> GpuTickResult:
        endpoint = routing.control_http
        assert endpoint is not None
        if routing.mode is GpuControlMode.CLOCKS:
            message = "controls.gpu.http.mode clocks is not implemented: use powercap or auto"
            return self._export(GpuTickResult(GpuBackend.HTTP, Result.BLOCKED, message), {})
        telemetry = None
        if routing.telemetry_http is not None:
            try:
                telemetry = gpu_http.read_gpu_telemetry(
                    routing.telemetry_http, self.node, self.user_agent)
            except HttpBackendError as exc:
                error = GpuTickResult(GpuBackend.HTTP, Result.ERROR, f"GPU telemetry: {exc}")
                return self._export(error, {})
        if telemetry is not None and (telemetry.present is False or telemetry.count == 0):
            message = "no GPU on this node (telemetry: gpu.present false)"
            return self._export(GpuTickResult(GpuBackend.HTTP, Result.BLOCKED, message), {})
        limits = None
        if telemetry is not None and telemetry.min_cap is not None and telemetry.max_cap:
            limits = DeviceLimits(telemetry.min_cap, telemetry.max_cap, telemetry.default_cap)
        elif cap.watts_per_gpu is None and known is not None:
            # Joulie's simulator sends no per-GPU maximum: NodeHardware's, else the product's.
            limits = DeviceLimits(known.min_watts or 0.0, known.max_watts)
            observed["maxCapWattsPerGpuFrom"] = known.source
        if limits is None and cap.watts_per_gpu is None:
            message = (
                "capPctOfMax needs each GPU's maximum, and neither the GPU telemetry "
                "(gpu.maxCapWattsPerGpu), the node's NodeHardware (capRangePerGpu), the "
                "hardware catalog nor agentpool's table of data sheets (for the GPU product "
                "label) gives one"
            )
            return self._export(GpuTickResult(GpuBackend.HTTP, Result.BLOCKED, message), {})
        if limits is not None:
            target, watts = resolve_cap(cap, limits)
        else:
            target = watts = cap.watts_per_gpu or 0.0
        if telemetry is not None:
            original = telemetry.cap_applied or telemetry.default_cap
            if original is not None:
                self.originals.remember(
                    journal_key(HTTP_JOURNAL, self.node),
                    round(original * 1000),
                    journal_owner(HTTP_JOURNAL),
                )
        try:
            answer = gpu_http.post_gpu_cap(endpoint, self.node, watts, self.user_agent)
        except HttpBackendError as exc:
            error = GpuTickResult(GpuBackend.HTTP, Result.ERROR, f"GPU control: {exc}")
            return self._export(error, {})
        self._http_endpoint = endpoint
        observed.update({"targetWattsPerGpu": target, "requestedWattsPerGpu": watts})
        if telemetry is not None:
            observed.update(
                {"gpuCount": telemetry.count, "powerWattsTotal": telemetry.power_watts_total}
            )
        if answer.state:
            observed["controlState"] = answer.state  # apart, so it cannot overwrite ours
        cap_now = json_number(answer.state.get("gpuCapWattsPerGpuApplied"))
        if cap_now is None and answer.result is Result.APPLIED:
            cap_now = watts
        power = telemetry.power_watts_total if telemetry is not None else None
        seen = None
        if telemetry is not None:
            vendor = (telemetry.vendor or "").lower()
            seen = GpuSeen(
                vendor=vendor if vendor in ("nvidia", "amd") else None,
                count=telemetry.count,
                min_watts=telemetry.min_cap,
                max_watts=telemetry.max_cap,
                default_watts=telemetry.default_cap,
                cap_watts=cap_now,
                control=True,
            )
        message = answer.message
        if answer.result is Result.APPLIED:
            # The cap in our words, then the endpoint's (which may say nothing of it).
            posted = f"{watts:g} W per GPU"
            asked = cap.describe()
            what = posted if asked == posted else f"{asked} -> {posted}"
            message = f"GPU cap {what} over HTTP: {message}"
        result = GpuTickResult(GpuBackend.HTTP, answer.result, message, observed, seen)
        return self._export(result, {ALL_DEVICES: (cap_now, power)})

    # -- host ----------------------------------------------------------------------------------

    def _backends(self, hardware: Hardware) -> list[HostGpus]:
        if self._host_override is not None:
            return self._host_override
        # NFD labels are hints: an AMD-only node tries AMD SMI first; both are tried anyway.
        if "AMD" in hardware.gpu_vendors and "NVIDIA" not in hardware.gpu_vendors:
            return [self._amd, self._nvml]
        return [self._nvml, self._amd]

    def _host(
        self, cap: GpuCap, hardware: Hardware, observed: dict[str, Any], facts: GpuFacts
    ) -> GpuTickResult:
        reasons: list[str] = []
        for backend in self._backends(hardware):
            try:
                outcomes = backend.apply(cap)
            except GpuUnavailableError as exc:
                reasons.append(str(exc))
                continue
            if not outcomes:
                reasons.append(f"{backend.kind.value}: no GPU found")
                continue
            return self._host_result(backend.kind, cap, outcomes, observed)
        if facts.count:
            reasons.append(f"the Node reports {facts.count} GPU(s) ({facts.source})")
        elif facts.count == 0:
            reasons.append(f"the Node reports no GPU ({facts.source})")
        message = "no GPU to cap on this node: " + "; ".join(reasons)
        result = GpuTickResult(GpuBackend.NONE, Result.BLOCKED, message, observed)
        return self._export(result, {})

    def _host_result(
        self,
        kind: GpuBackend,
        cap: GpuCap,
        outcomes: list[DeviceOutcome],
        observed: dict[str, Any],
    ) -> GpuTickResult:
        observed["devices"] = [o.as_json() for o in outcomes]
        first = outcomes[0]
        seen = seen_devices(kind, len(outcomes), DeviceInfo(
            first.index, first.ident, first.name, first.limits, first.applied_watts, None))
        readings = {str(o.index): (o.applied_watts, o.power_watts) for o in outcomes}
        applied = [o for o in outcomes if o.result is Result.APPLIED]
        capped = ", ".join(f"GPU {o.index} {o.applied_watts:g} W" for o in applied)
        refused = [o for o in outcomes if o.result is not Result.APPLIED]
        if not refused:
            message = f"{len(applied)} GPU(s) capped at {cap.describe()}: {capped}"
            result = GpuTickResult(kind, Result.APPLIED, message, observed, seen)
            return self._export(result, readings)
        worst = max((o.result for o in refused), key=_SEVERITY.__getitem__)
        parts = [f"GPU {o.index} ({o.ident}) {o.result.value}: {o.reason}" for o in refused]
        message = "; ".join(parts)
        if applied:
            message += f"; {len(applied)} other GPU(s) capped at {cap.describe()}: {capped}"
        if message != self._last_refusal:  # once per change, not every tick
            log.warning("node %s: GPUs not all capped: %s", self.node, message)
            self._last_refusal = message
        return self._export(GpuTickResult(kind, worst, message, observed, seen), readings)

    # -- giving the GPUs back: a removed cap, a graceful stop -----------------------------------

    def _holds(self) -> bool:
        """Whether an original GPU cap is journaled, i.e. a cap of ours is in force."""
        if self.settings.simulate_only:
            return False
        return any(path.parts[:1] == (JOURNAL_PREFIX,) for path, _ in self.originals.items())

    def _give_back(self) -> Released:
        problems = self.restore()
        done = () if problems else ("original GPU caps restored",)
        return Released(done, tuple(problems))


    def restore(self) -> list[str]:
        """Put back the original GPU caps (host devices and the HTTP endpoint)."""
        problems = self._restore_http()
        for backend in (self._nvml, self._amd):
            problems += backend.restore()
        return problems

    def _restore_http(self) -> list[str]:
        for path, milliwatts in self.originals.items(journal_owner(HTTP_JOURNAL)):
            if journaled(path, HTTP_JOURNAL) != self.node:
                continue
            watts = milliwatts / 1000.0
            if self._http_endpoint is None:
                return [f"GPU cap {watts:g} W not restored: no GPU control endpoint known"]
            try:
                answer = gpu_http.post_gpu_cap(
                    self._http_endpoint, self.node, watts, self.user_agent)
            except HttpBackendError as exc:
                return [f"GPU cap {watts:g} W not restored: {exc}"]
            if answer.result is not Result.APPLIED:
                return [f"GPU cap {watts:g} W not restored: {answer.message}"]
            self.originals.forget(path)
        return []
