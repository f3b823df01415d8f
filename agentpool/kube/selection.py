"""Which Joulie API to speak, decided by API discovery at start, retried until one is served.

Joulie's operator has two generations: the profile API (NodePowerProfile +
TelemetryProfile) and the current one (NodeTwin + NodeHardware, routing by
environment). ``JOULIE_API`` names one, or ``auto`` lets discovery decide:
NodeTwin when ``nodetwins.joulie.io`` is served, else the profile API.

When what is needed is not served (no Joulie CRD installed yet, or the named
API's CRD missing), the agent does not crash-loop: :class:`ApiSelector` keeps
asking in a thread, with backoff, and meanwhile :attr:`ApiSelector.problem`
says why on ``/readyz`` and in the log. A CRD installed later is picked up.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from agentpool.backoff import Backoff
from agentpool.config.options import JoulieApi
from agentpool.errors import KubeError
from agentpool.kube.api import KubeApi, Resource

log = logging.getLogger(__name__)

FIRST_RETRY_S = 1.0
MAX_RETRY_S = 10.0
"""Short: an operator installing the CRDs should not wait long for the agent to notice."""


@dataclass(frozen=True)
class Selection:
    """The API chosen, and the kinds to list and watch for it."""

    api: JoulieApi
    """NODETWIN or PROFILES (never AUTO)."""
    resources: tuple[Resource, ...]
    """Nodes first, then the API's kinds; TelemetryProfiles too on NodeTwin where served."""


def choose(setting: JoulieApi, served: set[str]) -> Selection | str:
    """The selection for ``setting`` given the served resources, or why there is none."""
    twins = Resource.NODE_TWINS.value in served
    profiles = Resource.NODE_POWER_PROFILES.value in served
    telemetry = Resource.TELEMETRY_PROFILES.value in served
    if setting is JoulieApi.NODETWIN or (setting is JoulieApi.AUTO and twins):
        if not twins:
            return "JOULIE_API=nodetwin but nodetwins.joulie.io is not served (CRD not installed?)"
        kinds = [Resource.NODES, Resource.NODE_TWINS]
        if Resource.NODE_HARDWARES.value in served:
            kinds.append(Resource.NODE_HARDWARES)
        if telemetry:  # a TelemetryProfile targeting a node still routes it
            kinds.append(Resource.TELEMETRY_PROFILES)
        return Selection(JoulieApi.NODETWIN, tuple(kinds))
    if not profiles:
        if setting is JoulieApi.PROFILES:
            return (
                "JOULIE_API=profiles but nodepowerprofiles.joulie.io is not served "
                "(CRD not installed?)"
            )
        return (
            "neither nodetwins.joulie.io nor nodepowerprofiles.joulie.io is served: "
            "install Joulie's CRDs (the chart's crds/)"
        )
    kinds = [Resource.NODES, Resource.NODE_POWER_PROFILES]
    if telemetry:
        kinds.append(Resource.TELEMETRY_PROFILES)
    return Selection(JoulieApi.PROFILES, tuple(kinds))


class ApiSelector:
    """Runs discovery in a thread until a selection is made, then calls ``on_selected`` once."""

    def __init__(
        self,
        api: KubeApi,
        setting: JoulieApi,
        on_selected: Callable[[Selection], None],
        first_retry_s: float = FIRST_RETRY_S,
        max_retry_s: float = MAX_RETRY_S,
    ) -> None:
        self._api = api
        self._setting = setting
        self._on_selected = on_selected
        self._first = first_retry_s
        self._max = max_retry_s
        self._stop = threading.Event()
        self.selected = threading.Event()
        self.selection: Selection | None = None
        self.problem: str | None = "API discovery has not answered yet"
        """Why no API is selected yet (for ``/readyz``); None once selected."""
        self._thread = threading.Thread(target=self._run, name="api-selector", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _attempt(self) -> Selection | str:
        try:
            served = self._api.served()
        except KubeError as exc:
            return f"API discovery failed: {exc}"
        return choose(self._setting, served)

    def _run(self) -> None:
        backoff = Backoff(initial_s=self._first, max_s=self._max)
        last_problem = None
        while not self._stop.is_set():
            outcome = self._attempt()
            if isinstance(outcome, Selection):
                self.selection = outcome
                log.info(
                    "Joulie API: %s (JOULIE_API=%s); watching %s",
                    outcome.api.value,
                    self._setting.value,
                    ", ".join(r.value for r in outcome.resources),
                )
                self._on_selected(outcome)
                # Only now: readiness must never see "selected" before the informers exist.
                self.problem = None
                self.selected.set()
                return
            self.problem = outcome
            if outcome != last_problem:  # once per distinct problem, not every retry
                log.error("not ready: %s; retrying until it is", outcome)
                last_problem = outcome
            self._stop.wait(backoff.next())
