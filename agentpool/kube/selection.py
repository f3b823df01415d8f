"""Which Joulie kinds to watch: found by API discovery, and kept up to date while the agent runs.

Joulie's operator has two generations: the profile API (NodePowerProfile +
TelemetryProfile) and the current one (NodeTwin + NodeHardware, routing by
environment). ``JOULIE_API=auto`` (the default) watches every Joulie kind that
is served, and each node then follows the objects that exist for it (see
:meth:`agentpool.supervisor.clusterview.ClusterView.api_of`); ``profiles`` or
``nodetwin`` restricts the agent to that API's kinds (on ``nodetwin`` a
TelemetryProfile targeting a node still routes it).

CRDs come and go while the agent runs (the operator installed after the
agent, an upgrade that drops the old API), so discovery never stops:
:class:`KindDiscovery` asks again every :data:`PERIOD_S` (sooner after an
informer failed, see :meth:`KindDiscovery.wake`), calls ``on_added`` for a
kind that became served and ``on_removed`` for one that stopped being
served. A kind counts as removed only once two discoveries at least
:data:`ABSENT_CONFIRM_S` apart both lack it, so one odd answer (a server
still loading its CRDs after a restart) does not drop a cache.

A kind can be served and still out of reach: RBAC may not let the agent
list and watch it (Joulie's own chart grants its agent nodetwins and
nodehardwares only, while the CRDs of the profile API stay installed: Helm
never deletes CRDs). Before watching a kind, discovery asks the server
whether it may (a SelfSubjectAccessReview per verb); a kind it may not read
is left unwatched, as if not served, said once in the log and in
:attr:`KindDiscovery.note` (``/readyz``'s detail), and asked about again
every :data:`ACCESS_RECHECK_S`, so a role granted later is picked up.

When the setting cannot work (no desired-state kind served at all, or the
named API's missing or out of reach) the agent does not crash-loop:
:attr:`KindDiscovery.problem` says why on ``/readyz`` and once in the log,
and discovery goes on, with backoff, until it can.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable

from agentpool.backoff import Backoff
from agentpool.config.options import JoulieApi
from agentpool.errors import KubeError, KubeTemporaryError, KubeUnreachableError
from agentpool.kube.api import GROUP, KubeApi, Resource
from agentpool.proctitle import name_thread

log = logging.getLogger(__name__)

FIRST_RETRY_S = 1.0
MAX_RETRY_S = 10.0
"""While not ready: short, an operator installing the CRDs should not wait long for the agent."""
PERIOD_S = 10.0
"""While ready: how often discovery looks for CRDs installed or removed."""
ABSENT_CONFIRM_S = 3.0
"""A kind missing from discovery is dropped once still missing this much later."""
WAKE_SPACING_S = 1.0
"""The least time between two discoveries, however often informers fail."""
ACCESS_RECHECK_S = 60.0
"""A served kind RBAC keeps the agent from reading is asked about again this often."""
READ_VERBS = ("list", "watch")
"""What an informer needs."""

JOULIE_KINDS = (
    Resource.NODE_POWER_PROFILES,
    Resource.TELEMETRY_PROFILES,
    Resource.NODE_TWINS,
    Resource.NODE_HARDWARES,
)
"""Every Joulie kind the agent may watch (the chart's ``crds/``)."""
KINDS: dict[JoulieApi, tuple[Resource, ...]] = {
    JoulieApi.AUTO: JOULIE_KINDS,
    JoulieApi.PROFILES: (Resource.NODE_POWER_PROFILES, Resource.TELEMETRY_PROFILES),
    JoulieApi.NODETWIN: (
        Resource.NODE_TWINS, Resource.NODE_HARDWARES, Resource.TELEMETRY_PROFILES
    ),
}
"""The kinds each setting watches, wherever they are served."""


def crd(kind: Resource) -> str:
    """The CRD's name, as ``kubectl get crd`` shows it."""
    return f"{kind.value}.{GROUP}"


def kinds_for(setting: JoulieApi, served: Iterable[Resource]) -> frozenset[Resource]:
    """The kinds to watch for ``setting`` among those served."""
    return frozenset(KINDS[setting]) & frozenset(served)


def unreadable(kinds: Iterable[Resource]) -> str:
    """``a.joulie.io, b.joulie.io``: served, but RBAC does not let the agent read them."""
    return ", ".join(crd(k) for k in JOULIE_KINDS if k in frozenset(kinds))


def problem_for(
    setting: JoulieApi, served: Iterable[Resource], forbidden: Iterable[Resource] = ()
) -> str | None:
    """Why ``setting`` cannot work with these kinds served, ``forbidden`` among them out of
    RBAC's reach (for ``/readyz``); None if it can."""
    kinds = frozenset(served)
    usable = kinds - frozenset(forbidden)
    rbac = "but RBAC does not let this agent list and watch"
    for only, kind in ((JoulieApi.NODETWIN, Resource.NODE_TWINS),
                       (JoulieApi.PROFILES, Resource.NODE_POWER_PROFILES)):
        if setting is only and kind not in kinds:
            return f"JOULIE_API={setting.value} but {crd(kind)} is not served (CRD not installed?)"
        if setting is only and kind not in usable:
            return f"JOULIE_API={setting.value} {rbac} {crd(kind)}"
    desired = {Resource.NODE_TWINS, Resource.NODE_POWER_PROFILES}
    if setting is JoulieApi.AUTO and not desired & usable:
        if desired & kinds:
            return (
                f"neither {crd(Resource.NODE_TWINS)} nor {crd(Resource.NODE_POWER_PROFILES)} "
                f"can be read: served, {rbac} {unreadable(desired & kinds)}"
            )
        missing = ", ".join(crd(k) for k in JOULIE_KINDS if k not in kinds)
        return (
            f"neither {crd(Resource.NODE_TWINS)} nor {crd(Resource.NODE_POWER_PROFILES)} "
            f"is served: install Joulie's CRDs (the chart's crds/; missing: {missing})"
        )
    return None


class KindDiscovery:
    """Runs discovery in a thread for the agent's whole life; see the module docstring.

    ``on_added``/``on_removed`` run in that thread; an exception they raise is
    logged and the kind is tried again at the next discovery.
    """

    def __init__(
        self,
        api: KubeApi,
        setting: JoulieApi,
        on_added: Callable[[Resource], None],
        on_removed: Callable[[Resource], None],
        period_s: float = PERIOD_S,
        first_retry_s: float = FIRST_RETRY_S,
        max_retry_s: float = MAX_RETRY_S,
        absent_confirm_s: float = ABSENT_CONFIRM_S,
        clock: Callable[[], float] = time.monotonic,
        wake: threading.Event | None = None,
    ) -> None:
        self._api = api
        self.setting = setting
        self._on_added = on_added
        self._on_removed = on_removed
        self._period = period_s
        self._first = first_retry_s
        self._max = max_retry_s
        self._confirm = absent_confirm_s
        self._clock = clock
        self._stop = threading.Event()
        self._wake = wake or threading.Event()
        """Set: discover again soon (see :meth:`wake`); given, others may set it before this
        object exists (the informers, made first, whose failures call for it)."""
        self.served: frozenset[Resource] = frozenset()
        """The Joulie kinds the last successful discovery listed."""
        self.watched: frozenset[Resource] = frozenset()
        """The kinds ``on_added`` was called for and ``on_removed`` not since."""
        self.forbidden: frozenset[Resource] = frozenset()
        """Served kinds of the setting that RBAC does not let this agent list and watch."""
        self._access_due: dict[Resource, float] = {}
        """When to ask RBAC again about a served kind (never again once it may be read)."""
        self.problem: str | None = "API discovery has not answered yet"
        """Why the agent cannot work yet (for ``/readyz``); None once it can."""
        self._answered = False
        self._absent_since: dict[Resource, float] = {}
        self._logged: tuple[frozenset[Resource], str | None, frozenset[Resource]] | None = None
        self._thread = threading.Thread(target=self._run, name="api-discovery", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def wake(self) -> None:
        """Discover again soon (an informer failed: its CRD may be gone). Thread safe."""
        self._wake.set()

    def discover(self) -> None:
        """One discovery, and the callbacks it calls for; the thread's body, public for tests."""
        try:
            names = self._api.served()
        except KubeError as exc:
            if not self._answered:
                self.problem = f"API discovery failed: {exc}"
            if isinstance(exc, KubeUnreachableError):
                log.debug("API discovery failed: %s", exc)  # the outage is told once
            else:
                self._log(self.watched, f"API discovery failed: {exc}")
            return
        if self._stop.is_set():  # stopped while asking: start and log nothing more
            return
        self._answered = True
        now = self._clock()
        self.served = frozenset(k for k in JOULIE_KINDS if k.value in names)
        self._review_access(now)
        wanted = kinds_for(self.setting, self.served - self.forbidden)
        for kind in wanted:
            self._absent_since.pop(kind, None)
        for kind in [k for k in JOULIE_KINDS if k in self.watched & self.forbidden]:
            # RBAC said so: no second discovery needed to confirm it.
            if self._call(self._on_removed, kind):
                self.watched -= {kind}
                self._absent_since.pop(kind, None)
        for kind in [k for k in JOULIE_KINDS if k in self.watched - wanted]:
            since = self._absent_since.setdefault(kind, now)
            if now - since >= self._confirm and self._call(self._on_removed, kind):
                self.watched -= {kind}
                del self._absent_since[kind]
                log.info("%s is no longer served: stopped watching it", crd(kind))
        for kind in [k for k in JOULIE_KINDS if k in wanted - self.watched]:
            if self._call(self._on_added, kind):
                self.watched |= {kind}
        # Only now: readiness must never see a working setting before its informers exist.
        self.problem = problem_for(self.setting, self.served, self.forbidden)
        self._log(self.watched, self.problem)

    @property
    def note(self) -> str | None:
        """What the agent goes without although it works (``/readyz``'s detail); None if
        nothing."""
        if not self.forbidden:
            return None
        return (
            f"not watched: {unreadable(self.forbidden)} (served, but RBAC does not let "
            "this agent list and watch them)"
        )

    def _review_access(self, now: float) -> None:
        """Ask RBAC about each served kind of the setting not known to be readable yet."""
        for kind in [k for k in self._access_due if k not in self.served]:
            del self._access_due[kind]  # installed again later: ask again then
        self.forbidden &= self.served
        for kind in [k for k in JOULIE_KINDS if k in self.served and k in KINDS[self.setting]]:
            if now < self._access_due.get(kind, -math.inf):
                continue
            try:
                answers = [self._api.allowed(verb, kind) for verb in READ_VERBS]
            except KubeTemporaryError as exc:
                # Not known yet: treated as readable (its informer's errors then say more)
                # and asked about again at the next discovery.
                log.debug("%s: access review failed: %s", crd(kind), exc)
                continue
            if False in answers:
                self.forbidden |= {kind}
                self._access_due[kind] = now + ACCESS_RECHECK_S
            else:  # allowed, or a server that does not say: its informer will tell
                if kind in self.forbidden:
                    log.info("%s may be listed and watched now", crd(kind))
                self.forbidden -= {kind}
                self._access_due[kind] = math.inf

    def _call(self, callback: Callable[[Resource], None], kind: Resource) -> bool:
        try:
            callback(kind)
        except Exception:  # a bug must not end discovery: the next round tries again
            log.exception("%s: %s failed; trying again", crd(kind), callback)
            return False
        return True

    def _log(self, watched: frozenset[Resource], problem: str | None) -> None:
        """Once per distinct state, not every round."""
        state = (watched, problem, self.forbidden)
        if self._logged == state:
            return
        self._logged = state
        if problem is not None:
            log.error("not ready: %s; retrying until it is", problem)
            return
        log.info(
            "Joulie kinds watched (JOULIE_API=%s): %s",
            self.setting.value,
            ", ".join(k.value for k in JOULIE_KINDS if k in watched),
        )
        if self.forbidden:
            log.warning(
                "%s; the agent works without them (asked again every %gs)",
                self.note, ACCESS_RECHECK_S,
            )

    def _delay(self, retry: float) -> float:
        if self.problem is not None:
            return retry
        delay = self._period
        if self._absent_since:  # confirm a removal without waiting a whole period
            delay = min(delay, self._confirm)
        return delay

    def _run(self) -> None:
        name_thread()
        backoff = Backoff(initial_s=self._first, max_s=self._max)
        while not self._stop.is_set():
            self._wake.clear()
            self.discover()
            if self.problem is None:
                backoff.reset()
            delay = self._delay(backoff.next() if self.problem is not None else self._first)
            started = self._clock()
            if self._wake.wait(delay) and not self._stop.is_set():
                # Woken early: still leave WAKE_SPACING_S between two discoveries.
                self._stop.wait(max(0.0, WAKE_SPACING_S - (self._clock() - started)))
