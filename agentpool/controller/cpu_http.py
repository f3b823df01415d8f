"""CPU control over the node's HTTP control endpoint (Joulie's simulator, a BMC gateway).

One of the node controller's CPU strategies (:mod:`agentpool.controller.cpu_host`
is the other), chosen once per input by
:class:`~agentpool.controller.node.NodeController` when the node's control is
``http``. It lives as long as the controller, because it remembers what it
left in force (the throttle and the RAPL cap it last posted): whoever takes
over releases it (RAPL on the same endpoint; a removed cap and stale desired
state, through :func:`agentpool.controller.release.give_back`).
"""

from __future__ import annotations

from typing import Any

from agentpool.backends import cpu_http
from agentpool.backends.httpclient import ControlAnswer
from agentpool.controller import percent
from agentpool.controller.release import HttpHeld
from agentpool.hardware.labels import Hardware
from agentpool.resources.routing import ControlMode, HttpEndpoint, Routing
from agentpool.results import Backend, Result, TickResult


class HttpCpu:
    """RAPL over HTTP first, unless the endpoint's mode is ``dvfs``; DVFS throttles after
    (in mode ``rapl`` too, as Joulie's agent does: it reads only ``dvfs``)."""

    def __init__(self, node: str, user_agent: str) -> None:
        self.node = node
        self.user_agent = user_agent
        self.endpoint = HttpEndpoint("")
        self.mode = ControlMode.AUTO
        self._source: HttpEndpoint | None = None
        self._throttle: tuple[str, int] | None = None
        """(endpoint URL, pct) last posted, so that whoever takes over can release it."""
        self._held_endpoint: HttpEndpoint | None = None
        """The endpoint of the last request that left a throttle or a cap in force."""
        self._held_cap: float | None = None
        """The RAPL cap last applied over HTTP (raised when the desired state goes)."""
        self._maxima = percent.TelemetryMaximum(node, user_agent)

    def route(self, routing: Routing) -> HttpCpu:
        """Follow this input's routing (its control endpoint is set: control is http)."""
        assert routing.control_http is not None
        self.endpoint, self.mode = routing.control_http, routing.mode
        self._source = routing.source_http
        return self

    def plan(self, hardware: Hardware) -> str:
        return f"HTTP control {self.endpoint.url(self.node)} (mode {self.mode.value})"

    def maximum(self, hardware_max_w: float | None) -> percent.Maximum:
        """From the node's NodeHardware, else what its telemetry reports."""
        return self.maximum_for(hardware_max_w, self._source)

    def maximum_for(
        self, hardware_max_w: float | None, telemetry: HttpEndpoint | None
    ) -> percent.Maximum:
        return percent.http_maximum(hardware_max_w, self._maxima.from_telemetry(telemetry))

    def cap(
        self, cap: float, hardware: Hardware, throttled: bool, observed: dict[str, Any]
    ) -> TickResult | str:
        """Post the RAPL cap: the tick's result, or why DVFS has to take over."""
        if self.mode is ControlMode.DVFS:
            return "HTTP control mode is dvfs"
        answer = self._post(cpu_http.RAPL_ACTION, cap, -1, observed)
        if answer.result is Result.APPLIED:
            self._held_cap, self._held_endpoint = cap, self.endpoint
            self._release_throttle(cap)
            # The cap in our words, then the endpoint's: a gateway answers the same words
            # to every request, and the message is all a NodeTwin's status carries.
            message = f"RAPL cap {cap:g} W over HTTP: {answer.message}"
            return TickResult(Backend.RAPL, Result.APPLIED, message, observed)
        return f"RAPL {answer.result.value}: {answer.message}"

    def dvfs_budget(self, cap: float) -> tuple[float, str]:
        """The cap as posted: the endpoint's reading and its cap are the same quantity."""
        return cap, f"{cap:g} W"

    def dvfs_levels(self) -> int | None:
        """An endpoint takes any percentage."""
        return None

    def throttle_available(self) -> bool:
        return True

    def throttle(self, cap: float, pct: int, observed: dict[str, Any]) -> tuple[Result, str]:
        """Post the throttle; (the endpoint's result, its message)."""
        answer = self._post(cpu_http.DVFS_ACTION, cap, pct, observed)
        self._throttle = (self.endpoint.url(self.node), pct)
        self._held_endpoint = self.endpoint
        return answer.result, answer.message

    def holds(self) -> bool:
        """Whether a throttle or a RAPL cap posted by this controller is in force."""
        throttled = self._throttle is not None and self._throttle[1] > 0
        return throttled or self._held_cap is not None

    def held(self) -> HttpHeld | None:
        """What this controller's requests left in force, and where (None: nothing)."""
        if self._held_endpoint is None:
            return None
        throttle = self._throttle[1] if self._throttle is not None else 0
        return HttpHeld(self._held_endpoint, throttle, self._held_cap)

    def forget(self) -> None:
        """Given back (a removed cap, stale desired state): nothing of ours is in force."""
        self._throttle = None
        self._held_endpoint = None
        self._held_cap = None

    def _post(
        self, action: str, cap: float, throttle_pct: int, observed: dict[str, Any]
    ) -> ControlAnswer:
        answer = cpu_http.post_control(
            self.endpoint, self.node, action, cap, throttle_pct, self.user_agent
        )
        if answer.state:
            # Kept apart so the endpoint cannot overwrite what the agent measured.
            observed["controlState"] = answer.state
        return answer

    def _release_throttle(self, cap: float) -> None:
        """RAPL took over: release the throttle posted to this same endpoint, if any."""
        if self._throttle is None or self._throttle[1] == 0:
            return
        if self._throttle[0] == self.endpoint.url(self.node):
            cpu_http.post_control(
                self.endpoint, self.node, cpu_http.DVFS_ACTION, cap, 0, self.user_agent
            )
        self._throttle = None
