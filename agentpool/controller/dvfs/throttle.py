"""What a DVFS controller looks like to the node controller, and which one settings pick.

Two controllers implement it: Joulie's (:mod:`agentpool.controller.dvfs.joulie`)
and the adaptive one (:mod:`agentpool.controller.dvfs.adaptive`).
The node controller only feeds readings, applies ``state.throttle_pct`` and
reports, so either can run a node; ``DVFS_CONTROLLER`` chooses.
"""

from __future__ import annotations

from typing import Protocol

from agentpool.config.options import DvfsControllerKind
from agentpool.config.settings import DvfsSettings
from agentpool.controller.dvfs.adaptive import AdaptiveDvfsController
from agentpool.controller.dvfs.joulie import DvfsAction, DvfsController


class ThrottleState(Protocol):
    """The state both controllers export (metrics, the status' ``observed``)."""

    @property
    def observed(self) -> float | None: ...
    @property
    def ema(self) -> float | None:
        """The filtered power the controller judges by."""

    @property
    def above(self) -> int: ...
    @property
    def below(self) -> int: ...
    @property
    def throttle_pct(self) -> int: ...


class ThrottleController(Protocol):
    @property
    def state(self) -> ThrottleState: ...

    def step(self, observed: float | None, cap_watts: float, now: float) -> DvfsAction | None:
        """Feed one reading taken at ``now`` (monotonic seconds); maybe change the throttle."""

    def band(self, cap_watts: float) -> tuple[float, float]:
        """(lower, upper) power outside which the status says the cap is not held."""

    def set_levels(self, levels: int | None) -> None:
        """How many equal throttle steps the actuator realises (None: any percentage)."""

    def reset(self) -> None:
        """Forget everything (RAPL took over, or the cap went away)."""


def make_controller(settings: DvfsSettings) -> ThrottleController:
    if settings.controller is DvfsControllerKind.JOULIE:
        return DvfsController(settings)
    return AdaptiveDvfsController(settings)
