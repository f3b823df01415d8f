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
:data:`ABSENT_CONFIRM_S` apart both lack it, so one odd answer does not drop
a cache.

An answer that is an error (a 5xx, the 503 a starting server answers) is
not "not served": it is said as it is, and every kind is kept. Nor is an
answer from a server that is not ready yet. A kube-apiserver coming back
from a restart serves its core paths at once, but answers 503 "server is
starting" for custom resources while its CRD informer syncs, then 404 for
their group version until its discovery controller has registered them,
and its ``/readyz`` fails for seconds after that (measured on 1.20:
:data:`agentpool.sim.apiserver.server.STARTING_PHASES`). So an answer that
would lose a kind, or leave the setting unworkable, is taken only once the
server's ``/readyz`` answers 200 (or cannot say: 401, 403 or 404, where the
two looks above are the only guard); until then the last known kinds are
kept, and the log says once that the server is starting and once that it is
ready. When an outage ends (:meth:`~agentpool.kube.reachability.Reachability.when_back`)
discovery looks again at once, and at the server's readiness first.

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
from agentpool.kube.reachability import level_of
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
READYZ_CANNOT_SAY = frozenset({401, 403, 404})
"""``/readyz`` answers that say nothing of readiness (a role without
``system:public-info-viewer``, a server without the endpoint)."""
FAILING_SHOWN = 4
"""The failing ``/readyz`` checks named in the log, at most."""

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
        self.starting: str | None = None
        """What the API server is doing instead of being ready (``starting: /readyz answers
        HTTP 500 ...``), from the last look at its ``/readyz``; None when it is ready."""
        self._answered = False
        self._absent_since: dict[Resource, float] = {}
        self._logged: tuple[object, ...] | None = None
        self._back = threading.Event()
        """Set when an outage ended: the next discovery looks at the server's readiness."""
        api.reachability.when_back(self._server_back)
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

    def _server_back(self) -> None:
        """An outage ended (in the thread whose request got the answer): look soon."""
        self._back.set()
        self._wake.set()

    def discover(self) -> None:
        """One discovery, and the callbacks it calls for; the thread's body, public for tests."""
        looked = self._back.is_set()
        if looked:
            self._back.clear()
            self._look_at_readiness()
        try:
            names = self._api.served()
        except KubeError as exc:
            self._failed(exc)
            return
        if self._stop.is_set():  # stopped while asking: start and log nothing more
            return
        now = self._clock()
        answer = frozenset(k for k in JOULIE_KINDS if k.value in names)
        losing = self._would_lose(answer)
        if (losing or self.starting is not None) and not looked:
            self._look_at_readiness()
        if losing and self.starting is not None:
            if not self._answered:
                self.problem = (
                    f"Kubernetes API at {self._api.reachability.server} is {self.starting}; "
                    "the Joulie kinds it serves are known once it is ready"
                )
                self._log(self.watched, self.problem, logging.WARNING)
                return
            answer |= self.served  # not taken from a server that is not ready
        self._answered = True
        self.served = answer
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

    def _would_lose(self, answer: frozenset[Resource]) -> bool:
        """Whether taking ``answer`` would lose a kind known to be served, or leave the
        setting unworkable."""
        return bool(self.served - answer) or problem_for(self.setting, answer) is not None

    def _look_at_readiness(self) -> None:
        """Ask the server's ``/readyz``; say once when it is not ready, and once when it
        is again."""
        was, self.starting = self.starting, self._not_ready()
        server = self._api.reachability.server
        if self.starting is not None and was is None:
            kept = ", ".join(k.value for k in JOULIE_KINDS if k in self.served) or "none yet"
            log.info(
                "Kubernetes API at %s is %s; discovery keeps the Joulie kinds last found "
                "(%s) until it is ready", server, self.starting, kept,
            )
        elif self.starting is None and was is not None:
            log.info(
                "Kubernetes API at %s is ready: discovery goes by what it serves again", server
            )

    def _not_ready(self) -> str | None:
        """What the server does instead of being ready, from its ``/readyz``; None when it
        is ready or cannot say."""
        try:
            status, body = self._api.readyz()
        except KubeError as exc:
            return f"not answering /readyz ({exc})"
        if status == 200 or status in READYZ_CANNOT_SAY:
            return None
        failing = [
            line[3:].split(" ", 1)[0] for line in body.splitlines() if line.startswith("[-]")
        ]
        doing = "shutting down" if "shutdown" in failing else "starting"
        shown = ", ".join(failing[:FAILING_SHOWN]) + (", ..." if failing[FAILING_SHOWN:] else "")
        return f"{doing}: /readyz answers HTTP {status}" + (
            f" (failing: {shown})" if failing else ""
        )

    def _failed(self, exc: KubeError) -> None:
        """Discovery got no answer, or an error for one: nothing is taken from it."""
        if isinstance(exc, KubeUnreachableError):
            log.debug("API discovery failed: %s", exc)  # the outage is told once
            if not self._answered:
                self.problem = f"API discovery failed: {exc}"
            return
        temporary = isinstance(exc, KubeTemporaryError)
        if not self._answered:
            self.problem = f"API discovery failed: {exc}"
            self._log(self.watched, self.problem, logging.WARNING if temporary else logging.ERROR)
            return
        kept = ", ".join(k.value for k in JOULIE_KINDS if k in self.watched) or "none"
        self._log(self.watched, self.problem, level_of(exc),
                  f"API discovery failed: {exc}; the Joulie kinds watched are kept ({kept})")

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

    def _log(
        self,
        watched: frozenset[Resource],
        problem: str | None,
        level: int = logging.ERROR,
        failure: str | None = None,
    ) -> None:
        """Once per distinct state, not every round; ``failure``: a discovery that failed
        while the agent works, said at ``level``."""
        state = (watched, problem, self.forbidden, failure)
        if self._logged == state:
            return
        self._logged = state
        if failure is not None:
            log.log(level, "%s", failure)
            return
        if problem is not None:
            log.log(level, "not ready: %s; retrying until it is", problem)
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
        if self.problem is not None or self.starting is not None:
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
